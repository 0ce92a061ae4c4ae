// `superoffload config`: the effective configuration as TOML (defaults filled in, batch
// sizes resolved for the world size, each non-default marked with its origin), or with
// --reference every key with its default and explanation (configs/reference.toml).
#include <iostream>

#include "app/commands.hpp"
#include "cluster/mpi_world.hpp"
#include "config/toml_writer.hpp"

namespace superoffload::app {

void add_config_command(CLI::App& app, const GlobalOptions& globals, Run& run) {
  auto* command = app.add_subcommand("config", "Print the effective configuration as TOML (defaults filled in)");
  struct Options {
    ConfigOptions config;
    bool reference = false;
    int world_size = 0;
  };
  auto options = std::make_shared<Options>();
  add_config_options(*command, options->config, false);
  command->add_flag("--reference", options->reference,
                    "Print every key with its default and explanation (configs/reference.toml)");
  command->add_option("--world-size", options->world_size,
                      "Resolve batch sizes for this many ranks (default: the current MPI world)")
      ->check(CLI::PositiveNumber);
  command->callback([&run, &globals, options] {
    run = [&globals, options](const cluster::MpiWorld& world) {
      if (options->reference) {
        if (world.rank() == 0) std::cout << config::reference_toml();
        return 0;
      }
      if (options->config.config_file.empty() && options->config.deepspeed_config.empty() &&
          options->config.overrides.empty()) {
        if (world.rank() == 0) {
          std::cerr << "superoffload config: give a configuration file (or --deepspeed-config / --set), or "
                       "--reference for every key\n";
        }
        return 2;
      }
      const int world_size = options->world_size > 0 ? options->world_size : world.size();
      const auto loaded = load_config_or_exit(world, options->config, globals, world_size);
      if (world.rank() == 0) {
        std::cout << "# Effective superoffload configuration for " << world_size << " rank(s); values not at\n"
                  << "# their default name their origin.\n"
                  << config::to_toml(loaded.config, &loaded.origins);
      }
      return 0;
    };
  });
}

}  // namespace superoffload::app
