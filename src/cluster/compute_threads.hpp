// LibTorch intra-op / OpenMP thread counts, set from the rank's binding (LibTorch's default
// of half the machine's cores is wrong for every rank of a multi-rank node).
#pragma once

namespace superoffload::runtime {

void set_compute_threads(int threads);
int compute_threads();

}  // namespace superoffload::runtime
