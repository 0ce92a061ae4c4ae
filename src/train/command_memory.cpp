// command_memory.
#include "train/command_memory.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "base/startup_timeline.hpp"
#include "io/rank_file.hpp"
#include "train/memory_plan.hpp"

namespace superoffload::train {
namespace {

std::string in_gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

// What this process holds resident now (the program, its libraries and what it loaded so far).
double resident_now() {
  std::ifstream in("/proc/self/statm");
  double pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

double CommandMemory::total() const {
  double sum = 0;
  for (const auto& [what, bytes] : terms) sum += bytes;
  return sum;
}

std::string CommandMemory::describe() const {
  std::string text;
  for (const auto& [what, bytes] : terms) text += (text.empty() ? "" : " + ") + what + " " + in_gib(bytes);
  return text + " = " + in_gib(total());
}

CommandMemory plan_eval_memory(const EvalShape& m, int64_t sequences, int64_t seq_len, int64_t loss_chunk_tokens,
                               bool dump_logits) {
  const double tokens = static_cast<double>(sequences) * static_cast<double>(seq_len);
  const double h = static_cast<double>(m.hidden), i = static_cast<double>(m.intermediate);
  const double vocab = static_cast<double>(m.vocab);
  CommandMemory plan{"eval", {}};
  // With LibTorch's host kernels set up, as the forward will have them.
  plan.terms.emplace_back("program and libraries", process_baseline_bytes());
  plan.terms.emplace_back("allocator slack", kAllocatorSlackBytes);
  plan.terms.emplace_back("model (fp32)", 4.0 * static_cast<double>(m.parameters));
  // The file's int64 values, their copy, the labels, and the positions when given.
  plan.terms.emplace_back("tokens", 4 * 8 * tokens);
  // A block's forward under no_grad: its input, the residual stream and a few hidden-sized
  // intermediates (norm, attention output, projection), and the MLP's four at its peak (gate,
  // up, the activation of gate, their product) — as heaptrack shows them at eval's peak.
  const double block = (5 * h + 4 * i) * 4 * tokens;
  // The loss chunk (HeadLayer::chunked_loss: about loss_chunk_tokens tokens): fp32 logits and
  // their log-softmax, with the final hidden states.
  const double chunk = std::min(tokens, static_cast<double>(std::max<int64_t>(1, loss_chunk_tokens)));
  const double loss = 2 * 4 * chunk * vocab + 4 * h * tokens;
  if (dump_logits) {
    // forward_logits: every position's fp32 logits at once, and the per-token loss's log-softmax.
    plan.terms.emplace_back("logits of every position and their log-softmax", std::max(block, 2 * 4 * tokens * vocab));
  } else if (block >= loss) {
    plan.terms.emplace_back("a block's forward", block);
  } else {
    plan.terms.emplace_back("the loss chunk's logits", loss);
  }
  return plan;
}

CommandMemory plan_export_memory(int64_t largest_tensor, int out_bytes, int read_threads) {
  const double largest = static_cast<double>(largest_tensor);
  CommandMemory plan{"export", {}};
  plan.terms.emplace_back("program and libraries", resident_now());
  plan.terms.emplace_back("the largest tensor read (fp32)", 4 * largest);
  if (out_bytes != 4) plan.terms.emplace_back("its conversion", static_cast<double>(out_bytes) * largest);
  const int threads = std::clamp(read_threads, 1, io::RankFileReader::kMaxReadThreads);
  plan.terms.emplace_back("the checkpoint's mapped read windows",
                          std::min(4 * largest, threads * static_cast<double>(io::RankFileReader::kReadWindowBytes)));
  return plan;
}

CommandMemory plan_prepare_memory(const PrepareCounts& c) {
  const double per_token = c.with_mask ? 5.0 : 4.0;  // uint32 id (+ uint8 loss mask)
  CommandMemory plan{"prepare", {}};
  // Measured once this rank has tokenized its share: the share is resident already.
  plan.terms.emplace_back("program, libraries, tokenizer and this rank's tokens", resident_now());
  if (!c.assembles) return plan;  // it sends its share and is done
  const double share = per_token * static_cast<double>(c.local_tokens) + 8.0 * static_cast<double>(c.local_records);
  double assembled = 8.0 * static_cast<double>(c.records);  // a document offset per record; the tokens are moved
  std::string what = "document offsets";
  if (c.row_length > 0) {
    // data::assemble_rows reserves what the rows will hold: packed, the tokens and a tenth of
    // padding; else a row per record.
    const double row_tokens = c.packing ? static_cast<double>(c.tokens) * 1.1 + static_cast<double>(c.row_length)
                                        : static_cast<double>(c.records) * static_cast<double>(c.row_length);
    assembled += per_token * row_tokens;
    what = "rows";
  }
  // On one rank the share is moved, not gathered. Otherwise data::prepare_records frees the share
  // once it is sent: the arrays assembled next reuse that much of the peak.
  if (c.ranks > 1) {
    plan.terms.emplace_back("every rank's tokens, gathered",
                            per_token * static_cast<double>(c.tokens) + 8.0 * static_cast<double>(c.records));
    plan.terms.emplace_back(what + " beyond the freed share", std::max(0.0, assembled - share));
  } else {
    plan.terms.emplace_back(what, assembled);
  }
  return plan;
}

void check_command_memory(const CommandMemory& plan, int processes_per_node, const CommandMemory* one_differs) {
  const double available = available_host_bytes();
  const int processes = std::max(1, processes_per_node);
  const double needed = one_differs != nullptr ? one_differs->total() + (processes - 1) * plan.total() : processes * plan.total();
  if (available <= 0 || needed <= kPlanHeadroom * available) return;
  char numbers[200];
  if (one_differs != nullptr) {
    std::snprintf(numbers, sizeof numbers, "about %.3g GB of host memory on this node (one process %.3g GB, %d x %.3g GB)",
                  needed / 1e9, one_differs->total() / 1e9, processes - 1, plan.total() / 1e9);
  } else {
    std::snprintf(numbers, sizeof numbers, "about %.3g GB of host memory on this node (%d process(es) x %.3g GB)",
                  needed / 1e9, processes, plan.total() / 1e9);
  }
  char have[64];
  std::snprintf(have, sizeof have, "%.3g GB", available / 1e9);
  throw Error(plan.command + " needs " + numbers + " and the node has " + have +
                  " available: it would be killed by the out-of-memory killer (" +
                  (one_differs != nullptr ? one_differs->describe() : plan.describe()) + ")",
              plan.command == "prepare" ? "prepare on a node with more free memory (only rank 0 holds every rank's "
                                          "tokens), or split the JSONL file"
                                        : "run it on a node with more free memory",
              Error::UserInput{});
}

void log_command_memory(const CommandMemory& plan) {
  const double peak = base::peak_rss_bytes();
  char ratio[16];
  std::snprintf(ratio, sizeof ratio, "%.3f", plan.total() / std::max(peak, 1.0));
  SO_LOG(info) << plan.command << ": host memory: peak RSS " << in_gib(peak) << ", plan " << in_gib(plan.total())
               << " (plan/peak " << ratio << "): " << plan.describe();
}

}  // namespace superoffload::train
