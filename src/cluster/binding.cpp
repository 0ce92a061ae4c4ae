// Start-up binding: decide locally, agree within the node, apply, report.
#include "cluster/binding.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "base/logging.hpp"
#include "cluster/compute_threads.hpp"
#include "cluster/gpu_devices.hpp"
#include "cluster/launcher_binding.hpp"
#include "cluster/mpi_world.hpp"
#include "cluster/topology.hpp"

namespace superoffload::cluster {
namespace {

std::string join(const std::vector<int>& values) {
  std::string out;
  for (int v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, sep);) out.push_back(item);
  if (!text.empty() && text.back() == sep) out.emplace_back();
  return out;
}

std::vector<std::string> format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::vector<std::string> lines;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace

RankBinding bind_ranks(const MpiWorld& world, BindMode mode) {
  const Topology topology = Topology::this_machine();
  std::string why_no_gpu;
  const auto gpus = visible_gpus(topology, &why_no_gpu);

  BindingRequest request;
  request.mode = mode;
  request.allowed_cores = topology.allowed_cores();
  request.current = topology.current_binding();
  request.local_rank = world.local_rank();
  request.local_size = world.local_size();
  request.visible_gpus = static_cast<int>(gpus.size());
  for (const auto& gpu : gpus) request.gpu_locality.push_back(gpu.near_cpus);
  if (gpus.empty()) SO_LOG(debug) << "no GPU: " << why_no_gpu;

  RankBinding binding;
  std::vector<int> all_cores(request.allowed_cores.size());
  for (size_t i = 0; i < all_cores.size(); ++i) all_cores[i] = static_cast<int>(i);
  if (mode == BindMode::automatic && !request.current.empty() && request.current != cpus_of(request.allowed_cores, all_cores)) {
    const auto launcher = this_process_launcher_binding();
    request.launcher_default = launcher.kind == LauncherBinding::Kind::defaulted;
    binding.launcher_how = launcher.how;
  }
  const BindingIntent intent = decide_binding(request);
  for (const auto& note : intent.notes) SO_LOG(warning) << note;
  // What superoffload's own binding would give: the cores a kept launcher binding is compared with.
  BindingRequest unbound = request;
  unbound.mode = BindMode::automatic;
  unbound.current = CpuSet();
  const BindingIntent ideal = decide_binding(unbound);

  // Peers are the node's ranks that want the same candidate cores; they split them in
  // local-rank order. Ranks that keep a launcher binding count for the shares, not the binding.
  const bool binds = intent.source == BindingSource::superoffload || intent.source == BindingSource::launcher_widened;
  const std::string my_claim = join(ideal.candidate_cores);
  const auto claims = MpiWorld::allgather(my_claim + (binds ? "|bind" : "|keep"), world.node());
  int peer_index = 0, peer_count = 0, share_index = 0, share_count = 0;
  for (int r = 0; r < static_cast<int>(claims.size()); ++r) {
    const auto& claim = claims[static_cast<size_t>(r)];
    if (claim.substr(0, claim.rfind('|')) != my_claim) continue;
    if (r < world.local_rank()) ++share_index;
    ++share_count;
    if (claim != claims[static_cast<size_t>(world.local_rank())]) continue;
    if (r < world.local_rank()) ++peer_index;
    ++peer_count;
  }
  const auto share = share_of(ideal.candidate_cores, share_index, share_count);
  binding.share_cores = static_cast<int>(share.size());
  binding.share_numa_nodes = topology.numa_nodes_of(cpus_of(request.allowed_cores, share));
  for (const auto& core : request.allowed_cores) {
    const auto& nodes = binding.share_numa_nodes;
    if (std::find(nodes.begin(), nodes.end(), core.numa_node) != nodes.end()) ++binding.share_numa_cores;
  }

  binding.source = intent.source;
  binding.gpu = intent.gpu;
  if (binding.gpu >= 0) binding.gpu_name = gpus[static_cast<size_t>(binding.gpu)].name;
  switch (intent.source) {
    case BindingSource::superoffload:
    case BindingSource::launcher_widened:
      binding.cpus = cpus_of(request.allowed_cores, share_of(intent.candidate_cores, peer_index, peer_count));
      topology.bind_process(binding.cpus);
      binding.threads = cores_in(request.allowed_cores, binding.cpus);
      break;
    case BindingSource::launcher:
      binding.cpus = request.current;
      binding.threads = cores_in(request.allowed_cores, binding.cpus);
      break;
    case BindingSource::none:
      // Unbound, but still not more threads than this rank's fair share of the node.
      binding.cpus = request.current;
      binding.threads = std::max<int>(1, static_cast<int>(request.allowed_cores.size()) / world.local_size());
      break;
  }
  binding.threads = std::max(1, binding.threads);
  binding.core_cpus = one_cpu_per_core(request.allowed_cores, binding.cpus);
  binding.numa_nodes = topology.numa_nodes_of(binding.cpus);
  // Memory follows the cores we chose: their own NUMA node(s). These are the nodes that hold
  // the cores, so a GPU's CPU-less HBM node (GH200) is never among them; first touch alone would
  // spill onto it once the socket's LPDDR5X is full. A binding the user asked for keeps
  // whatever memory policy came with it.
  if (intent.source == BindingSource::superoffload || intent.source == BindingSource::launcher_widened) {
    const std::string memory = topology.bind_memory(binding.numa_nodes);
    if (memory.rfind("kept", 0) == 0) {
      SO_LOG(debug) << "memory binding: " << memory;
    } else if (memory != "bound") {
      SO_LOG(warning) << "the memory of this rank is " << memory << "; the kernel's first touch places it";
    }
  }
  set_compute_threads(binding.threads);
  return binding;
}

BindingReport report_bindings(const MpiWorld& world, const RankBinding& mine, double optimizer_core_share) {
  // A kept launcher binding with fewer cores than the optimizer's part of the rank's share.
  std::string starved = "-";
  if (mine.source == BindingSource::launcher && mine.share_cores > 0 &&
      static_cast<double>(mine.threads) < optimizer_core_share * static_cast<double>(mine.share_cores)) {
    std::ostringstream text;
    text << "rank " << world.rank() << " on " << world.host() << " is bound to " << mine.threads << " core(s) (cpus "
         << mine.cpus.to_string() << ") by " << mine.launcher_how << ": fewer than cpuadam_cores_perc = "
         << optimizer_core_share << " of its share, " << mine.share_cores << " of the " << mine.share_numa_cores
         << " cores of NUMA node(s) " << join(mine.share_numa_nodes) << ", so the CPU optimizer runs on "
         << mine.threads << " core(s) instead of " << optimizer_core_share * mine.share_cores;
    starved = text.str();
  }
  std::ostringstream row;
  row << world.rank() << '\t' << world.host() << '\t' << world.node_index() << '\t' << world.local_rank() << '\t'
      << mine.cpus.to_string() << '\t' << (mine.numa_nodes.empty() ? "-" : join(mine.numa_nodes)) << '\t'
      << (mine.gpu >= 0 ? std::to_string(mine.gpu) + " " + mine.gpu_name : "-") << '\t' << compute_threads() << '\t'
      << to_string(mine.source) << '\t' << starved;
  const auto rows = MpiWorld::allgather(row.str(), world.world());

  BindingReport report;
  std::vector<std::vector<std::string>> cells{{"rank", "host", "node", "local", "cpus", "numa", "gpu", "threads", "bound by"}};
  std::map<std::string, std::vector<std::pair<int, CpuSet>>> by_host;
  std::vector<std::string> starved_ranks;
  for (const auto& line : rows) {
    auto fields = split(line, '\t');
    fields.resize(10);
    if (fields[9] != "-") starved_ranks.push_back(fields[9]);
    fields.resize(9);
    by_host[fields[1]].emplace_back(std::stoi(fields[0]), CpuSet::parse(fields[4]));
    cells.push_back(std::move(fields));
  }
  report.table = format_table(cells);
  // Once for the job: the first such rank, how many there are, and what fixes it.
  if (!starved_ranks.empty()) {
    report.warnings.push_back(
        starved_ranks.front() + (starved_ranks.size() > 1 ? " (and " + std::to_string(starved_ranks.size() - 1) + " more rank(s) alike)" : "") +
        ". The CPU optimizer runs on the bound cores only: let superoffload bind the ranks (mpirun --bind-to none; "
        "srun --cpu-bind=none), or give each rank its share (mpirun --map-by numa:PE=N, srun --cpus-per-task=N)");
  }

  for (const auto& [host, ranks] : by_host) {
    std::vector<std::string> clashes;
    for (size_t a = 0; a < ranks.size(); ++a) {
      for (size_t b = a + 1; b < ranks.size(); ++b) {
        const auto shared = ranks[a].second.intersection(ranks[b].second);
        if (!shared.empty()) {
          clashes.push_back("ranks " + std::to_string(ranks[a].first) + " and " + std::to_string(ranks[b].first) +
                            " share cpus " + shared.to_string());
        }
      }
    }
    if (!clashes.empty()) {
      std::string text = "on " + host + ", " + std::to_string(clashes.size()) + " pair(s) of ranks share CPUs (" +
                         clashes.front() + (clashes.size() > 1 ? ", …" : "") +
                         "): the CPU optimizer of those ranks will compete for cores. More ranks than cores, "
                         "or a launcher binding such as --bind-to socket, causes this.";
      report.warnings.push_back(std::move(text));
    }
  }
  return report;
}

}  // namespace superoffload::cluster
