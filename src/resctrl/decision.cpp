// Choosing between adopting, making per rank or per node, monitoring only, and nothing.
#include "resctrl/decision.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace superoffload::resctrl {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::pair<std::string, std::string> prepared_group_names(const std::string& job) {
  return {"superoffload." + job + ".optimizer", "superoffload." + job + ".rest"};
}

int existing_control_groups(const std::string& root) {
  int count = 0;
  std::error_code error;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    const auto name = it->path().filename().string();
    if (it->is_directory(error) && name != "info" && name != "mon_groups" && name != "mon_data") ++count;
  }
  return count;
}

Decision decide(const Resctrl& tree, Mode mode, const Split& split, const std::string& job, int ranks_on_node,
                const std::vector<int>& cache_ids, bool optimizer_threads) {
  Decision d;
  if (mode == Mode::off) {
    d.why = "[runtime] resctrl = \"off\"";
    return d;
  }
  if (!tree.mounted()) {
    d.why = "resctrl is not mounted on this node";
    return d;
  }
  if (!optimizer_threads) {
    d.why = "no thread runs the optimizer alone ([offload] device = \"none\", or one optimizer thread)";
    return d;
  }
  if (!job.empty()) {
    const auto [optimizer, rest] = prepared_group_names(job);
    std::error_code error;
    if (fs::is_directory(fs::path(tree.mount) / optimizer, error) && fs::is_directory(fs::path(tree.mount) / rest, error)) {
      d.action = Action::adopt;
      d.optimizer_dir = tree.mount + "/" + optimizer;
      d.rest_dir = tree.mount + "/" + rest;
      d.why = "the groups " + optimizer + " and " + rest + " that the job's prolog prepared";
      return d;
    }
  }
  std::string no_control;
  if (tree.caches.empty() && tree.bandwidth.empty()) {
    no_control = "no cache or bandwidth resource to partition";
  } else if (!tree.writable) {
    no_control = "the tree is read-only for this user (an administrator's prolog can prepare the job's groups: "
                 "jobscripts/admin/resctrl-prolog.sh)";
  } else {
    d.schemata = plan_schemata(tree, cache_ids, split);
    const int free = tree.control_groups() - 1 - existing_control_groups(tree.mount);
    if (!d.schemata.error.empty()) {
      no_control = d.schemata.error;
    } else if (free >= 2 * ranks_on_node) {
      d.action = Action::per_rank;
      d.why = std::to_string(free) + " control groups free for " + std::to_string(ranks_on_node) + " rank(s)";
      return d;
    } else if (free >= 2) {
      d.action = Action::per_node;
      d.why = "only " + std::to_string(free) + " control groups free for " + std::to_string(ranks_on_node) +
              " ranks: the node's ranks share two";
      return d;
    } else {
      no_control = "only " + std::to_string(std::max(free, 0)) + " control group(s) free, two are needed";
    }
  }
  std::error_code error;
  const bool mon_groups_writable =
      fs::is_directory(fs::path(tree.mount) / "mon_groups", error) &&
      ::access((fs::path(tree.mount) / "mon_groups").c_str(), W_OK) == 0;
  if (tree.monitoring && mon_groups_writable) {
    d.action = Action::monitor;
    d.why = no_control;
    return d;
  }
  d.why = no_control + (tree.monitoring ? "; no monitoring group can be made either" : "; no monitoring either");
  return d;
}

std::string describe(const Decision& d) {
  switch (d.action) {
    case Action::adopt: return "partitions with " + d.why;
    case Action::per_rank: return "partitions per rank (" + d.why + "): " + d.schemata.summary;
    case Action::per_node: return "partitions per node (" + d.why + "): " + d.schemata.summary;
    case Action::monitor: return "monitors the optimizer's and the rest's bandwidth only (" + d.why + ")";
    case Action::none: break;
  }
  return "does nothing: " + d.why;
}

}  // namespace superoffload::resctrl
