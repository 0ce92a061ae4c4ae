// The squared L2 norm of a CPU sub-group's gradient, on the optimizer's own thread pool.
#pragma once

#include <cstddef>

#include "optim/thread_pool.hpp"

namespace superoffload::optim {

// Sum of squares in double; +inf when an element is not finite (NaN too). The same data and
// pool size give the same bits every call, whichever thread finishes first.
double squared_norm(ThreadPool& pool, const float* data, size_t n);

}  // namespace superoffload::optim
