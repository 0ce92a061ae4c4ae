// superoffload: ZeRO-3 fine-tuning with a speculative CPU AdamW. Parses the command line,
// brings up MPI and logging, and runs one subcommand; any error on any rank ends the job.
#include <mpi.h>

#include <iostream>

#include "app/commands.hpp"
#include "base/allocator.hpp"
#include "base/logging.hpp"
#include "cluster/job_exit.hpp"
#include "cluster/mpi_world.hpp"
#include "io/check_hdf5.hpp"

namespace so = superoffload;

int main(int argc, char** argv) {
  so::log::init(so::log::Level::info);
  so::detail::configure_hdf5();
  so::base::configure_host_allocator();

  std::optional<so::cluster::MpiWorld> world;
  try {
    world.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    so::cluster::abort_job(std::string("MPI start-up failed: ") + e.what());
  }
  so::log::set_rank(world->rank(), so::log::Console::rank0);

  CLI::App app{"superoffload: full-parameter fine-tuning of large language models with ZeRO-3 and a "
               "speculative CPU AdamW (SuperOffload), on MPI ranks launched by srun or mpirun.",
               "superoffload"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  so::app::GlobalOptions globals;
  app.add_option("--log-level", globals.log_level, "trace, debug, info, warning or error (default: [logging] level)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warning", "error"}))
      ->envname("SUPEROFFLOAD_LOG_LEVEL");
  app.fallthrough();

  so::app::Run run;
  so::app::add_train_command(app, globals, run);
  so::app::add_prepare_command(app, globals, run);
  so::app::add_plan_command(app, globals, run);
  so::app::add_eval_command(app, globals, run);
  so::app::add_export_command(app, globals, run);
  so::app::add_inspect_command(app, globals, run);
  so::app::add_plugins_command(app, globals, run);
  so::app::add_config_command(app, globals, run);
  so::app::add_version_command(app, globals, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parsed the same arguments; one copy of the message is enough.
    int code = 0;
    if (world->rank() == 0) {
      code = app.exit(e);
    } else {
      code = e.get_exit_code();
    }
    world.reset();
    return code;
  }
  if (!globals.log_level.empty()) so::log::set_level(*so::log::parse_level(globals.log_level));

  int code = 0;
  try {
    code = run(*world);
  } catch (...) {
    so::cluster::abort_job(so::cluster::describe_exception(std::current_exception()));
  }
  so::log::flush();
  world.reset();
  return code;
}
