// LibTorch's CPU allocations, counted: on a CPU run, the analogue of a GPU's caching-allocator
// statistics. The tensors a GPU run holds on its device (parameter shards, gradients,
// activations, the loss chunk, the device share of the optimizer) are on a CPU run LibTorch's
// CPU allocations; the host buffers the program maps itself (the CPU share's optimizer state,
// offloaded activation checkpoints, staging) are not. Counting them lets a CPU run check the
// memory plan's device terms (metrics.h5's /train/device_peak_bytes against
// planned_device_bytes) and tests measure what a pass allocates.
//
// count_cpu_allocations() wraps the CPU allocator LibTorch has (its default, with its alignment,
// NUMA and profiler reporting) once per process; tensors allocated before keep their own
// deleters and are not counted. Each allocation carries its size in a 64-byte header, so the
// counts are two atomic additions: no lock, no table.
#pragma once

#include <cstdint>

namespace superoffload::train {

void count_cpu_allocations();
bool counting_cpu_allocations();

// Bytes held by counted allocations now, and the most held since the last reset_cpu_allocation_peak().
int64_t cpu_allocated_bytes();
int64_t cpu_allocated_peak_bytes();
void reset_cpu_allocation_peak();

}  // namespace superoffload::train
