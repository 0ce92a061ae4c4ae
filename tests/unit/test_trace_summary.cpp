// The step trace's summary (train/trace_summary.hpp) on traces written here event by event in
// Kineto's Chrome-trace format. The GPU one stands in for a CUDA trace (no GPU on the machines
// that run this suite): its categories, names and args are those Kineto writes for CUPTI's
// kernels, copies and runtime calls. The CLI test (tests/cli/test_trace.sh) checks the real
// Kineto traces of the tiny model, on the CPU and, under the gpu label, on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "config/step_range.hpp"
#include "train/trace_summary.hpp"

namespace superoffload::train {
namespace {

using nlohmann::json;

json event(const std::string& cat, const std::string& name, double ts, double dur, int pid, int tid, json args = json::object()) {
  return {{"ph", "X"}, {"cat", cat}, {"name", name}, {"ts", ts}, {"dur", dur}, {"pid", pid}, {"tid", tid}, {"args", args}};
}

// One 10 ms step on host thread 1/1; the GPU (pid 0) runs on streams 7 and 8.
json gpu_trace() {
  json events = json::array();
  events.push_back(event("user_annotation", "superoffload/step 5", 0, 10000, 1, 1));
  // Device: busy 100-3000 (two overlapping kernels on two streams), 5000-9000; a DtoH copy
  // inside the first stretch, an HtoD one inside the second.
  events.push_back(event("kernel", "sm90_gemm", 100, 2000, 0, 7, {{"correlation", 1}}));
  events.push_back(event("kernel", "sm90_gemm", 2000, 1000, 0, 8, {{"correlation", 2}}));
  events.push_back(event("kernel", "elementwise_kernel", 5000, 4000, 0, 7, {{"correlation", 3}}));
  events.push_back(event("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 2920, 10, 0, 7,
                         {{"correlation", 9}, {"bytes", 4}}));
  events.push_back(event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 6000, 100, 0, 8,
                         {{"correlation", 4}, {"bytes", 1e6}}));
  // Host: the loss read (an item: a pageable copy and a stream synchronisation, one call of
  // ours), the backward whose mm queues the kernel that ends the gap, a device synchronisation
  // of our own in the optimizer step.
  events.push_back(event("user_annotation", "superoffload/loss read", 2800, 800, 1, 1));
  events.push_back(event("cpu_op", "aten::item", 2900, 600, 1, 1));
  events.push_back(event("cpu_op", "aten::_local_scalar_dense", 2905, 590, 1, 1));
  events.push_back(event("cuda_runtime", "cudaMemcpyAsync", 2910, 30, 1, 1, {{"correlation", 9}}));
  events.push_back(event("cuda_runtime", "cudaStreamSynchronize", 2950, 450, 1, 1, {{"correlation", 10}}));
  events.push_back(event("user_annotation", "superoffload/backward#2", 4000, 2000, 1, 1));
  events.push_back(event("cpu_op", "aten::linear", 4700, 300, 1, 1));
  events.push_back(event("cpu_op", "aten::mm", 4800, 150, 1, 1));
  // Autograd's thread (no annotation of ours on it) launches the second gemm.
  events.push_back(event("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 4050, 200, 1, 2));
  events.push_back(event("cpu_op", "aten::mm", 4060, 100, 1, 2));
  events.push_back(event("cuda_runtime", "cudaLaunchKernel", 4100, 5, 1, 2, {{"correlation", 2}}));
  events.push_back(event("cuda_runtime", "cudaLaunchKernel", 4900, 10, 1, 1, {{"correlation", 3}}));
  events.push_back(event("cuda_runtime", "cudaMemcpyAsync", 5950, 20, 1, 1, {{"correlation", 4}}));
  events.push_back(event("user_annotation", "superoffload/optimizer step", 9200, 700, 1, 1));
  events.push_back(event("cuda_runtime", "cudaDeviceSynchronize", 9500, 100, 1, 1, {{"correlation", 11}}));
  // Outside the step: not counted.
  events.push_back(event("kernel", "after_the_step", 12000, 500, 0, 7, {{"correlation", 12}}));
  events.push_back(event("cuda_runtime", "cudaStreamSynchronize", 12000, 50, 1, 1, {{"correlation", 13}}));
  return {{"schemaVersion", 1}, {"traceEvents", events}};
}

TEST(TraceSummary, GpuBusyFractionGapsAndWhoEndedThem) {
  const auto s = summarize_trace(gpu_trace());
  EXPECT_EQ(s["device"], "gpu");
  ASSERT_EQ(s["steps"].size(), 1u);
  EXPECT_EQ(s["steps"][0]["step"], 5);
  EXPECT_NEAR(s["seconds"].get<double>(), 0.010, 1e-12);
  // Busy 100-3000 and 5000-9000: 6.9 of 10 ms.
  EXPECT_NEAR(s["busy_fraction"].get<double>(), 0.69, 1e-12);
  // Gaps: 0-100 (under 0.5 ms), 3000-5000 and 9000-10000.
  const auto& gaps = s["gaps"];
  ASSERT_EQ(gaps["count"], 2);
  EXPECT_NEAR(gaps["seconds"].get<double>(), 0.003, 1e-12);
  const auto& longest = gaps["listed"][0];
  EXPECT_NEAR(longest["ms"].get<double>(), 2.0, 1e-9);
  EXPECT_NEAR(longest["at_ms"].get<double>(), 3.0, 1e-9);
  EXPECT_EQ(longest["preceded_by"], "aten::_local_scalar_dense");  // the innermost operator as the device ran dry
  EXPECT_EQ(longest["scope"], "superoffload/backward#2");           // where the host was halfway through
  EXPECT_EQ(longest["next"], "elementwise_kernel");
  EXPECT_EQ(longest["queued_by"], "aten::mm");
  EXPECT_EQ(gaps["listed"][1]["scope"], "superoffload/optimizer step");
}

TEST(TraceSummary, GpuKernelsCopiesAndSynchronisations) {
  const auto s = summarize_trace(gpu_trace());
  const auto& top = s["kernels"]["top"];
  ASSERT_EQ(top.size(), 2u);  // the kernel after the step is not counted
  EXPECT_EQ(top[0]["name"], "elementwise_kernel");
  EXPECT_NEAR(top[0]["share"].get<double>(), 4.0 / 7.0, 1e-12);
  EXPECT_EQ(top[1]["name"], "sm90_gemm");
  EXPECT_EQ(top[1]["calls"], 2);
  EXPECT_NEAR(top[1]["seconds"].get<double>(), 0.003, 1e-12);
  // Who launched them: the outermost operator around the launch, in our scope (found on the
  // step's thread when the launching thread has none); a kernel without a launch in the
  // trace counts for no source.
  ASSERT_EQ(top[0]["launched_by"].size(), 1u);
  EXPECT_EQ(top[0]["launched_by"][0]["by"], "aten::linear in superoffload/backward");
  EXPECT_NEAR(top[0]["launched_by"][0]["share"].get<double>(), 1.0, 1e-12);
  ASSERT_EQ(top[1]["launched_by"].size(), 1u);
  EXPECT_EQ(top[1]["launched_by"][0]["by"], "autograd::engine::evaluate_function: MmBackward0 in superoffload/backward");
  EXPECT_NEAR(top[1]["launched_by"][0]["share"].get<double>(), 1.0 / 3.0, 1e-12);
  const auto text = format_trace_summary(s);
  EXPECT_NE(text.find("from aten::linear in superoffload/backward 100%"), std::string::npos) << text;

  ASSERT_EQ(s["copies"].size(), 2u);
  for (const auto& c : s["copies"]) {
    if (c["direction"] == "HtoD") {
      EXPECT_EQ(c["memory"], "pinned");
      EXPECT_NEAR(c["gb_per_s"].get<double>(), 10.0, 1e-9);  // 1 MB in 100 µs
    } else {
      EXPECT_EQ(c["direction"], "DtoH");
      EXPECT_EQ(c["memory"], "pageable");
      EXPECT_EQ(c["bytes"], 4);
    }
  }
  // The item's copy and synchronisation are one call of ours; the optimizer's device
  // synchronisation another; the pinned copy does not wait; the one after the step is not counted.
  const auto& syncs = s["syncs"];
  EXPECT_EQ(syncs["count"], 2);
  EXPECT_EQ(s["steps"][0]["syncs"], 2);
  ASSERT_EQ(syncs["sources"].size(), 2u);
  std::set<std::string> where;
  for (const auto& source : syncs["sources"]) where.insert(source["where"].get<std::string>());
  EXPECT_TRUE(where.count("superoffload/loss read > aten::item")) << syncs.dump();
  EXPECT_TRUE(where.count("superoffload/optimizer step > cudaDeviceSynchronize")) << syncs.dump();

  std::map<std::string, double> f;
  for (const auto& [name, value] : trace_figures(s)) f[name] = value;
  EXPECT_NEAR(f["busy_fraction"], 0.69, 1e-12);
  EXPECT_EQ(f["htod_bytes"], 1e6);
  EXPECT_EQ(f["pageable_bytes"], 4);
  EXPECT_EQ(f["syncs_per_step"], 2);
  EXPECT_TRUE(std::isnan(f["allocator_retries"]));  // the tracer adds the allocator's counts
}

// Kernel time by class: every kernel of the steps in one class, named as the H200's traces
// named them (cuBLAS's nvjet, cuDNN's SDPA, LibTorch's elementwise, copy and reduction kernels,
// NCCL), shares of all kernel time summing to 1, and the classes in the printed summary.
TEST(TraceSummary, GpuKernelTimeByClass) {
  json events = json::array();
  events.push_back(event("user_annotation", "superoffload/step 3", 0, 100000, 1, 1));
  const std::vector<std::pair<std::string, double>> kernels = {
      {"nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", 40000},
      {"cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128", 10000},
      {"void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>", 8000},
      {"void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16>>", 12000},
      {"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>", 5000},
      {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, LogSoftMaxForwardEpilogue>", 3000},
      {"ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 2000},
      {"some_kernel_of_a_plugin", 1000}};
  double t = 0;
  int correlation = 1;
  for (const auto& [name, us] : kernels) {
    events.push_back(event("kernel", name, t, us, 0, 7, {{"correlation", correlation++}}));
    t += us;
  }
  const auto s = summarize_trace(json{{"traceEvents", events}});
  std::map<std::string, double> share;
  double sum = 0;
  for (const auto& row : s["kernels"]["classes"]) {
    share[row["class"].get<std::string>()] = row["share"].get<double>();
    sum += row["share"].get<double>();
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NEAR(share["matrix products"], 0.40 / 0.81, 1e-12);
  EXPECT_NEAR(share["attention"], 0.10 / 0.81, 1e-12);
  EXPECT_NEAR(share["copies, casts and indexing"], 0.08 / 0.81, 1e-12);
  EXPECT_NEAR(share["elementwise"], 0.12 / 0.81, 1e-12);
  EXPECT_NEAR(share["reductions and norms"], 0.05 / 0.81, 1e-12);
  EXPECT_NEAR(share["loss"], 0.03 / 0.81, 1e-12);
  EXPECT_NEAR(share["communication"], 0.02 / 0.81, 1e-12);
  EXPECT_NEAR(share["other"], 0.01 / 0.81, 1e-12);
  EXPECT_EQ(s["kernels"]["classes"][0]["class"], "matrix products");  // largest first
  const auto text = format_trace_summary(s, 3, 3, 3);
  EXPECT_NE(text.find("by class: matrix products 49.4%, elementwise 14.8%, attention 12.3%"), std::string::npos) << text;
}

// Two steps on a CPU: operators nest on the step's thread; other threads do not count.
json cpu_trace() {
  json events = json::array();
  for (int step = 0; step < 2; ++step) {
    const double t0 = step * 10000.0;
    events.push_back(event("user_annotation", "superoffload/step " + std::to_string(3 + step), t0, 10000, 9, 9));
    events.push_back(event("user_annotation", "superoffload/forward#1", t0, 4000, 9, 9));
    events.push_back(event("cpu_op", "aten::linear", t0 + 100, 3000, 9, 9));   // self 1000
    events.push_back(event("cpu_op", "aten::mm", t0 + 200, 2000, 9, 9));       // self 2000
    events.push_back(event("user_annotation", "superoffload/gather#2", t0 + 4000, 3000, 9, 9));  // idle: waiting
    events.push_back(event("cpu_op", "aten::item", t0 + 7000, 100, 9, 9));
    events.push_back(event("cpu_op", "aten::_local_scalar_dense", t0 + 7010, 80, 9, 9));
    events.push_back(event("cpu_op", "aten::nonzero", t0 + 7200, 300, 9, 9));
    events.push_back(event("cpu_op", "aten::mm", t0 + 7600, 2400, 9, 9));
    // A kernel's own read of a scalar (the fused AdamW's step count): not ours, no read on a GPU.
    events.push_back(event("cpu_op", "aten::_local_scalar_dense", t0 + 8000, 10, 9, 9));
    events.push_back(event("cpu_op", "aten::mm", t0 + 500, 9000, 9, 10));  // another thread
  }
  return {{"traceEvents", events}};
}

TEST(TraceSummary, CpuOperatorsSelfTimeGapsAndHostReads) {
  const auto s = summarize_trace(cpu_trace());
  EXPECT_EQ(s["device"], "cpu");
  ASSERT_EQ(s["steps"].size(), 2u);
  // Busy per step: 100-3100, 7000-7100, 7200-7500, 7600-10000 = 5.8 of 10 ms.
  EXPECT_NEAR(s["busy_fraction"].get<double>(), 0.58, 1e-12);
  // Gaps per step: 0-100 (short), 3100-7000 (3.9 ms), 7100-7200 and 7500-7600 (short).
  EXPECT_EQ(s["gaps"]["count"], 2);
  const auto& gap = s["gaps"]["listed"][0];
  EXPECT_NEAR(gap["ms"].get<double>(), 3.9, 1e-9);
  EXPECT_EQ(gap["preceded_by"], "aten::linear");
  EXPECT_EQ(gap["scope"], "superoffload/gather#2");
  EXPECT_FALSE(gap.contains("queued_by"));
  // Self times over both steps: mm 2 × (2000 + 2400 - 10 of the read inside), linear 2 × 1000.
  const auto& top = s["kernels"]["top"];
  EXPECT_EQ(top[0]["name"], "aten::mm");
  EXPECT_NEAR(top[0]["seconds"].get<double>(), 0.00878, 1e-12);
  EXPECT_EQ(top[0]["calls"], 4);
  EXPECT_EQ(top[1]["name"], "aten::linear");
  EXPECT_NEAR(top[1]["seconds"].get<double>(), 0.002, 1e-12);
  // item (its _local_scalar_dense once) and nonzero, in both steps.
  EXPECT_EQ(s["syncs"]["count"], 4);
  EXPECT_EQ(s["syncs"]["per_step"], 2);
  EXPECT_TRUE(s["copies"].empty());
  std::map<std::string, double> f;
  for (const auto& [name, value] : trace_figures(s)) f[name] = value;
  EXPECT_TRUE(std::isnan(f["htod_bytes"]));
  EXPECT_EQ(f["steps"], 2);
  const auto text = format_trace_summary(s);
  EXPECT_NE(text.find("step 3: 10.0 ms, operators busy 58.0%, 1 gap(s) over 0.5 ms (3.9 ms), 2 synchronising call(s)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(outside superoffload's scopes) > aten::item"), std::string::npos) << text;
  EXPECT_NE(text.find("host<->device copies: none (a CPU run)"), std::string::npos) << text;
}

TEST(TraceSummary, TraceWithoutStepsIsRefused) {
  json trace = {{"traceEvents", json::array({event("cpu_op", "aten::mm", 0, 10, 1, 1)})}};
  EXPECT_THROW(summarize_trace(trace), superoffload::Error);
  EXPECT_THROW(summarize_trace(json::object()), superoffload::Error);
}

TEST(StepRange, ParsesOneStepOrARange) {
  std::string problem;
  EXPECT_FALSE(config::parse_step_range("", problem));
  EXPECT_TRUE(problem.empty());
  const auto one = config::parse_step_range("3", problem);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->first, 3);
  EXPECT_EQ(one->last, 3);
  const auto two = config::parse_step_range("3-14", problem);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->first, 3);
  EXPECT_EQ(two->last, 14);
  EXPECT_TRUE(two->contains(14) && !two->contains(2) && !two->contains(15));
  for (const char* bad : {"0", "4-3", "a", "3-", "-3", "3-4-5", " 3", "1.5"}) {
    EXPECT_FALSE(config::parse_step_range(bad, problem)) << bad;
    EXPECT_NE(problem.find(bad), std::string::npos) << problem;
  }
}

}  // namespace
}  // namespace superoffload::train
