// The subcommands of `superoffload`; each registers itself on the CLI11 app and runs when
// chosen. One file per subcommand.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "app/startup.hpp"

namespace superoffload::cluster {
class MpiWorld;
}

namespace superoffload::app {

// The chosen subcommand's body; returns the process exit code.
using Run = std::function<int(const cluster::MpiWorld&)>;

void add_version_command(CLI::App& app, const GlobalOptions& globals, Run& run);
void add_config_command(CLI::App& app, const GlobalOptions& globals, Run& run);
void add_train_command(CLI::App& app, const GlobalOptions& globals, Run& run);
void add_prepare_command(CLI::App& app, const GlobalOptions& globals, Run& run);
void add_plan_command(CLI::App& app, const GlobalOptions& globals, Run& run);
void add_eval_command(CLI::App& app, const GlobalOptions& globals, Run& run);
void add_plugins_command(CLI::App& app, const GlobalOptions& globals, Run& run);
void add_export_command(CLI::App& app, const GlobalOptions& globals, Run& run);
void add_inspect_command(CLI::App& app, const GlobalOptions& globals, Run& run);

// Adds CONFIG, --set and --deepspeed-config to a subcommand.
void add_config_options(CLI::App& command, ConfigOptions& options, bool config_required);

}  // namespace superoffload::app
