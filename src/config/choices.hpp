// The choice-valued configuration fields: one enum each, and the TOML text of every value.
// The schema parses the text once (an unknown value is an error naming the key and the
// allowed values); everything else compares enums, never strings.
#pragma once

#include <span>
#include <string_view>

namespace superoffload::config {

enum class InitMode { automatic, pretrained, random };
enum class ActivationOffload { none, host };
enum class DataFormat { automatic, hdf5, jsonl, alpaca, chat };
enum class TrainOn { assistant, all };
enum class AttentionScope { automatic, document, causal };
enum class EvalMetric { eval_loss, loss };
enum class OptimizerType { adamw, adam };
enum class LrScheduleType { constant, cosine, linear, lr_range_test };
enum class WarmupType { linear, log };
enum class OffloadDevice { cpu, nvme, none };
enum class StateDtype { fp32, bf16 };
enum class Speculation { automatic, always, never };
enum class LogLevel { trace, debug, info, warning, error };
enum class ConsoleMode { rank0, all };
enum class DeviceKind { automatic, cpu, cuda };
enum class CommBackend { automatic, mpi, nccl };
enum class BindMode { automatic, none };
enum class ResctrlMode { off, automatic, required };

template <class E>
struct Choice {
  E value;
  std::string_view text;
};

// Every value of E with its text, in the order the documentation lists them.
template <class E>
std::span<const Choice<E>> choices();

#define SUPEROFFLOAD_CHOICES(E, ...)                          \
  template <>                                                 \
  inline std::span<const Choice<E>> choices<E>() {            \
    static constexpr Choice<E> values[] = {__VA_ARGS__};      \
    return values;                                            \
  }

SUPEROFFLOAD_CHOICES(InitMode, {InitMode::automatic, "auto"}, {InitMode::pretrained, "pretrained"},
                     {InitMode::random, "random"})
SUPEROFFLOAD_CHOICES(ActivationOffload, {ActivationOffload::none, "none"}, {ActivationOffload::host, "host"})
SUPEROFFLOAD_CHOICES(DataFormat, {DataFormat::automatic, "auto"}, {DataFormat::hdf5, "hdf5"},
                     {DataFormat::jsonl, "jsonl"}, {DataFormat::alpaca, "alpaca"}, {DataFormat::chat, "chat"})
SUPEROFFLOAD_CHOICES(TrainOn, {TrainOn::assistant, "assistant"}, {TrainOn::all, "all"})
SUPEROFFLOAD_CHOICES(AttentionScope, {AttentionScope::automatic, "auto"}, {AttentionScope::document, "document"},
                     {AttentionScope::causal, "causal"})
// HF Trainer's metric_for_best_model: "loss" is its shorthand for "eval_loss", the one metric computed.
SUPEROFFLOAD_CHOICES(EvalMetric, {EvalMetric::eval_loss, "eval_loss"}, {EvalMetric::loss, "loss"})
SUPEROFFLOAD_CHOICES(OptimizerType, {OptimizerType::adamw, "adamw"}, {OptimizerType::adam, "adam"})
SUPEROFFLOAD_CHOICES(LrScheduleType, {LrScheduleType::constant, "constant"}, {LrScheduleType::cosine, "cosine"},
                     {LrScheduleType::linear, "linear"}, {LrScheduleType::lr_range_test, "lr_range_test"})
SUPEROFFLOAD_CHOICES(WarmupType, {WarmupType::linear, "linear"}, {WarmupType::log, "log"})
SUPEROFFLOAD_CHOICES(OffloadDevice, {OffloadDevice::cpu, "cpu"}, {OffloadDevice::nvme, "nvme"}, {OffloadDevice::none, "none"})
SUPEROFFLOAD_CHOICES(StateDtype, {StateDtype::fp32, "fp32"}, {StateDtype::bf16, "bf16"})
SUPEROFFLOAD_CHOICES(Speculation, {Speculation::automatic, "auto"}, {Speculation::always, "always"},
                     {Speculation::never, "never"})
SUPEROFFLOAD_CHOICES(LogLevel, {LogLevel::trace, "trace"}, {LogLevel::debug, "debug"}, {LogLevel::info, "info"},
                     {LogLevel::warning, "warning"}, {LogLevel::error, "error"})
SUPEROFFLOAD_CHOICES(ConsoleMode, {ConsoleMode::rank0, "rank0"}, {ConsoleMode::all, "all"})
SUPEROFFLOAD_CHOICES(DeviceKind, {DeviceKind::automatic, "auto"}, {DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"})
SUPEROFFLOAD_CHOICES(CommBackend, {CommBackend::automatic, "auto"}, {CommBackend::mpi, "mpi"},
                     {CommBackend::nccl, "nccl"})
SUPEROFFLOAD_CHOICES(BindMode, {BindMode::automatic, "auto"}, {BindMode::none, "none"})
SUPEROFFLOAD_CHOICES(ResctrlMode, {ResctrlMode::automatic, "auto"}, {ResctrlMode::off, "off"},
                     {ResctrlMode::required, "required"})

#undef SUPEROFFLOAD_CHOICES

// The TOML text of a value ("auto" for automatic), for messages and the TOML writer.
template <class E>
std::string_view to_text(E value) {
  for (const auto& c : choices<E>()) {
    if (c.value == value) return c.text;
  }
  return "?";
}

// The value of a text; false when the text names none (the schema has checked it before).
template <class E>
bool from_text(std::string_view text, E& value) {
  for (const auto& c : choices<E>()) {
    if (c.text == text) {
      value = c.value;
      return true;
    }
  }
  return false;
}

}  // namespace superoffload::config
