// The host memory of the commands besides `train` — `eval`, `export` and `prepare` — planned
// from what each holds at its peak, checked against the node's available memory before the
// large allocations, and set beside the measured peak resident set when the command ends
// (`train`'s plan is train/memory_plan.hpp). One line each in the log:
//   eval: host memory: peak RSS 1.06 GiB, plan 1.10 GiB (plan/peak 1.032): program and libraries
//   0.38 GiB + allocator slack 0.04 GiB + model (fp32) 0.50 GiB + tokens 0.00 GiB + a block's
//   forward 0.18 GiB = 1.10 GiB
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace superoffload::train {

struct CommandMemory {
  std::string command;                                // "eval", "export", "prepare"
  std::vector<std::pair<std::string, double>> terms;  // (what, bytes), each something that exists at the peak
  double total() const;
  std::string describe() const;  // "what 0.40 GiB + ... = 1.06 GiB"
};

// `eval`: the whole model as one fp32 shard (the engine on this process alone), the token
// arrays, and the larger of one block's forward working set without gradients and the loss
// chunk's logits — or with --dump-logits every position's logits and their log-softmax.
struct EvalShape {
  int64_t parameters = 0, hidden = 0, intermediate = 0, vocab = 0;
};
CommandMemory plan_eval_memory(const EvalShape& model, int64_t sequences, int64_t seq_len, int64_t loss_chunk_tokens,
                               bool dump_logits);

// `export`: one buffer of the largest tensor's size for the values read (fp32), one for their
// conversion when the output dtype is not fp32 (out_bytes per element), and the checkpoint's
// file pages mapped while a tensor is read (io::RankFileReader: a window per read thread);
// tensors are written one by one.
CommandMemory plan_export_memory(int64_t largest_tensor, int out_bytes, int read_threads);

// `prepare`, per rank, once every rank has tokenized its share (the totals are known then, and
// the large arrays are not yet allocated). The rank that assembles and writes the file (rank 0)
// holds every rank's tokens gathered and the rows (or document offsets) they are assembled
// into; the others only their own share. `with_mask`: instruction and chat records (a loss-mask
// byte per token); `row_length` 0: a document stream.
struct PrepareCounts {
  int64_t local_tokens = 0, local_records = 0, tokens = 0, records = 0;
  bool with_mask = false;
  int64_t row_length = 0;
  bool packing = false;
  bool assembles = true;
  int ranks = 1;
};
CommandMemory plan_prepare_memory(const PrepareCounts& counts);

// Throws a user error naming the numbers when the node's processes exceed kPlanHeadroom of its
// available memory: `processes_per_node` such plans, or `one_differs` and the rest such plans
// (prepare's rank 0 beside the others).
void check_command_memory(const CommandMemory& plan, int processes_per_node, const CommandMemory* one_differs = nullptr);

// Logs "<command>: host memory: peak RSS ..., plan ... (plan/peak ...): terms" (rank 0's).
void log_command_memory(const CommandMemory& plan);

}  // namespace superoffload::train
