// What the accelerator's memory holds, through LibTorch's device-generic allocator interface
// (no CUDA headers): free and total bytes (cudaMemGetInfo underneath) for the start-up check
// against the memory plan, and the caching allocator's peaks of allocated and reserved bytes
// for metrics.h5's /train/device_peak_bytes and device_reserved_peak_bytes. On the CPU the
// allocated peak is that of LibTorch's CPU allocations where they are counted
// (train/cpu_allocations.hpp); there is no free memory to ask for and nothing reserved.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

namespace superoffload::train {

struct DeviceMemoryInfo {
  double free_bytes = 0, total_bytes = 0;
};
std::optional<DeviceMemoryInfo> device_memory_info(at::Device device);

// The most bytes the caching allocator had handed out since the last reset (its "allocated
// bytes" peak, what PyTorch's torch.cuda.max_memory_allocated reports); on the CPU the counted
// allocations' peak, nullopt where they are not counted.
std::optional<double> device_peak_bytes(at::Device device);
// The most bytes the caching allocator had reserved from the device (its segments: what
// torch.cuda.max_memory_reserved reports, and what an out-of-memory error is about); nullopt on
// the CPU.
std::optional<double> device_reserved_peak_bytes(at::Device device);
void reset_device_peak(at::Device device);

}  // namespace superoffload::train
