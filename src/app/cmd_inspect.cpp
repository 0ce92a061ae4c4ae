// `superoffload inspect PATH`: a summary of a metrics.h5 file (steps, loss, throughput, the
// phase breakdown, the slowest rank) or of a checkpoint (step, world size, layers, sizes,
// with every file's checksum verified). PATH may also be an output directory or its
// checkpoints/ folder: then its metrics and its newest complete checkpoint are shown.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "app/commands.hpp"
#include "base/error.hpp"
#include "base/startup_timeline.hpp"
#include "cluster/mpi_world.hpp"
#include "io/checkpoint_files.hpp"
#include "io/hdf5_file.hpp"
#include "train/lr_suggestion.hpp"
#include "train/trace_summary.hpp"

namespace superoffload::app {
namespace {

namespace fs = std::filesystem;

// The mean of the values that are not NaN (resctrl's series are NaN where nothing was counted).
std::optional<double> mean_known(const std::vector<double>& v) {
  double sum = 0;
  size_t n = 0;
  for (double x : v) {
    if (!std::isnan(x)) {
      sum += x;
      ++n;
    }
  }
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

double mean(const std::vector<double>& v, size_t from = 0) {
  if (v.size() <= from) return 0;
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(from), v.end(), 0.0) / static_cast<double>(v.size() - from);
}

// An LR range test: loss against lr on a log axis (a text plot) and the suggested lr.
void print_lr_range_test(const std::vector<double>& lr, const std::vector<double>& loss) {
  const auto s = train::suggest_lr(lr, loss);
  std::printf("  lr range test  %zu steps, lr %.3g to %.3g", lr.size(), lr.front(), lr.back());
  if (s.found) {
    std::printf("; the loss fell fastest at lr %.3g (suggested), lowest at lr %.3g\n", s.steepest_lr, s.min_loss_lr);
  } else {
    std::printf("; no suggestion: %s\n", s.used_steps < 5 ? "fewer than 5 steps before the loss diverged"
                                                              : "the loss never fell");
  }
  if (lr.size() < 2 || !(lr.front() > 0)) return;
  double low = INFINITY, high = -INFINITY;
  for (double v : s.smoothed) {
    if (std::isfinite(v)) low = std::min(low, v), high = std::max(high, v);
  }
  // Rows evenly spaced in log(lr); each shows the smoothed loss as a bar.
  const int rows = static_cast<int>(std::min<size_t>(12, lr.size()));
  const double first = std::log(lr.front()), last = std::log(lr.back());
  std::vector<size_t> shown;
  for (int r = 0, i = 0; r < rows; ++r) {
    const double target = first + (last - first) * r / std::max(1, rows - 1);
    while (static_cast<size_t>(i) + 1 < lr.size() && std::log(lr[static_cast<size_t>(i)]) < target) ++i;
    if (shown.empty() || shown.back() != static_cast<size_t>(i)) shown.push_back(static_cast<size_t>(i));
  }
  size_t marked = shown.front();  // the row nearest the suggestion
  for (size_t i : shown) {
    if (std::abs(std::log(lr[i] / s.steepest_lr)) < std::abs(std::log(lr[marked] / s.steepest_lr))) marked = i;
  }
  std::printf("    %10s  %s\n", "lr", "loss (smoothed)");
  for (size_t i : shown) {
    const double v = s.smoothed[i];
    const int bar = std::isfinite(v) && high > low ? static_cast<int>(40 * (v - low) / (high - low)) : 0;
    std::printf("    %10.3g  %10.4f  %s%s\n", lr[i], v, std::string(static_cast<size_t>(bar) + 1, '#').c_str(),
                s.found && i == marked ? "  <- suggested" : "");
  }
}

// The eval curve over the training curve: a row per evaluation (at most ~24, evenly spread),
// the training loss of the same step beside it, and a bar for the eval loss.
void print_eval_curve(const std::vector<double>& eval_step, const std::vector<double>& eval_loss,
                      const std::vector<double>& steps, const std::vector<double>& loss) {
  std::vector<size_t> finite;
  for (size_t i = 0; i < eval_loss.size(); ++i) {
    if (std::isfinite(eval_loss[i])) finite.push_back(i);
  }
  std::printf("  validation  %zu evaluation(s)", eval_step.size());
  if (finite.empty()) {
    std::printf(", none finite\n");
    return;
  }
  const auto best = *std::min_element(finite.begin(), finite.end(), [&](size_t a, size_t b) { return eval_loss[a] < eval_loss[b]; });
  std::printf("; eval loss first %.4f, last %.4f, lowest %.4f (ppl %.4g) after step %.0f\n", eval_loss[finite.front()],
              eval_loss[finite.back()], eval_loss[best], std::exp(eval_loss[best]), eval_step[best]);
  double lo = eval_loss[best], hi = lo;
  for (size_t i : finite) hi = std::max(hi, eval_loss[i]);
  std::printf("    %8s  %10s  %10s  %s\n", "step", "train loss", "eval loss", "eval loss (bar: lowest to highest)");
  const size_t stride = (eval_step.size() + 23) / 24;
  for (size_t i = 0; i < eval_step.size(); i += stride) {
    // The training loss of that step (none before the first step).
    const auto at = std::find(steps.begin(), steps.end(), eval_step[i]);
    char train[16] = "-";
    if (at != steps.end()) std::snprintf(train, sizeof train, "%.4f", loss[static_cast<size_t>(at - steps.begin())]);
    const double v = eval_loss[i];
    const int bar = std::isfinite(v) && hi > lo ? static_cast<int>(40 * (v - lo) / (hi - lo)) : 0;
    std::printf("    %8.0f  %10s  %10.4f  %s%s\n", eval_step[i], train, v, std::string(static_cast<size_t>(bar) + 1, '#').c_str(),
                i == best ? "  <- lowest" : "");
  }
}

// The start-up timeline (/startup, written after step 1).
void print_startup(const io::Hdf5File& file) {
  if (!file.has("startup/seconds")) return;
  const auto seconds = file.read_double("startup/seconds").values;
  if (seconds.empty() || std::isnan(seconds.back())) {
    std::printf("  start-up    not recorded (step 1 of this run has not ended)\n");
    return;
  }
  const auto names = nlohmann::json::parse(file.dataset_attribute("startup/seconds", "phases"));
  const auto slowest = file.read_double("startup/slowest_rank_seconds").values;
  const auto rss = file.read_double("startup/rss_growth_bytes").values;
  const auto bytes = file.read_double("startup/bytes_read").values;
  std::vector<base::StartupPhase> phases;
  std::vector<double> slowest_known;
  for (size_t i = 0; i < seconds.size() && i < names.size(); ++i) {
    if (std::isnan(seconds[i])) continue;  // a phase this run did not have
    phases.push_back({names[i].get<std::string>(), {seconds[i], rss[i]}, bytes[i]});
    slowest_known.push_back(slowest[i]);
  }
  std::printf("  %s", base::format_startup(phases, slowest_known).c_str());
}

// [profile] trace_steps: rank 0's summary in full, a line for each other rank.
void print_trace(const io::Hdf5File& file) {
  if (!file.has("profile/trace/summaries")) return;
  const auto bytes = file.read_uint8("profile/trace/summaries").values;
  if (bytes.empty()) {
    std::printf("  trace       not taken yet (its steps are still to come)\n");
    return;
  }
  const auto summaries = nlohmann::json::parse(std::string(bytes.begin(), bytes.end()), nullptr, /*allow_exceptions=*/false);
  if (!summaries.is_array() || summaries.empty()) {
    std::printf("  trace       unreadable summary in /profile/trace/summaries\n");
    return;
  }
  const auto& mine = summaries[0];
  std::printf("  trace       rank 0: %s\n", mine.value("trace", "?").c_str());
  if (mine.contains("error")) {
    std::printf("  %s\n", mine["error"].get<std::string>().c_str());
  } else {
    std::printf("%s", train::format_trace_summary(mine).c_str());
  }
  for (size_t r = 1; r < summaries.size(); ++r) std::printf("%s", train::format_trace_rank_line(r, summaries[r]).c_str());
}

void inspect_metrics(const fs::path& path) {
  const auto file = io::Hdf5File::open_read_swmr(path.string());
  SO_CHECK(file.has("train/step"), path.string() << " is not a superoffload metrics file (no /train/step)");
  auto series = [&](const char* name) { return file.read_double(std::string("train/") + name).values; };
  const auto steps = series("step");
  std::printf("metrics %s\n", path.string().c_str());
  if (steps.empty()) {
    std::printf("  no steps recorded yet\n");
    return;
  }
  // Files written before model and hardware FLOPs were told apart hold the hardware figure, as "tflops".
  const bool model_flops = file.has("train/model_tflops_per_device");
  const auto loss = series("loss"), step_time = series("step_time_s"), tokens = series("tokens_per_s"),
             tflops = series(model_flops ? "model_tflops_per_device" : "tflops"), skipped = series("skipped");
  auto total = [&](const char* name) {  // 0 for series older files do not have
    if (!file.has(std::string("train/") + name)) return 0.0;
    const auto v = series(name);
    return std::accumulate(v.begin(), v.end(), 0.0);
  };
  // The first step carries one-off costs; leave it out of the means when there are others.
  const size_t from = steps.size() > 1 ? 1 : 0;
  std::printf("  steps       %.0f to %.0f (%zu rows)\n", steps.front(), steps.back(), steps.size());
  std::printf("  loss        first %.4f, last %.4f, min %.4f\n", loss.front(), loss.back(),
              *std::min_element(loss.begin(), loss.end()));
  std::printf("  throughput  mean step %.1f ms, %.0f tokens/s, %.3g TFLOPS per device (%s FLOPs; steps after the first)\n",
              1000 * mean(step_time, from), mean(tokens, from), mean(tflops, from), model_flops ? "model" : "hardware");
  if (model_flops) {
    const auto mfu = series("mfu"), hfu = series("hfu");
    std::printf("              %.3g TFLOPS per device with recomputation (hardware)", mean(series("hardware_tflops_per_device"), from));
    if (mean(mfu, from) > 0) std::printf(", MFU %.1f%%, HFU %.1f%%", 100 * mean(mfu, from), 100 * mean(hfu, from));
    std::printf("\n");
  }
  std::printf("  optimizer   %.0f skipped steps; CPU sub-group steps: %.0f speculated (%.0f committed, %.0f replayed, "
              "%.0f undone), %.0f stepped late\n",
              std::accumulate(skipped.begin(), skipped.end(), 0.0), total("speculated"), total("committed"),
              total("replayed"), total("undone"), total("stepped_late"));
  if (total("predicted_stops") > 0) {
    std::printf("              speculation auto stopped on a prediction of clipping %.0f times (rank-steps), wrongly %.0f\n",
                total("predicted_stops"), total("mispredicted_stops"));
  }
  std::printf("  phases (mean s per step):");
  for (const char* phase : {"forward_s", "backward_s", "gather_wait_s", "reduce_s", "reduce_wait_s", "d2h_s", "cpu_step_s",
                            "device_step_s", "h2d_s", "optimizer_wait_s", "rollback_s", "norm_s"}) {
    if (file.has(std::string("train/") + phase)) std::printf(" %s %.4f", phase, mean(series(phase), from));
  }
  std::printf("\n  memory      host peak RSS %.1f MB (rank 0)\n", series("host_peak_rss_bytes").back() / 1e6);
  // resctrl's counters ([runtime] resctrl), summed over the ranks that monitored.
  if (file.has("train/optimizer_mem_gb_per_s")) {
    const auto optimizer = mean_known(series("optimizer_mem_gb_per_s")), rest = mean_known(series("rest_mem_gb_per_s"));
    const auto optimizer_cache = mean_known(series("optimizer_cache_bytes"));
    const auto rest_cache = mean_known(series("rest_cache_bytes"));
    if (optimizer || rest) {
      std::printf("  resctrl     memory bandwidth (mean GB/s): optimizer %.3g, rest %.3g; cache occupancy (mean MB): "
                  "optimizer %.3g, rest %.3g\n",
                  optimizer.value_or(std::nan("")), rest.value_or(std::nan("")),
                  optimizer_cache.value_or(std::nan("")) / 1e6, rest_cache.value_or(std::nan("")) / 1e6);
    } else {
      std::printf("  resctrl     not monitored in this run\n");
    }
  }
  // The run's configuration (an attribute the trainer writes) says whether it was a range test.
  if (file.attribute("config").find("type = \"lr_range_test\"") != std::string::npos) {
    print_lr_range_test(series("lr"), loss);
  }
  if (file.has("eval/step")) {
    const auto eval_step = file.read_double("eval/step").values;
    if (!eval_step.empty()) print_eval_curve(eval_step, file.read_double("eval/loss").values, steps, loss);
  }
  if (file.has("ranks/step_time_s")) {
    const auto per_rank = file.read_double("ranks/step_time_s");
    const size_t rows = per_rank.shape[0], world = per_rank.shape[1];
    std::vector<double> rank_mean(world, 0.0);
    for (size_t r = from; r < rows; ++r) {
      for (size_t k = 0; k < world; ++k) rank_mean[k] += per_rank.values[r * world + k] / static_cast<double>(rows - from);
    }
    const auto slowest = std::max_element(rank_mean.begin(), rank_mean.end()) - rank_mean.begin();
    std::printf("  ranks       %zu; slowest rank %td at %.1f ms per step, fastest %.1f ms\n", world, slowest,
                1000 * rank_mean[static_cast<size_t>(slowest)], 1000 * *std::min_element(rank_mean.begin(), rank_mean.end()));
  }
  print_trace(file);
  print_startup(file);
}

void inspect_checkpoint(const fs::path& directory, const cluster::MpiWorld& world) {
  const auto problem = io::checkpoint_problem(directory, world.world());
  if (world.rank() != 0) return;
  std::printf("checkpoint %s\n", directory.string().c_str());
  SO_CHECK(problem.empty(), problem);
  const auto manifest = nlohmann::json::parse(std::ifstream(directory / "manifest.json"));
  uint64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(directory)) bytes += fs::file_size(entry.path());
  int64_t parameters = 0;
  for (const auto& layer : manifest.at("layers")) parameters += layer.at("numel").get<int64_t>();
  const auto& model = manifest.at("model");
  std::printf("  step        %lld (epoch %lld, batch %lld; %lld skipped steps)\n",
              static_cast<long long>(manifest.at("step").get<int64_t>()),
              static_cast<long long>(manifest.at("training").at("sampler_epoch").get<int64_t>()),
              static_cast<long long>(manifest.at("training").at("sampler_batch").get<int64_t>()),
              static_cast<long long>(manifest.at("training").at("skipped_steps").get<int64_t>()));
  const int64_t experts_split = manifest.value("expert_parallel_size", int64_t{1});
  std::printf("  written by  %d rank(s)%s; format %d; git %s\n", manifest.at("world_size").get<int>(),
              experts_split > 1 ? (", experts split " + std::to_string(experts_split) +
                                   " ways ([moe] expert_parallel_size; any split resumes it)").c_str()
                                : "",
              manifest.at("format_version").get<int>(), manifest.value("git_revision", "?").c_str());
  std::printf("  model       %s (%s, plugin %s %s)\n", model.value("path", "?").c_str(),
              model.value("architecture", "?").c_str(), model.value("plugin", "?").c_str(),
              model.value("plugin_version", "?").c_str());
  std::printf("  state       %zu layers, %lld parameters (fp32 master + 2 moments), %.1f MB on disk\n",
              manifest.at("layers").size(), static_cast<long long>(parameters), static_cast<double>(bytes) / 1e6);
  std::printf("  integrity   DONE present; manifest and %d rank file(s) match their recorded sizes and %s\n",
              manifest.at("world_size").get<int>(), manifest.at("format_version").get<int>() == 1 ? "CRC32" : "CRC32C");
}

}  // namespace

void add_inspect_command(CLI::App& app, const GlobalOptions& /*globals*/, Run& run) {
  auto path = std::make_shared<std::string>();
  auto* command = app.add_subcommand("inspect", "Summarise a metrics.h5 file or a checkpoint (checksums verified)");
  command->add_option("path", *path, "metrics.h5, a checkpoint directory, or a run's output directory")->required();
  command->callback([&run, path] {
    run = [path](const cluster::MpiWorld& world) {
      fs::path target(*path);
      SO_CHECK(fs::exists(target), *path << " does not exist");
      if (fs::is_regular_file(target)) {
        if (world.rank() == 0) inspect_metrics(target);
        return 0;
      }
      if (io::step_of(target) || fs::exists(target / "DONE")) {
        inspect_checkpoint(target, world);
        return 0;
      }
      // An output directory or its checkpoints/ folder.
      const fs::path root = fs::exists(target / "checkpoints") ? target / "checkpoints" : target;
      if (world.rank() == 0 && fs::exists(target / "metrics.h5")) inspect_metrics(target / "metrics.h5");
      std::vector<std::string> notes;
      const auto chosen = io::resolve_checkpoint(root, "latest", world.world(), notes);
      if (world.rank() == 0) {
        for (const auto& note : notes) std::printf("note: %s\n", note.c_str());
      }
      SO_CHECK(!chosen.empty() || fs::exists(target / "metrics.h5"),
               "no metrics.h5 and no complete checkpoint under " << *path);
      if (!chosen.empty()) inspect_checkpoint(chosen, world);
      return 0;
    };
  });
}

}  // namespace superoffload::app
