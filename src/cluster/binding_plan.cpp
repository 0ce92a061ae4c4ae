// Binding decisions (see binding_plan.hpp for the rules).
#include "cluster/binding_plan.hpp"

#include <algorithm>
#include <cmath>

namespace superoffload::cluster {

const char* to_string(BindingSource source) {
  switch (source) {
    case BindingSource::superoffload: return "superoffload";
    case BindingSource::launcher: return "launcher (asked)";
    case BindingSource::launcher_widened: return "launcher (default, widened)";
    case BindingSource::none: return "none";
  }
  return "?";
}

BindingIntent decide_binding(const BindingRequest& request) {
  BindingIntent intent;
  if (request.visible_gpus > 0) {
    intent.gpu = request.local_rank % request.visible_gpus;
    if (request.local_size > request.visible_gpus) {
      intent.notes.push_back(std::to_string(request.local_size) + " ranks share " +
                             std::to_string(request.visible_gpus) + " visible GPU(s) on this node");
    }
  }
  if (request.mode == BindMode::none) {
    intent.source = BindingSource::none;
    return intent;
  }
  CpuSet allowed_cpus;
  {
    std::vector<int> all;
    for (const auto& core : request.allowed_cores) all.insert(all.end(), core.pus.cpus().begin(), core.pus.cpus().end());
    allowed_cpus = CpuSet(std::move(all));
  }
  const bool launcher_bound = !request.current.empty() && request.current != allowed_cpus;
  if (launcher_bound && !request.launcher_default) {
    intent.source = BindingSource::launcher;
    return intent;
  }

  intent.source = launcher_bound ? BindingSource::launcher_widened : BindingSource::superoffload;
  const CpuSet* near = nullptr;
  if (intent.gpu >= 0 && static_cast<size_t>(intent.gpu) < request.gpu_locality.size() &&
      !request.gpu_locality[static_cast<size_t>(intent.gpu)].empty()) {
    near = &request.gpu_locality[static_cast<size_t>(intent.gpu)];
  }
  if (near) {
    // Whole NUMA nodes near the GPU: every allowed core of a NUMA node that has a core
    // inside the GPU's locality set.
    std::vector<int> near_numa;
    for (const auto& core : request.allowed_cores) {
      if (core.pus.intersects(*near)) near_numa.push_back(core.numa_node);
    }
    for (size_t i = 0; i < request.allowed_cores.size(); ++i) {
      const auto& core = request.allowed_cores[i];
      const bool in_near_numa = core.numa_node >= 0 &&
                                std::find(near_numa.begin(), near_numa.end(), core.numa_node) != near_numa.end();
      if (in_near_numa || core.pus.intersects(*near)) intent.candidate_cores.push_back(static_cast<int>(i));
    }
  }
  if (intent.candidate_cores.empty()) {
    if (intent.gpu >= 0) {
      intent.notes.push_back("the CPUs near GPU " + std::to_string(intent.gpu) +
                             " are unknown or not allowed; splitting all of the node's cores");
    }
    for (size_t i = 0; i < request.allowed_cores.size(); ++i) intent.candidate_cores.push_back(static_cast<int>(i));
  }
  return intent;
}

std::vector<int> share_of(const std::vector<int>& candidates, int index, int count) {
  const auto n = static_cast<long>(candidates.size());
  if (n == 0 || count <= 0 || index < 0 || index >= count) return {};
  if (count >= n) {
    return {candidates[static_cast<size_t>(static_cast<long>(index) * n / count)]};
  }
  // Block split: the first (n mod count) peers get one core more.
  const long base = n / count, extra = n % count;
  const long begin = index * base + std::min<long>(index, extra);
  const long length = base + (index < extra ? 1 : 0);
  return {candidates.begin() + begin, candidates.begin() + begin + length};
}

CpuSet cpus_of(const std::vector<Core>& cores, const std::vector<int>& indices) {
  std::vector<int> cpus;
  for (int i : indices) {
    const auto& pus = cores.at(static_cast<size_t>(i)).pus.cpus();
    cpus.insert(cpus.end(), pus.begin(), pus.end());
  }
  return CpuSet(std::move(cpus));
}

int cores_in(const std::vector<Core>& cores, const CpuSet& cpus) {
  return static_cast<int>(std::count_if(cores.begin(), cores.end(), [&](const Core& c) { return c.pus.intersects(cpus); }));
}

std::vector<CpuSet> plan_node(BindingRequest base) {
  std::vector<BindingIntent> intents;
  for (int r = 0; r < base.local_size; ++r) {
    base.local_rank = r;
    intents.push_back(decide_binding(base));
  }
  std::vector<CpuSet> out;
  for (size_t r = 0; r < intents.size(); ++r) {
    int index = 0, count = 0;  // among the ranks that want the same cores
    for (size_t p = 0; p < intents.size(); ++p) {
      if (intents[p].candidate_cores != intents[r].candidate_cores) continue;
      if (p < r) ++index;
      ++count;
    }
    out.push_back(cpus_of(base.allowed_cores, share_of(intents[r].candidate_cores, index, count)));
  }
  return out;
}

std::vector<int> one_cpu_per_core(const std::vector<Core>& cores, const CpuSet& cpus) {
  std::vector<int> out;
  for (const auto& core : cores) {
    const auto mine = core.pus.intersection(cpus);
    if (!mine.empty()) out.push_back(mine.cpus().front());
  }
  return out;
}

std::vector<int> optimizer_cpus(const std::vector<int>& core_cpus, double core_share) {
  if (core_cpus.empty()) return {};
  const auto count = std::clamp<size_t>(static_cast<size_t>(std::floor(core_share * static_cast<double>(core_cpus.size()))), 1,
                                        core_cpus.size());
  return {core_cpus.begin(), core_cpus.begin() + static_cast<std::ptrdiff_t>(count)};
}

}  // namespace superoffload::cluster
