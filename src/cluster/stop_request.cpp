// Stop requests from signals.
#include "cluster/stop_request.hpp"

#include <csignal>

#include "cluster/check_mpi.hpp"

namespace superoffload::cluster {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void remember_signal(int signal) { g_signal = signal; }

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in flight (MPI progress, file I/O) continue
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int local_stop_signal() { return g_signal; }

int agreed_stop_signal(MPI_Comm comm) {
  int mine = g_signal, any = 0;
  SO_CHECK_MPI(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm));
  return any;
}

}  // namespace superoffload::cluster
