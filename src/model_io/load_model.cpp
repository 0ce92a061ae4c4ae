// Model loading for eval and training.
#include "model_io/load_model.hpp"

#include <filesystem>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "model_io/random_init.hpp"
#include "model_io/safetensors.hpp"
#include "model_io/weights.hpp"

namespace superoffload::model {

LoadedModel load_model(const std::string& directory, const std::string& plugin, config::InitMode init,
                       uint64_t seed, bool defer, NonFiniteWeights non_finite) {
  SO_CHECK(std::filesystem::is_directory(directory),
           "model directory " << directory << " does not exist" << hint("[model] path / --model must name a HuggingFace model directory"));
  LoadedModel out{HfConfig::load((std::filesystem::path(directory) / "config.json").string()), {}, nullptr, false};
  const std::string architecture = out.config.architecture();
  SO_CHECK(!architecture.empty() || plugin != "auto",
           out.config.path() << " has no \"architectures\" entry" << hint("set [model] plugin to the plugin to use"));
  auto registry = PluginRegistry::discover();
  out.plugin = registry.select(plugin, architecture);
  out.model = create_model(out.plugin, out.config);
  SO_LOG(info) << "model " << architecture << " from " << directory << " built by plugin " << out.plugin.name << " "
               << out.plugin.version << " (" << out.plugin.path << "), " << out.model->shape().total_parameters
               << " parameters";

  const bool has_weights = SafetensorsCheckpoint::exists_in(directory);
  if (init == config::InitMode::random || (init == config::InitMode::automatic && !has_weights)) {
    auto model = out.model;
    // Said when it happens: a caller that defers and then fills the layers from a checkpoint
    // (export, a resume) never initialises them randomly, and its log must not claim so.
    auto said = std::make_shared<bool>(false);
    auto say = [model, seed, said](const char* how) {
      if (*said) return;
      *said = true;
      SO_LOG(info) << "parameters initialised randomly (initializer_range " << model->initializer_range() << ", seed "
                   << seed << ")" << how;
    };
    out.materialize = [model, seed, defer, say](size_t layer) {
      say(defer ? ", layer by layer" : "");
      init_layer(*model, layer, seed);
    };
    // A ZeRO rank draws its shard's elements only, straight into the shard (the same values).
    out.fill_ranges = [model, seed, say](size_t layer, const std::vector<WeightRange>& ranges) {
      say(", each rank its own shard");
      init_layer_ranges(*model, layer, seed, ranges);
    };
  } else {
    SO_CHECK(has_weights, directory << " has no safetensors weights but [model] init = \"pretrained\""
                                    << hint("point [model] path at the model's HuggingFace download (config.json, "
                                            "*.safetensors, tokenizer), or set init = \"random\" to train it from "
                                            "random weights (benchmarks)"));
    auto checkpoint = std::make_shared<SafetensorsCheckpoint>(SafetensorsCheckpoint::open(directory));
    check_weights(*out.model, *checkpoint);  // every name, before any layer is read
    auto model = out.model;
    out.materialize = [model, checkpoint, non_finite, read = out.bytes_read](size_t layer) {
      *read += static_cast<double>(load_layer_weights(*model, layer, *checkpoint, non_finite));
    };
    out.fill_ranges = [model, checkpoint, non_finite, read = out.bytes_read](size_t layer,
                                                                              const std::vector<WeightRange>& ranges) {
      *read += static_cast<double>(load_layer_ranges(*model, layer, *checkpoint, ranges, non_finite));
    };
    out.pretrained = true;
  }
  if (!defer) {
    for (size_t i = 0; i < out.model->layers().size(); ++i) out.materialize(i);
    out.materialize = nullptr;
    out.fill_ranges = nullptr;
  }
  return out;
}

}  // namespace superoffload::model
