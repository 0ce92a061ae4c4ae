// LayerProfiler.
#include "zero/layer_profiler.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "base/timer.hpp"

namespace superoffload::zero {

LayerProfiler::LayerProfiler(at::Device device, size_t layers) : device_(device), host_s_(layers), open_(layers) {
  for (auto& row : host_s_) row.fill(0.0);
}

c10::Event* LayerProfiler::record() {
  // BACKEND_DEFAULT: an event that keeps its timestamp (PyTorch's default event does not).
  events_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
  const c10::impl::VirtualGuardImpl guard(device_.type());
  events_.back().record(guard.getStream(device_));
  return &events_.back();
}

void LayerProfiler::begin(size_t layer, ProfilePhase phase) {
  auto& open = open_.at(layer)[static_cast<size_t>(phase)];
  if (device_.is_cpu()) {
    open.start_s = base::now_s();
  } else {
    open.start_event = record();
  }
}

void LayerProfiler::end(size_t layer, ProfilePhase phase) {
  const auto p = static_cast<size_t>(phase);
  auto& open = open_.at(layer)[p];
  if (device_.is_cpu()) {
    host_s_[layer][p] += base::now_s() - open.start_s;
  } else {
    spans_.emplace_back(layer, p, open.start_event, record());
  }
}

std::vector<std::array<double, kProfilePhases>> LayerProfiler::seconds() const {
  auto out = host_s_;
  for (const auto& [layer, phase, start, end] : spans_) {
    end->synchronize();
    out[layer][phase] += start->elapsedTime(*end) / 1000.0;  // milliseconds
  }
  return out;
}

}  // namespace superoffload::zero
