// `superoffload version`: versions of the project and its libraries, where every rank runs
// (host, cores, NUMA node, GPU), and what each node offers for cache and memory-bandwidth
// partitioning (resctrl).
#include <iostream>

#include "app/commands.hpp"
#include "cluster/mpi_world.hpp"
#include "train/build_info.hpp"

namespace superoffload::app {

void add_version_command(CLI::App& app, const GlobalOptions& /*globals*/, Run& run) {
  auto* command = app.add_subcommand("version", "Print versions and the rank binding table");
  auto bind = std::make_shared<std::string>("auto");
  command->add_option("--bind", *bind, "Binding to apply and show: auto or none")
      ->check(CLI::IsMember({"auto", "none"}));
  command->callback([&run, bind] {
    run = [bind](const cluster::MpiWorld& world) {
      const auto report = bind_and_report(world, *bind);
      const auto nodes = resctrl_per_node(world, /*with_decision=*/true);
      if (world.rank() != 0) return 0;
      for (const auto& [component, version] : train::software_versions()) {
        std::cout << component << (component.size() < 12 ? std::string(12 - component.size(), ' ') : " ") << version
                  << "\n";
      }
      std::cout << "\n" << world.size() << " rank(s) on " << world.node_count() << " node(s)\n";
      for (const auto& line : report.table) std::cout << line << "\n";
      for (const auto& warning : report.warnings) std::cout << "warning: " << warning << "\n";
      std::cout << "\n";
      for (const auto& line : nodes) std::cout << line << "\n";
      std::cout.flush();
      return 0;
    };
  });
}

}  // namespace superoffload::app
