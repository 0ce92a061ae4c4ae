// What a rank does with a node's resctrl ([runtime] resctrl), decided from the tree alone so
// that `plan`, the start-up log and the tests all say the same thing:
//   - adopt:    an administrator's prolog prepared the job's groups (prepared_group_names);
//   - per_rank: two control groups per rank, made by each rank;
//   - per_node: two control groups per node, made by the node's first rank (too few control
//               groups for two per rank);
//   - monitor:  monitoring groups only (no control group can be had, counters can);
//   - none:     nothing, and why.
#pragma once

#include <string>
#include <utility>

#include "resctrl/resctrl.hpp"
#include "resctrl/schemata.hpp"

namespace superoffload::resctrl {

enum class Mode { off, automatic, required };
enum class Action { none, adopt, per_rank, per_node, monitor };

struct Decision {
  Action action = Action::none;
  std::string why;        // one clause: "15 control groups free for 4 ranks", "not mounted", ...
  GroupSchemata schemata;  // per_rank and per_node
  std::string optimizer_dir, rest_dir;  // adopt
  bool partitions() const { return action == Action::adopt || action == Action::per_rank || action == Action::per_node; }
};

// The names an administrator's prolog gives a job's groups: superoffload.<job>.optimizer and
// superoffload.<job>.rest (jobscripts/admin/resctrl-prolog.sh).
std::pair<std::string, std::string> prepared_group_names(const std::string& job);

// `job`: Slurm's job id (empty outside a job); `ranks_on_node`: this node's ranks;
// `cache_ids`: the last-level caches of this rank's CPUs; `optimizer_threads`: whether the
// rank has threads of its own for the optimizer.
Decision decide(const Resctrl& tree, Mode mode, const Split& split, const std::string& job, int ranks_on_node,
                const std::vector<int>& cache_ids, bool optimizer_threads);

// "partitions per rank (L3 4 of 15 ways to the optimizer ...)", "monitors only (...)", "does
// nothing: not mounted".
std::string describe(const Decision& decision);

// Control groups other than the default one at the root of the tree.
int existing_control_groups(const std::string& root);

}  // namespace superoffload::resctrl
