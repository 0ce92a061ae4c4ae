// The configuration options shared by subcommands that read a configuration.
#include "app/commands.hpp"

namespace superoffload::app {

void add_config_options(CLI::App& command, ConfigOptions& options, bool config_required) {
  auto* file = command.add_option("config", options.config_file, "Configuration file (TOML); see configs/reference.toml");
  if (config_required) file->required();
  file->check(CLI::ExistingFile);
  command.add_option("--set", options.overrides, "Override a key: --set section.key=value (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false)
      ->take_all();
  command.add_option("--deepspeed-config", options.deepspeed_config,
                     "Import a DeepSpeed JSON config (applied before the TOML file and --set)")
      ->check(CLI::ExistingFile);
}

}  // namespace superoffload::app
