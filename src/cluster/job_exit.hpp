// Ending the job because of an error, on every rank, promptly: never a hang.
#pragma once

#include <exception>
#include <string>

namespace superoffload::cluster {

class MpiWorld;

// The user-facing text of an exception (superoffload::Error with location and hint).
std::string describe_exception(const std::exception_ptr& error);

// Runs `cleanup` (async-signal-safe, never throwing) before abort_job ends the job: for what
// must not outlive the process, such as the resctrl groups it made. At most 8.
void add_abort_cleanup(void (*cleanup)() noexcept);

// An error on this rank that the other ranks may not share: log it (console and the rank's
// log file, whatever the console setting), then MPI_Abort the whole job.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

// Collective: every rank calls it with its own error (or null). When no rank failed it
// returns. Otherwise the lowest failing rank reports its error once, and every rank
// finalizes MPI and exits with `exit_code`: for errors all ranks meet at the same point,
// such as a bad configuration.
void exit_if_any_rank_failed(const MpiWorld& world, const std::exception_ptr& mine, int exit_code = 1);

}  // namespace superoffload::cluster
