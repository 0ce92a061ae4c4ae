// Thread counts through ATen's parallel API (which also sets OpenMP's and MKL's).
#include "cluster/compute_threads.hpp"

#include <ATen/Parallel.h>

#include <algorithm>

namespace superoffload::cluster {

void set_compute_threads(int threads) { at::set_num_threads(std::max(1, threads)); }

int compute_threads() { return at::get_num_threads(); }

}  // namespace superoffload::cluster
