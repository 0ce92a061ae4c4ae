// `superoffload plan CONFIG --nodes N --gpus-per-node G`: the memory a run of CONFIG needs per
// GPU and per node (host), for a cluster shape the user may not have yet; with
// --gpu-memory / --host-memory it also says whether that fits. Reads config.json only.
// With --parameters it lists every tensor of the model with its role and whether AdamW decays
// it: the model is built by its plugin, its memory reserved but never touched or filled.
// With --topology NODE.xml (lstopo --of xml of a compute node) it shows where each of the
// node's --gpus-per-node ranks would be bound there, as the start-up table would.
#include <iomanip>
#include <iostream>
#include <sstream>

#include "app/commands.hpp"
#include "cluster/mpi_world.hpp"
#include "cluster/topology.hpp"
#include "model_io/load_model.hpp"
#include "train/memory_plan.hpp"

namespace superoffload::app {
namespace {

const char* role_name(model::ParameterRole role) {
  switch (role) {
    case model::ParameterRole::weight: return "weight";
    case model::ParameterRole::bias: return "bias";
    case model::ParameterRole::norm: return "norm";
  }
  return "?";
}

// "name  [shape]  role  decay|no decay", one line per tensor in layer order.
void list_parameters(const config::Config& config) {
  const auto loaded = model::load_model(config.model.path, config.model.plugin, config::InitMode::random, 0,
                                        /*defer=*/true);
  int64_t decayed = 0, plain = 0;
  for (const auto& layer : loaded.model->layers()) {
    for (const auto& [name, tensor] : layer->hf_parameters()) {
      std::ostringstream shape;
      shape << tensor.sizes();
      const bool decays = loaded.model->decays(name);
      (decays ? decayed : plain) += tensor.numel();
      std::cout << std::left << std::setw(56) << name << " " << std::setw(16) << shape.str() << " " << std::setw(6)
                << role_name(loaded.model->parameter_role(name)) << " " << (decays ? "decay" : "no decay") << "\n";
    }
  }
  std::cout << "weight decay " << config.optimizer.weight_decay << " on " << decayed << " parameters, none on "
            << plain << " (biases and norm weights, by name as HF Trainer decides)\n";
}

// The binding superoffload gives each rank of a node of this topology: the start-up table's
// columns, plus the CPU optimizer's share (cpuadam_cores_perc of the rank's cores, one thread each).
void show_node_binding(const std::string& xml, int ranks, bool gpus, double optimizer_core_share) {
  const auto topology = cluster::Topology::from_xml(xml);
  cluster::BindingRequest request;
  request.allowed_cores = topology.allowed_cores();
  std::vector<int> all(request.allowed_cores.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  request.current = cluster::cpus_of(request.allowed_cores, all);
  request.local_size = ranks;
  if (gpus) request.gpu_locality = topology.nvidia_gpu_locality();
  request.visible_gpus = static_cast<int>(request.gpu_locality.size());
  const auto sets = cluster::plan_node(request);
  std::cout << "binding on " << xml << " (" << request.allowed_cores.size() << " cores, " << request.visible_gpus
            << " NVIDIA GPUs), " << ranks << " rank(s) per node:\n";
  std::cout << std::left << std::setw(7) << "local" << std::setw(30) << "cpus" << std::setw(8) << "numa" << std::setw(5)
            << "gpu" << std::setw(9) << "threads" << "optimizer\n";
  for (int r = 0; r < ranks; ++r) {
    const auto& cpus = sets[static_cast<size_t>(r)];
    std::string numa;
    for (const int node : topology.numa_nodes_of(cpus)) numa += (numa.empty() ? "" : ",") + std::to_string(node);
    const auto per_core = cluster::one_cpu_per_core(request.allowed_cores, cpus);
    const auto optimizer = optimizer_core_share > 0 ? cluster::optimizer_cpus(per_core, optimizer_core_share) : std::vector<int>{};
    std::cout << std::left << std::setw(7) << r << std::setw(30) << cpus.to_string() << std::setw(8) << (numa.empty() ? "-" : numa)
              << std::setw(5) << (request.visible_gpus > 0 ? std::to_string(r % request.visible_gpus) : "-") << std::setw(9)
              << per_core.size() << (optimizer.empty() ? "-" : std::to_string(optimizer.size()) + " (" + cluster::CpuSet(optimizer).to_string() + ")")
              << "\n";
  }
}

}  // namespace

void add_plan_command(CLI::App& app, const GlobalOptions& globals, Run& run) {
  struct Options {
    ConfigOptions config;
    int nodes = 1, gpus_per_node = 1;
    double gpu_memory_gb = 0, host_memory_gb = 0;
    bool cpu = false, parameters = false, max_seq = false;
    std::string topology;
  };
  auto o = std::make_shared<Options>();
  auto* command = app.add_subcommand("plan", "Estimate the memory a configuration needs on a cluster shape");
  add_config_options(*command, o->config, true);
  command->add_option("--nodes", o->nodes, "Nodes")->check(CLI::PositiveNumber);
  command->add_option("--gpus-per-node", o->gpus_per_node, "GPUs (ranks) per node")->check(CLI::PositiveNumber);
  command->add_option("--gpu-memory", o->gpu_memory_gb, "Memory per GPU in GB, e.g. 96 for a GH200 (optional)");
  command->add_option("--host-memory", o->host_memory_gb, "Host memory per node in GB (optional)");
  command->add_flag("--cpu", o->cpu, "Ranks without GPUs (everything in host memory)");
  command->add_option("--topology", o->topology,
                      "A node's hwloc XML (lstopo --of xml): show where its --gpus-per-node ranks would be bound")
      ->check(CLI::ExistingFile);
  command->add_flag("--max-seq", o->max_seq,
                    "Also print the longest [data] seq_len (in steps of 1,024 tokens) that fits --gpu-memory and "
                    "--host-memory with this configuration otherwise unchanged");
  command->add_flag("--parameters", o->parameters,
                    "Also list every tensor of the model: shape, role, and whether weight decay applies");
  command->callback([&run, &globals, o] {
    run = [&globals, o](const cluster::MpiWorld& world) {
      const int ranks = o->nodes * o->gpus_per_node;
      const auto loaded = load_config_or_exit(world, o->config, globals, ranks);
      if (world.rank() != 0) return 0;
      if (o->parameters) list_parameters(loaded.config);
      const auto size = train::model_size_from_config(loaded.config.model.path);
      const auto plan = train::plan_memory(size, loaded.config, ranks, !o->cpu);
      for (const auto& line : train::describe_plan(size, plan, o->gpus_per_node, o->gpu_memory_gb * 1e9,
                                                   o->host_memory_gb * 1e9)) {
        std::cout << line << "\n";
      }
      if (!o->topology.empty()) {
        const auto& offload = loaded.config.offload;
        show_node_binding(o->topology, o->gpus_per_node, !o->cpu,
                          offload.device == config::OffloadDevice::none ? 0.0 : offload.cpuadam_cores_perc);
      }
      for (const auto& line : resctrl_plan_lines(loaded.config.runtime, o->gpus_per_node,
                                                 loaded.config.offload.device != config::OffloadDevice::none)) {
        std::cout << line << "\n";
      }
      if (o->max_seq) {
        if (o->gpu_memory_gb <= 0 && o->host_memory_gb <= 0) {
          std::cerr << "superoffload plan --max-seq: give --gpu-memory and/or --host-memory (GB), the capacity "
                       "the sequence must fit\n";
          return 2;
        }
        const int64_t longest = train::longest_sequence(size, loaded.config, ranks, o->gpus_per_node, !o->cpu,
                                                        o->gpu_memory_gb * 1e9, o->host_memory_gb * 1e9);
        if (longest == 0) {
          std::cout << "longest sequence: none fits (not even 1,024 tokens)\n";
        } else {
          auto at_longest = loaded.config;
          at_longest.data.seq_len = longest;
          const auto plan_there = train::plan_memory(size, at_longest, ranks, !o->cpu);
          std::cout << "longest sequence: " << longest << " tokens ("
                    << (longest >= 1024 ? std::to_string(longest / 1024) + "k" : std::to_string(longest))
                    << ") per row at " << loaded.config.training.train_micro_batch_size_per_gpu
                    << " row(s) per micro-batch"
                    << (loaded.config.parallel.sequence_parallel_size > 1
                            ? ", sequence-parallel over " + std::to_string(loaded.config.parallel.sequence_parallel_size) +
                                  " ranks"
                            : std::string())
                    << ": device " << plan_there.device_total() / (1024.0 * 1024 * 1024) << " GiB, host "
                    << plan_there.host_total() * o->gpus_per_node / (1024.0 * 1024 * 1024) << " GiB per node\n";
        }
      }
      bool fits = true;
      if (o->gpu_memory_gb > 0 && !o->cpu) fits = fits && plan.device_total() <= train::kPlanHeadroom * o->gpu_memory_gb * 1e9;
      if (o->host_memory_gb > 0) fits = fits && plan.host_total() * o->gpus_per_node <= train::kPlanHeadroom * o->host_memory_gb * 1e9;
      if (o->gpu_memory_gb > 0 || o->host_memory_gb > 0) {
        std::cout << (fits ? "fits" : "does not fit") << " (with 5% headroom)\n";
      }
      return fits ? 0 : 1;
    };
  });
}

}  // namespace superoffload::app
