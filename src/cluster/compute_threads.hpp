// LibTorch intra-op / OpenMP thread counts, set from the rank's binding (LibTorch's default
// of half the machine's cores is wrong for every rank of a multi-rank node).
#pragma once

namespace superoffload::cluster {

void set_compute_threads(int threads);
int compute_threads();

}  // namespace superoffload::cluster
