// Start-up binding: decide locally, agree within the node, apply, report.
#include "cluster/binding.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "base/logging.hpp"
#include "cluster/compute_threads.hpp"
#include "cluster/gpu_devices.hpp"
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

  const BindingIntent intent = decide_binding(request);
  for (const auto& note : intent.notes) SO_LOG(warning) << note;

  // Peers are the node's ranks that want the same candidate cores; they split them in
  // local-rank order.
  const std::string my_claim =
      intent.source == BindingSource::superoffload ? join(intent.candidate_cores) : std::string("-");
  const auto claims = MpiWorld::allgather(my_claim, world.node());
  int peer_index = 0, peer_count = 0;
  for (int r = 0; r < static_cast<int>(claims.size()); ++r) {
    if (claims[static_cast<size_t>(r)] != my_claim) continue;
    if (r < world.local_rank()) ++peer_index;
    ++peer_count;
  }

  RankBinding binding;
  binding.source = intent.source;
  binding.gpu = intent.gpu;
  if (binding.gpu >= 0) binding.gpu_name = gpus[static_cast<size_t>(binding.gpu)].name;
  switch (intent.source) {
    case BindingSource::superoffload:
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
  binding.numa_nodes = topology.numa_nodes_of(binding.cpus);
  set_compute_threads(binding.threads);
  return binding;
}

BindingReport report_bindings(const MpiWorld& world, const RankBinding& mine) {
  std::ostringstream row;
  row << world.rank() << '\t' << world.host() << '\t' << world.node_index() << '\t' << world.local_rank() << '\t'
      << mine.cpus.to_string() << '\t' << (mine.numa_nodes.empty() ? "-" : join(mine.numa_nodes)) << '\t'
      << (mine.gpu >= 0 ? std::to_string(mine.gpu) + " " + mine.gpu_name : "-") << '\t' << compute_threads() << '\t'
      << to_string(mine.source);
  const auto rows = MpiWorld::allgather(row.str(), world.world());

  BindingReport report;
  std::vector<std::vector<std::string>> cells{{"rank", "host", "node", "local", "cpus", "numa", "gpu", "threads", "bound by"}};
  std::map<std::string, std::vector<std::pair<int, CpuSet>>> by_host;
  for (const auto& line : rows) {
    auto fields = split(line, '\t');
    fields.resize(9);
    by_host[fields[1]].emplace_back(std::stoi(fields[0]), CpuSet::parse(fields[4]));
    cells.push_back(std::move(fields));
  }
  report.table = format_table(cells);

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
