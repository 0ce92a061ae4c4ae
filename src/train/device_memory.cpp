// Device memory queries.
#include "train/device_memory.hpp"

#include <c10/core/CachingDeviceAllocator.h>

#include "train/cpu_allocations.hpp"

namespace superoffload::train {

std::optional<DeviceMemoryInfo> device_memory_info(at::Device device) {
  if (device.is_cpu()) return std::nullopt;
  const auto [free, total] = c10::getDeviceAllocator(device.type())->getMemoryInfo(device.index());
  return DeviceMemoryInfo{static_cast<double>(free), static_cast<double>(total)};
}

std::optional<double> device_peak_bytes(at::Device device) {
  if (device.is_cpu()) {
    if (!counting_cpu_allocations()) return std::nullopt;
    return static_cast<double>(cpu_allocated_peak_bytes());
  }
  const auto stats = c10::getDeviceAllocator(device.type())->getDeviceStats(device.index());
  return static_cast<double>(
      stats.allocated_bytes[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)].peak);
}

std::optional<double> device_reserved_peak_bytes(at::Device device) {
  if (device.is_cpu()) return std::nullopt;
  const auto stats = c10::getDeviceAllocator(device.type())->getDeviceStats(device.index());
  return static_cast<double>(
      stats.reserved_bytes[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)].peak);
}

void reset_device_peak(at::Device device) {
  if (device.is_cpu()) {
    reset_cpu_allocation_peak();
  } else {
    c10::getDeviceAllocator(device.type())->resetPeakStats(device.index());
  }
}

}  // namespace superoffload::train
