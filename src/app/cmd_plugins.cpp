// `superoffload plugins`: every plugin file tried, what each handles, and why any was refused.
#include <iostream>

#include "app/commands.hpp"
#include "cluster/mpi_world.hpp"
#include "model_io/plugin_loader.hpp"

namespace superoffload::app {

void add_plugins_command(CLI::App& app, const GlobalOptions& /*globals*/, Run& run) {
  auto* command = app.add_subcommand("plugins", "List model plugins: every file tried, what it handles, why refused");
  command->callback([&run] {
    run = [](const cluster::MpiWorld& world) {
      if (world.rank() != 0) return 0;
      std::cout << "plugin search path (SUPEROFFLOAD_PLUGIN_PATH, then lib/superoffload/plugins beside this program):\n";
      for (const auto& dir : model::plugin_search_dirs()) std::cout << "  " << dir << "\n";
      std::cout << "plugins load when built for plugin ABI version " << SUPEROFFLOAD_PLUGIN_ABI_VERSION << " with ABI tag "
                << model::plugin_abi_tag() << "\n";
      const auto registry = model::PluginRegistry::discover();
      if (registry.candidates().empty()) std::cout << "no plugin files found\n";
      for (const auto& c : registry.candidates()) {
        if (c.usable) {
          std::cout << "ok       " << c.path << "\n         " << c.name << " " << c.version << ": ";
          for (size_t i = 0; i < c.architectures.size(); ++i) std::cout << (i ? ", " : "") << c.architectures[i];
          std::cout << "\n";
          if (!c.required_keys.empty()) {
            std::cout << "         requires in config.json: ";
            for (size_t i = 0; i < c.required_keys.size(); ++i) std::cout << (i ? ", " : "") << c.required_keys[i];
            std::cout << "\n";
          }
        } else {
          std::cout << "refused  " << c.path << "\n         " << c.refusal << "\n";
        }
      }
      return 0;
    };
  });
}

}  // namespace superoffload::app
