// The model contract the engine drives. LibTorch C++ modules have no forward hooks, so a
// model is an explicit, ordered list of layers (embedding, decoder blocks, final norm +
// head) that the engine gathers, runs and releases one at a time. Parameter names are the
// HuggingFace names (layer prefix + the module's own names). Installed for plugins.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/expert_parallel.hpp"
#include "model/labels.hpp"
#include "model/sequence_parallel.hpp"

namespace superoffload::model {

// What one mixture-of-experts layer's router did with one micro-batch: the inputs of HF's
// load-balancing loss, which pools every MoE layer of a forward pass (load_balancing.hpp).
struct RouterStatistics {
  at::Tensor routed;       // [E] fp32, no graph: Σ over the top-k slots of the share of tokens sent to each expert
  at::Tensor probability;  // [E] fp32, with its graph: the router's mean probability of each expert
  double coefficient = 0;  // router_aux_loss_coef
};

// What a layer may need besides its input, per micro-batch.
struct BatchContext {
  at::Tensor position_ids;  // [batch, seq] int64
  // [batch, seq] int64, rising along a row: attention stays within one document (packed samples,
  // [data] attention = "document"). Undefined: each row is one causal sequence. Under sequence
  // parallelism it covers the whole row (attention sees all of it), while position_ids and
  // every layer's input cover this rank's shard.
  at::Tensor document_ids;
  // Ulysses sequence parallelism (sequence_parallel.hpp): the group this rank's shard belongs
  // to; attention exchanges through it. Null: each rank holds whole rows.
  const SequenceParallelGroup* sequence_parallel = nullptr;
  // Expert parallelism (expert_parallel.hpp): the group across which mixture-of-experts layers
  // split their experts; this rank holds and computes only its range of them, and routed
  // tokens travel to their experts' ranks. Null: every rank computes every expert.
  const ExpertParallelGroup* expert_parallel = nullptr;
  // Mixture-of-experts layers whose config asks for the load-balancing loss append their
  // router's statistics here (may be null: then nothing is recorded).
  std::vector<RouterStatistics>* router_statistics = nullptr;
  // MLPs (dense and experts) run over tiles of this many tokens of the flattened batch, so the
  // intermediate never exists for the whole sequence (model/blocks/token_tiles.hpp); 0: untiled.
  int64_t tile_tokens = 0;
};

// What a parameter is to training, as HF Trainer sees it: biases and norm weights take no
// weight decay (and start at 0 and 1); every other tensor is a weight and is decayed.
enum class ParameterRole { weight, bias, norm };

// HF Trainer's rule by name (get_decay_parameter_names, case-insensitive): a name containing
// "bias" is a bias, whatever its shape (GPT-OSS's 2-D expert biases); one containing
// "layernorm" or "rmsnorm", or with a part "norm" or "*_norm" (model.norm, q_norm), is a norm
// weight; all else is a weight (embeddings, GPT-OSS attention sinks and experts included).
ParameterRole parameter_role_by_name(const std::string& hf_name);

class Layer : public torch::nn::Module {
 public:
  explicit Layer(std::string hf_prefix) : hf_prefix_(std::move(hf_prefix)) {}
  // Decoder blocks and the head map hidden [batch, seq, hidden] to the same shape (head: to
  // logits); the embedding takes token ids [batch, seq] int64.
  virtual at::Tensor forward(const at::Tensor& input, const BatchContext& context) = 0;
  // Prefix that turns this module's parameter names into HF names ("model.layers.3.").
  const std::string& hf_prefix() const { return hf_prefix_; }
  // (HF name, tensor) of this layer's own parameters, in registration order.
  std::vector<std::pair<std::string, at::Tensor>> hf_parameters() const;

  // Mixture-of-experts layers: how many experts, and which parameter belongs to which, so that
  // under expert parallelism the engine partitions each expert's parameters only across the
  // ranks that compute it, and gathers only this rank's experts (their parameters' data is
  // bound, the others' left empty). 0 / kSharedParameter: an ordinary layer.
  static constexpr int64_t kSharedParameter = -1;  // not an expert's (attention, router, norms)
  static constexpr int64_t kStackedExperts = -2;   // a tensor whose first dimension indexes the
                                                   // experts (GPT-OSS's experts.gate_up_proj): bound
                                                   // to this rank's rows of it
  virtual int64_t expert_count() const { return 0; }
  // kSharedParameter, kStackedExperts, or e >= 0 for a parameter of expert e alone
  // (Qwen3-MoE's experts.<e>.gate_proj.weight). `hf_name` as hf_parameters() names it.
  virtual int64_t expert_of(const std::string& hf_name) const { return kSharedParameter; }

 private:
  std::string hf_prefix_;
};

// Labels of plain language modelling: each position predicts the next token; the last
// position predicts nothing (kIgnoreLabel). tokens [batch, seq] int64.
at::Tensor next_token_labels(const at::Tensor& tokens);

struct LossSum {
  at::Tensor sum;     // fp32 scalar: sum of per-token cross-entropy over counted tokens
  at::Tensor tokens;  // int64 scalar: tokens whose label is not kIgnoreLabel (on the device: read
                      // it with the sum, after the step's work is queued, not before)
};

// The last layer: final norm and LM head.
class HeadLayer : public Layer {
 public:
  using Layer::Layer;
  // Cross-entropy (labels already shifted, kIgnoreLabel ignored) in fp32, computed over chunks of
  // about `chunk_tokens` tokens of the batch (chunk_tokens / batch sequence positions of every
  // row, at least one) so fp32 logits of the whole batch never exist at once.
  LossSum loss(const at::Tensor& hidden, const at::Tensor& labels, int64_t chunk_tokens, const BatchContext& context);
  // Loss and its backward chunk by chunk: head parameters accumulate their gradients, each
  // chunk's logits are freed before the next, and the gradient w.r.t. `hidden` is returned.
  // Every token's loss is multiplied by `scale` (e.g. 1 / tokens in the global batch).
  std::pair<LossSum, at::Tensor> loss_and_backward(const at::Tensor& hidden, const at::Tensor& labels,
                                                   int64_t chunk_tokens, double scale, const BatchContext& context);

 private:
  // The chunk loop of both: `each` (if set) gets every chunk's summed loss with its graph.
  LossSum chunked_loss(const at::Tensor& hidden, const at::Tensor& labels, int64_t chunk_tokens,
                       const BatchContext& context, const std::function<void(const at::Tensor&)>& each);
};

// Sizes the trainer needs for FLOPs and MFU (train/throughput.hpp counts them).
struct ModelShape {
  int64_t num_layers = 0;       // decoder blocks
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int64_t total_parameters = 0;
  int64_t active_parameters = 0;  // per token: equals total for dense models
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  // Embedding first, head last.
  virtual const std::vector<std::shared_ptr<Layer>>& layers() const = 0;
  // Counts the parameters as they are now: call it before a ZeRO engine partitions the model
  // (partitioned layers hold no full parameters).
  virtual ModelShape shape() const = 0;
  virtual bool is_moe() const { return false; }
  // Parameters shared by two layers (tied embeddings): (owner's HF name, alias HF name).
  // The alias is not a parameter of its layer and not expected in checkpoints.
  virtual std::vector<std::pair<std::string, std::string>> tied_parameters() const { return {}; }
  // HF `initializer_range`: std of the normal initialisation.
  virtual double initializer_range() const = 0;
  // The role of a parameter (weight decay, initialisation): parameter_role_by_name unless a
  // plugin knows better (GPT-2's LayerNorms are ln_1, ln_2, ln_f, which HF finds by type).
  virtual ParameterRole parameter_role(const std::string& hf_name) const { return parameter_role_by_name(hf_name); }
  bool decays(const std::string& hf_name) const { return parameter_role(hf_name) == ParameterRole::weight; }
  // HF's base_model_prefix ("transformer." for GPT-2): checkpoints saved from the bare base
  // model omit it, and loading accepts either form.
  virtual std::string checkpoint_prefix() const { return "model."; }
  // Checkpoint tensors that are buffers, not parameters, here (e.g. stored causal masks).
  virtual bool ignorable_checkpoint_tensor(const std::string& name) const { return false; }

  // Every HF parameter name of the model, in layer order.
  std::vector<std::string> hf_parameter_names() const;
  // Elements of the parameters whose HF name contains `name_part` (all when empty), counted
  // as they are now (before a ZeRO engine partitions the model). For shape() implementations.
  int64_t parameter_count(const std::string& name_part = {}) const;
};

}  // namespace superoffload::model
