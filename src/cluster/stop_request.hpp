// Preemption: SIGUSR1 (Slurm's --signal warning) or SIGTERM (scancel, the time limit) sets a
// flag on the rank that receives it; the training loop asks at each step boundary whether any
// rank got one (one small all-reduce), and then all ranks save a checkpoint together and end
// with kExitPreempted, which the jobscripts answer with a requeue.
#pragma once

#include <mpi.h>

namespace superoffload::cluster {

// EX_TEMPFAIL: "try again later" — the job stopped cleanly after a checkpoint.
inline constexpr int kExitPreempted = 75;

// Installs the handlers for SIGUSR1 and SIGTERM (once per process).
void install_stop_handlers();
// The signal this rank received (0: none).
int local_stop_signal();
// Collective over `comm`: the signal any rank received (the largest number), or 0.
int agreed_stop_signal(MPI_Comm comm);

}  // namespace superoffload::cluster
