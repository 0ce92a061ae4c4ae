// MappedRange and copy_from_mapping.
#include "io/mapped_range.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <csetjmp>
#include <csignal>
#include <mutex>

namespace superoffload::io {

std::optional<MappedRange> MappedRange::map(int fd, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return std::nullopt;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page, lead = offset - start;
  void* base = ::mmap(nullptr, lead + bytes, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (base == MAP_FAILED) return std::nullopt;
  ::madvise(base, lead + bytes, MADV_SEQUENTIAL);  // read once, front to back
  return MappedRange(static_cast<char*>(base), lead, lead + bytes);
}

MappedRange::MappedRange(MappedRange&& other) noexcept
    : base_(other.base_), lead_(other.lead_), length_(other.length_) {
  other.base_ = nullptr;
}

MappedRange::~MappedRange() {
  if (base_ != nullptr) ::munmap(base_, length_);
}

namespace {

thread_local sigjmp_buf* t_landing = nullptr;  // set while this thread copies from a mapping
struct sigaction g_previous {};

extern "C" void on_bus_error(int signal, siginfo_t* info, void* context) {
  if (sigjmp_buf* landing = t_landing) {
    t_landing = nullptr;
    siglongjmp(*landing, 1);
  }
  // Not a copy of ours: hand the signal to whoever had it before (Open MPI's backtrace, or
  // the default action) by restoring them; the faulting access repeats and reaches them.
  (void)signal, (void)info, (void)context;
  ::sigaction(SIGBUS, &g_previous, nullptr);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_bus_error;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace

bool copy_from_mapping(const std::function<void()>& copy) {
  install_handler();
  sigjmp_buf landing;
  if (sigsetjmp(landing, 1) != 0) return false;  // arrived here from on_bus_error
  t_landing = &landing;
  try {
    copy();
  } catch (...) {
    t_landing = nullptr;
    throw;
  }
  t_landing = nullptr;
  return true;
}

}  // namespace superoffload::io
