// Checkpoint → parameters.
#include "model_io/weights.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>

#include <torch/autograd.h>

#include "base/error.hpp"
#include "base/fresh_memory.hpp"
#include "base/non_finite.hpp"
#include "base/parallel_ranges.hpp"
#include "cluster/compute_threads.hpp"

namespace superoffload::model {
namespace {

std::string list(const std::vector<std::string>& names) {
  std::ostringstream os;
  const size_t shown = std::min<size_t>(names.size(), 12);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << names[i];
  if (names.size() > shown) os << " … (" << names.size() - shown << " more)";
  return os.str();
}

std::string shape_text(at::IntArrayRef shape) {
  std::ostringstream os;
  os << shape;
  return os.str();
}

// Tensors that checkpoints carry but that are buffers, not parameters, here.
bool ignorable(const CausalLM& model, const std::string& name) {
  return name.ends_with(".rotary_emb.inv_freq") || model.ignorable_checkpoint_tensor(name);
}

// The checkpoint's name for a parameter: the HF name, or the name without the base-model
// prefix in checkpoints saved from the base model alone.
std::string checkpoint_name(const CausalLM& model, const SafetensorsCheckpoint& checkpoint, const std::string& name) {
  if (checkpoint.contains(name)) return name;
  const auto prefix = model.checkpoint_prefix();
  if (!prefix.empty() && name.starts_with(prefix) && checkpoint.contains(name.substr(prefix.size()))) {
    return name.substr(prefix.size());
  }
  return name;
}

// Published GPT-OSS checkpoints store expert weights as MXFP4: <name>_blocks (uint8, two
// e2m1 values per byte, low nibble first, 32 values per group) and <name>_scales (uint8
// exponents, bias 127) with rows = output features. HF dequantizes them to [experts, in, out].
bool is_mxfp4(const SafetensorsCheckpoint& checkpoint, const std::string& name) {
  return !checkpoint.contains(name) && checkpoint.contains(name + "_blocks") && checkpoint.contains(name + "_scales");
}

at::Tensor dequantize_mxfp4(const TensorView& blocks_view, const TensorView& scales_view) {
  static const float kFp4[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const auto blocks = as_tensor(blocks_view);  // [*prefix, groups, 16]
  const auto scales = as_tensor(scales_view).to(at::kInt) - 127;
  SO_CHECK(blocks.dim() >= 3 && blocks.sizes().slice(0, blocks.dim() - 1) == scales.sizes(),
           "MXFP4 tensors " << blocks_view.name << " and " << scales_view.name << " have inconsistent shapes");
  const auto lut = at::from_blob(const_cast<float*>(kFp4), {16}, at::kFloat);
  const auto low = lut.index({(blocks.bitwise_and(0x0F)).to(at::kLong)});
  const auto high = lut.index({(blocks.bitwise_right_shift(4)).to(at::kLong)});
  auto values = at::stack({low, high}, -1).flatten(-2);  // [*prefix, groups, 32]
  values = at::ldexp(values, scales.unsqueeze(-1).to(at::kFloat));
  auto shape = scales.sizes().vec();
  shape.back() *= 32;
  return values.reshape(shape).transpose(1, 2).contiguous();  // [experts, in, out]
}

bool is_float(DType dtype) {
  return dtype == DType::F64 || dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

// A parameter is read only from a floating-point tensor: an I32 tensor has the byte size of
// an F32 one, and converting its integers to float would train on garbage without a word.
// FP8 tensors are refused as well: every published FP8 checkpoint needs per-block scales
// that a plain conversion would ignore.
const TensorView& float_tensor(SafetensorsCheckpoint& checkpoint, const std::string& stored) {
  const auto& view = checkpoint.get(stored);
  if (!is_float(view.dtype)) {
    throw Error(checkpoint.path_of(stored).string() + ": tensor \"" + stored + "\" is stored as " +
                    dtype_name(view.dtype) + ", but a parameter is read only from F32, BF16, F16 or F64",
                "integer or FP8 data is never reinterpreted as weights; export the checkpoint again in a float type",
                Error::UserInput{});
  }
  return view;
}

const TensorView& byte_tensor(SafetensorsCheckpoint& checkpoint, const std::string& stored) {
  const auto& view = checkpoint.get(stored);
  if (view.dtype != DType::U8) {
    throw Error(checkpoint.path_of(stored).string() + ": MXFP4 tensor \"" + stored + "\" is stored as " +
                    dtype_name(view.dtype) + ", but MXFP4 blocks and scales are U8",
                "the checkpoint is not in the MXFP4 layout this plugin reads; export it again", Error::UserInput{});
  }
  return view;
}

// Scans of weights being read: a thread per 4 Mi elements, up to the rank's threads.
int scan_threads(int64_t elements) {
  return base::threads_for(elements, int64_t{1} << 22, cluster::compute_threads());
}

// A run of bf16 or fp32 elements of the mapping to be widened to fp32 into `into` (bf16 is the
// top half of fp32's bits).
struct Widening {
  const void* from = nullptr;
  bool bf16 = false;
  int64_t numel = 0;
  float* into = nullptr;
};

// Widens all of a layer's runs in one parallel pass, split evenly over the elements of all of
// them (a run per parameter piece, each split on its own, left most pieces of a block — 2-6 Mi
// elements — to one thread: 0.55B at 1 rank on 2 cores, warm, 0.04-0.05 s a layer of 50 MB).
// Counts each run's non-finite values on the way. `into` is usually fresh memory (a shard
// being filled): each thread populates its part first, then writes it without faults.
std::vector<int64_t> widen_to_fp32(const std::vector<Widening>& runs) {
  std::vector<int64_t> starts(runs.size() + 1, 0);  // of each run in the concatenation
  for (size_t i = 0; i < runs.size(); ++i) starts[i + 1] = starts[i] + runs[i].numel;
  const int64_t total = starts.back();
  const int threads = scan_threads(total);
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(threads), std::vector<int64_t>(runs.size(), 0));
  base::parallel_ranges(threads, threads, [&](int64_t first_thread, int64_t last_thread) {
    for (int64_t t = first_thread; t < last_thread; ++t) {
      const int64_t begin = t * total / threads, end = (t + 1) * total / threads;
      auto run = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin() - 1);
      for (; run < runs.size() && starts[run] < end; ++run) {
        const auto& r = runs[run];
        const int64_t from = std::max(begin, starts[run]) - starts[run], to = std::min(end, starts[run + 1]) - starts[run];
        auto* target = reinterpret_cast<uint32_t*>(r.into);
        base::populate_for_write(target + from, static_cast<size_t>(to - from) * sizeof(uint32_t));
        const auto* half = static_cast<const uint16_t*>(r.from);
        const auto* full = static_cast<const uint32_t*>(r.from);
        int64_t count = 0;
        for (int64_t i = from; i < to; ++i) {
          const uint32_t bits = r.bf16 ? static_cast<uint32_t>(half[i]) << 16 : full[i];
          target[i] = bits;
          count += (bits & 0x7f800000u) == 0x7f800000u;
        }
        counts[static_cast<size_t>(t)][run] += count;
      }
    }
  });
  std::vector<int64_t> per_run(runs.size(), 0);
  for (const auto& c : counts) {
    for (size_t i = 0; i < runs.size(); ++i) per_run[i] += c[i];
  }
  return per_run;
}

// Refuses (unless allowed) weights holding NaN or inf, counted after the conversion to the
// parameter's type (an F32 value beyond F16's range becomes inf there too). `values`: the
// parameter, or the part of it this rank read.
void refuse_non_finite(const SafetensorsCheckpoint& checkpoint, const std::string& file_tensor, const std::string& stored,
                       const at::Tensor& values, bool part = false) {
  const auto count = values.scalar_type() == at::kFloat && values.is_contiguous()
                         ? base::count_non_finite(values.const_data_ptr<float>(), values.numel(),
                                                  scan_threads(values.numel()))
                         : values.isfinite().logical_not().sum().item<int64_t>();
  if (count == 0) return;
  throw Error(checkpoint.path_of(file_tensor).string() + ": tensor \"" + stored + "\" holds " + std::to_string(count) +
                  " non-finite value(s) (NaN or inf) of " + std::to_string(values.numel()) +
                  (part ? " read by this rank" : "") + " after conversion to " +
                  std::string(c10::toString(values.scalar_type())),
              "training from these weights gives a NaN loss from the first step; use other weights, or set "
              "[model] allow_non_finite_weights = true if this is intended",
              Error::UserInput{});
}

// A stored tensor must have its parameter's shape.
void check_shape(const std::string& name, const at::Tensor& stored, const at::Tensor& parameter) {
  if (stored.sizes() == parameter.sizes()) return;
  throw Error("tensor \"" + name + "\" has shape " + shape_text(stored.sizes()) + " in the checkpoint but " +
                  shape_text(parameter.sizes()) + " in the model",
              "check that config.json belongs to these weights", Error::UserInput{});
}

// madvise over the pages holding `length` bytes from `data` (inside a file mapping). Advice
// only: a failure costs speed or memory, never correctness.
void advise(const std::byte* data, size_t length, int advice) {
  if (length == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(data) + length;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

// The kernel reads the bytes ahead of use, in steps of 128 KiB: one MADV_WILLNEED reads no more
// than the device's read-ahead window (max of read_ahead_kb and the largest request; 128 KiB by
// default), so advice for a whole tensor read its first window and left the rest to the page
// faults of the conversion, one window at a time. Stepped, all of it is queued at once (0.55B,
// 1 GB of bf16 widened on 2 cores, cold cache: 0.80-0.83 s -> 0.67-0.70 s; reading alone 0.54-0.60 s).
void advise_will_need(const std::byte* data, size_t length) {
  constexpr size_t kStep = size_t{128} << 10;
  for (size_t at = 0; at < length; at += kStep) advise(data + at, std::min(kStep, length - at), MADV_WILLNEED);
}

// Drops the bytes (read-only file pages) from this process's resident set once they are read:
// they stay in the page cache (a later read faults them back from there) but no longer count in
// the rank's RSS, which the host plan does not count them in — the mapping of a whole model's
// files would otherwise be resident until the run ends.
void advise_done(const std::byte* data, size_t length) { advise(data, length, MADV_DONTNEED); }

// Asks the kernel to read `ranges` of `parameters` (those stored as floats) ahead of use.
void will_need(const CausalLM& model, SafetensorsCheckpoint& checkpoint,
               const std::vector<std::pair<std::string, at::Tensor>>& parameters, const std::vector<WeightRange>& ranges) {
  for (const auto& r : ranges) {
    const auto& [name, parameter] = parameters.at(r.parameter);
    const auto stored = checkpoint_name(model, checkpoint, name);
    if (is_mxfp4(checkpoint, stored) || !checkpoint.contains(stored)) continue;
    const auto& view = checkpoint.get(stored);
    if (!is_float(view.dtype)) continue;  // refused when it is read
    const size_t element = view.bytes / static_cast<size_t>(std::max<int64_t>(1, parameter.numel()));
    if (static_cast<size_t>(r.begin + r.numel) * element > view.bytes) continue;
    advise_will_need(view.data + static_cast<size_t>(r.begin) * element, static_cast<size_t>(r.numel) * element);
  }
}

// Two layers whose parameters have the same shapes in the same order (a model's blocks): a
// rank's shard of the one covers the same ranges of the other's parameters.
bool same_shapes(const std::vector<std::pair<std::string, at::Tensor>>& a,
                 const std::vector<std::pair<std::string, at::Tensor>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].second.sizes() != b[i].second.sizes()) return false;
  }
  return true;
}

}  // namespace

at::ScalarType scalar_type_of(DType dtype) {
  switch (dtype) {
    case DType::F64: return at::kDouble;
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::BOOL: return at::kBool;
    case DType::F8_E4M3: return at::kFloat8_e4m3fn;
    case DType::F8_E5M2: return at::kFloat8_e5m2;
    case DType::U16: return at::kUInt16;
    case DType::U32: return at::kUInt32;
    case DType::U64: return at::kUInt64;
  }
  SO_FAIL("unknown safetensors dtype");
}

DType dtype_of(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return DType::F64;
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kLong: return DType::I64;
    case at::kInt: return DType::I32;
    default: SO_FAIL("no safetensors dtype for " << c10::toString(type));
  }
}

at::Tensor as_tensor(const TensorView& view) {
  // from_blob needs a mutable pointer; the tensor is only ever read.
  return at::from_blob(const_cast<std::byte*>(view.data), view.shape, at::TensorOptions().dtype(scalar_type_of(view.dtype)));
}

void check_weights(const CausalLM& model, SafetensorsCheckpoint& checkpoint) {
  std::set<std::string> aliases;
  for (const auto& [owner, alias] : model.tied_parameters()) aliases.insert(alias);
  std::set<std::string> expected;
  std::vector<std::string> missing;
  for (const auto& name : model.hf_parameter_names()) {
    const auto stored = checkpoint_name(model, checkpoint, name);
    if (is_mxfp4(checkpoint, stored)) {
      expected.insert(stored + "_blocks");
      expected.insert(stored + "_scales");
      continue;
    }
    expected.insert(stored);
    if (!checkpoint.contains(stored)) missing.push_back(name);
  }
  std::vector<std::string> unexpected;
  for (const auto& name : checkpoint.names()) {
    if (!expected.count(name) && !aliases.count(name) && !ignorable(model, name)) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string text = "the weights in " + checkpoint.directory().string() + " do not match the model:";
    if (!missing.empty()) text += " missing " + std::to_string(missing.size()) + " tensor(s): " + list(missing) + ".";
    if (!unexpected.empty()) {
      text += " unexpected " + std::to_string(unexpected.size()) + " tensor(s): " + list(unexpected) + ".";
    }
    throw Error(text, "check that config.json belongs to these weights and that the plugin handles the architecture",
                Error::UserInput{});
  }
}

size_t load_layer_weights(CausalLM& model, size_t layer_index, SafetensorsCheckpoint& checkpoint,
                          NonFiniteWeights non_finite) {
  torch::NoGradGuard no_grad;
  const auto& layer = model.layers().at(layer_index);
  size_t bytes = 0;
  for (auto& [name, parameter] : layer->hf_parameters()) {
    const auto stored = checkpoint_name(model, checkpoint, name);
    const bool mxfp4 = is_mxfp4(checkpoint, stored);
    if (mxfp4) {
      bytes += byte_tensor(checkpoint, stored + "_blocks").bytes + byte_tensor(checkpoint, stored + "_scales").bytes;
    } else {
      bytes += float_tensor(checkpoint, stored).bytes;
    }
    const auto source = mxfp4 ? dequantize_mxfp4(byte_tensor(checkpoint, stored + "_blocks"),
                                                 byte_tensor(checkpoint, stored + "_scales"))
                              : as_tensor(float_tensor(checkpoint, stored));
    check_shape(name, source, parameter);
    parameter.copy_(source);  // converts dtype and device
    // Counted after the conversion: an F32 value beyond F16's range becomes inf here too.
    if (non_finite == NonFiniteWeights::refuse) refuse_non_finite(checkpoint, mxfp4 ? stored + "_blocks" : stored, stored, parameter);
    for (const auto& read : mxfp4 ? std::vector<std::string>{stored + "_blocks", stored + "_scales"} : std::vector<std::string>{stored}) {
      const auto& view = mxfp4 ? byte_tensor(checkpoint, read) : float_tensor(checkpoint, read);
      advise_done(view.data, view.bytes);
    }
  }
  return bytes;
}

size_t load_layer_ranges(CausalLM& model, size_t layer_index, SafetensorsCheckpoint& checkpoint,
                         const std::vector<WeightRange>& ranges, NonFiniteWeights non_finite) {
  torch::NoGradGuard no_grad;
  const auto parameters = model.layers().at(layer_index)->hf_parameters();
  // The kernel reads ahead every range of the layer while the first are converted, and this
  // rank's ranges of the next layer too, so that the disk is not idle while the end of this
  // one is converted (the reading waited for that: 0.38-0.47 of `cat`'s GB/s cold at 1 rank).
  will_need(model, checkpoint, parameters, ranges);
  if (layer_index + 1 < model.layers().size()) {
    const auto next = model.layers()[layer_index + 1]->hf_parameters();
    if (same_shapes(parameters, next)) will_need(model, checkpoint, next, ranges);
  }
  size_t bytes = 0;
  std::map<size_t, at::Tensor> dequantized;  // MXFP4 parameters of this layer, whole
  // bf16 and fp32 ranges, widened together after the checks; the rest converted one by one.
  std::vector<Widening> runs;
  std::vector<std::string> run_names;
  for (const auto& r : ranges) {
    const auto& [name, parameter] = parameters.at(r.parameter);
    const auto stored = checkpoint_name(model, checkpoint, name);
    const bool mxfp4 = is_mxfp4(checkpoint, stored);
    at::Tensor source;
    if (mxfp4) {
      auto& whole = dequantized[r.parameter];
      if (!whole.defined()) {
        whole = dequantize_mxfp4(byte_tensor(checkpoint, stored + "_blocks"), byte_tensor(checkpoint, stored + "_scales"));
        bytes += byte_tensor(checkpoint, stored + "_blocks").bytes + byte_tensor(checkpoint, stored + "_scales").bytes;
      }
      source = whole;
    } else {
      source = as_tensor(float_tensor(checkpoint, stored));
      bytes += static_cast<size_t>(r.numel) * source.element_size();
    }
    check_shape(name, source, parameter);
    const auto from = source.reshape({-1}).narrow(0, r.begin, r.numel);  // touches only these bytes
    if (!mxfp4 && (from.scalar_type() == at::kBFloat16 || from.scalar_type() == at::kFloat)) {
      runs.push_back({from.const_data_ptr(), from.scalar_type() == at::kBFloat16, r.numel, r.into});
      run_names.push_back(stored);
      continue;
    }
    auto into = at::from_blob(r.into, {r.numel}, at::kFloat);
    into.copy_(from);
    if (non_finite == NonFiniteWeights::refuse && base::count_non_finite(r.into, r.numel, scan_threads(r.numel)) != 0) {
      refuse_non_finite(checkpoint, mxfp4 ? stored + "_blocks" : stored, stored, into, /*part=*/true);
    }
    if (!mxfp4) advise_done(static_cast<const std::byte*>(from.const_data_ptr()), static_cast<size_t>(r.numel) * from.element_size());
  }
  const auto non_finite_counts = widen_to_fp32(runs);
  for (size_t i = 0; i < runs.size(); ++i) {
    if (non_finite_counts[i] != 0 && non_finite == NonFiniteWeights::refuse) {
      refuse_non_finite(checkpoint, run_names[i], run_names[i], at::from_blob(runs[i].into, {runs[i].numel}, at::kFloat),
                        /*part=*/true);
    }
    advise_done(static_cast<const std::byte*>(runs[i].from), static_cast<size_t>(runs[i].numel) * (runs[i].bf16 ? 2 : 4));
  }
  return bytes;
}

void load_weights(CausalLM& model, SafetensorsCheckpoint& checkpoint, NonFiniteWeights non_finite) {
  check_weights(model, checkpoint);
  for (size_t i = 0; i < model.layers().size(); ++i) load_layer_weights(model, i, checkpoint, non_finite);
}

}  // namespace superoffload::model
