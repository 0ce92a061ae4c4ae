// Ends the job when this rank makes no progress for [runtime] collective_timeout_s: a peer
// that died or hangs leaves the others blocked in a collective forever, and a batch job that
// hangs burns its whole allocation. The training loop reports what it is doing (per layer in
// backward, so a long step is not a stall); a thread checks the time since the last report
// and, past the limit, logs which rank stalled where and calls MPI_Abort (exit code
// kExitStalled). Time the whole process spends paused (SIGSTOP, `scontrol suspend`) does not
// count: the watchdog notices that it was not scheduled itself.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace superoffload::cluster {

inline constexpr int kExitStalled = 124;  // as timeout(1)

class Watchdog {
 public:
  // `timeout_s` <= 0 disables it.
  Watchdog(double timeout_s, int rank);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // What this rank does from now on ("step 12: forward/backward"); restarts the clock.
  void progress(std::string activity);

 private:
  void watch();
  double timeout_s_;
  int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string activity_ = "starting";
  double since_s_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace superoffload::cluster
