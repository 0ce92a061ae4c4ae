// count_cpu_allocations.
#include "train/cpu_allocations.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace superoffload::train {
namespace {

// Keeps LibTorch's 64-byte alignment of the data after it.
constexpr size_t kHeader = 64;

std::atomic<int64_t> g_live{0}, g_peak{0};

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t bytes) override {
    auto* base = static_cast<char*>(inner_->raw_allocate(bytes + kHeader));
    std::memcpy(base, &bytes, sizeof bytes);
    const int64_t now = g_live.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) + static_cast<int64_t>(bytes);
    for (int64_t peak = g_peak.load(std::memory_order_relaxed);
         now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed);) {
    }
    void* data = base + kHeader;
    // The pointer is its own context with a plain deleter, as the default allocator's are:
    // some kernels (oneDNN's bf16 products) allocate through raw_allocate, which needs that.
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override { std::memcpy(dest, src, count); }

  static void release(void* data) {
    if (data == nullptr) return;
    char* base = static_cast<char*>(data) - kHeader;
    size_t bytes = 0;
    std::memcpy(&bytes, base, sizeof bytes);
    g_live.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    instance()->inner_->raw_deallocate(base);
  }
  static CountingAllocator*& instance() {
    static CountingAllocator* installed = nullptr;
    return installed;
  }

 private:
  c10::Allocator* inner_;
};

}  // namespace

void count_cpu_allocations() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never freed: counted tensors may outlive every other static object.
    auto* counting = new CountingAllocator(c10::GetCPUAllocator());
    CountingAllocator::instance() = counting;
    // Above the default's priority (0), below none that a later caller would set on purpose.
    c10::SetCPUAllocator(counting, /*priority=*/1);
  });
}

bool counting_cpu_allocations() { return CountingAllocator::instance() != nullptr; }

int64_t cpu_allocated_bytes() { return g_live.load(std::memory_order_relaxed); }
int64_t cpu_allocated_peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void reset_cpu_allocation_peak() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace superoffload::train
