// Watchdog.
#include "cluster/watchdog.hpp"

#include <chrono>
#include <sstream>

#include "base/timer.hpp"
#include "cluster/job_exit.hpp"

namespace superoffload::cluster {

using base::now_s;

Watchdog::Watchdog(double timeout_s, int rank) : timeout_s_(timeout_s), rank_(rank), since_s_(now_s()) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::progress(std::string activity) {
  std::lock_guard lock(mutex_);
  activity_ = std::move(activity);
  since_s_ = now_s();
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  // Check a few times per timeout, so the job ends soon after the limit.
  const double period = std::min(1.0, timeout_s_ / 4);
  double last_check_s = now_s();
  for (;;) {
    wake_.wait_for(lock, std::chrono::duration<double>(period), [&] { return stop_; });
    if (stop_) return;
    const double now = now_s();
    // This thread itself was not scheduled for far longer than it asked to sleep: the whole
    // process was paused (SIGSTOP, `scontrol suspend`, a frozen VM). That time is no rank's
    // fault: it is not counted. A rank stalled while this one runs is still caught.
    if (now - last_check_s > 2 * period + 1.0) since_s_ += now - last_check_s - period;
    last_check_s = now;
    const double stalled = now - since_s_;
    if (stalled > timeout_s_) {
      std::ostringstream message;
      message << "rank " << rank_ << ": no progress for " << static_cast<int>(stalled) << " s while " << activity_
              << " ([runtime] collective_timeout_s = " << timeout_s_
              << "): another rank has died or hangs (see its log), or a collective stalls; ending the job"
              << "\n  HINT: the last complete checkpoint is intact; resubmit to resume from it. If steps or "
                 "checkpoint saves legitimately take longer, raise [runtime] collective_timeout_s";
      abort_job(message.str(), kExitStalled);
    }
  }
}

}  // namespace superoffload::cluster
