// Device memory queries.
#include "train/device_memory.hpp"

#include <c10/core/CachingDeviceAllocator.h>

namespace superoffload::train {

std::optional<DeviceMemoryInfo> device_memory_info(at::Device device) {
  if (device.is_cpu()) return std::nullopt;
  const auto [free, total] = c10::getDeviceAllocator(device.type())->getMemoryInfo(device.index());
  return DeviceMemoryInfo{static_cast<double>(free), static_cast<double>(total)};
}

std::optional<double> device_peak_bytes(at::Device device) {
  if (device.is_cpu()) return std::nullopt;
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
  if (!device.is_cpu()) c10::getDeviceAllocator(device.type())->resetPeakStats(device.index());
}

}  // namespace superoffload::train
