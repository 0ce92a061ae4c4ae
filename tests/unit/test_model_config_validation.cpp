// Hostile config.json files get an error naming the file, the key and the value — never a
// signal (num_attention_heads = 0 used to end in SIGFPE) or a model that trains silently
// wrong (a negative rms_norm_eps or rope_theta trained on NaN). Each case edits one key of a
// valid tiny config of the shipped llama, gpt2 and moe plugins.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "model_io/load_model.hpp"

namespace so = superoffload;
using nlohmann::json;

namespace {

const json kLlama = json::parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 53, "hidden_size": 32,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})");
const json kGpt2 = json::parse(R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 53, "n_embd": 32,
  "n_layer": 2, "n_head": 4, "n_positions": 64})");
const json kMixtral = json::parse(R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 53, "hidden_size": 32,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "num_local_experts": 4, "num_experts_per_tok": 2})");

class ModelConfigValidation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { so::log::init(so::log::Level::warning); }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("so_config_validation_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Loads `base` with `changes` merged in; returns the error message ("" when it loaded).
  std::string load(json base, const json& changes) {
    base.merge_patch(changes);
    std::ofstream(dir_ / "config.json") << base.dump();
    try {
      so::model::load_model(dir_.string(), "auto", so::config::InitMode::random, 1);
    } catch (const so::Error& e) {
      return e.what();
    }
    return "";
  }
  // The message names the file, the key and the value, and says what is valid.
  void expect_refused(const json& base, const json& changes, const std::string& key, const std::string& says) {
    const auto message = load(base, changes);
    EXPECT_NE(message.find((dir_ / "config.json").string()), std::string::npos) << changes << ": " << message;
    EXPECT_NE(message.find("\"" + key + "\""), std::string::npos) << changes << ": " << message;
    EXPECT_NE(message.find(says), std::string::npos) << changes << ": " << message;
  }
  std::filesystem::path dir_;
};

TEST_F(ModelConfigValidation, ValidConfigsLoad) {
  EXPECT_EQ(load(kLlama, json::object()), "");
  EXPECT_EQ(load(kGpt2, json::object()), "");
  EXPECT_EQ(load(kMixtral, json::object()), "");
  // head_dim given: hidden_size need not be a multiple of the heads.
  EXPECT_EQ(load(kLlama, {{"hidden_size", 30}, {"head_dim", 8}}), "");
  EXPECT_EQ(load(kLlama, {{"sliding_window", nullptr}}), "");
}

TEST_F(ModelConfigValidation, DimensionsMustBePositiveAndBuildable) {
  expect_refused(kLlama, {{"num_attention_heads", 0}}, "num_attention_heads", "= 0 must lie in [1, 16777216]");
  expect_refused(kLlama, {{"num_key_value_heads", 0}}, "num_key_value_heads", "= 0 must lie in [1, 16777216]");
  expect_refused(kLlama, {{"hidden_size", -32}}, "hidden_size", "= -32 must lie in");
  expect_refused(kLlama, {{"hidden_size", 1000000000000}}, "hidden_size", "= 1000000000000 must lie in");
  expect_refused(kLlama, {{"num_hidden_layers", 0}}, "num_hidden_layers", "= 0 must lie in");
  expect_refused(kLlama, {{"vocab_size", 0}}, "vocab_size", "= 0 must lie in");
  expect_refused(kLlama, {{"intermediate_size", -1}}, "intermediate_size", "= -1 must lie in");
  expect_refused(kLlama, {{"head_dim", 0}}, "head_dim", "= 0 must lie in");
  expect_refused(kGpt2, {{"n_head", 0}}, "n_head", "= 0 must lie in");
  expect_refused(kGpt2, {{"n_positions", -5}}, "n_positions", "= -5 must lie in");
  expect_refused(kMixtral, {{"num_local_experts", 0}}, "num_local_experts", "= 0 must lie in");
  expect_refused(kMixtral, {{"num_experts_per_tok", 0}}, "num_experts_per_tok", "= 0 must lie in");
}

// Each plugin declares the keys it cannot build without; all missing ones are named at once.
TEST_F(ModelConfigValidation, RequiredKeysAreNamedTogether) {
  auto config = kLlama;
  config.erase("hidden_size");
  config.erase("num_attention_heads");
  const auto message = load(config, json::object());
  EXPECT_NE(message.find((dir_ / "config.json").string() + " lacks hidden_size, num_attention_heads, which the llama "
                         "plugin requires (it needs vocab_size, hidden_size, intermediate_size, num_hidden_layers, "
                         "num_attention_heads)"),
            std::string::npos)
      << message;
  config = kGpt2;
  config["n_head"] = nullptr;  // null is "not given", as in HF
  EXPECT_NE(load(config, json::object()).find("lacks n_head, which the gpt2 plugin requires"), std::string::npos);
}

TEST_F(ModelConfigValidation, HeadsMustBeConsistent) {
  expect_refused(kLlama, {{"num_attention_heads", 5}, {"num_key_value_heads", 5}}, "num_attention_heads", "= 5 must divide hidden_size = 32");
  expect_refused(kLlama, {{"num_key_value_heads", 3}}, "num_key_value_heads", "= 3 must divide num_attention_heads = 4");
  expect_refused(kGpt2, {{"n_head", 5}}, "n_head", "= 5 must divide n_embd = 32");
  expect_refused(kMixtral, {{"num_attention_heads", 3}, {"num_key_value_heads", 1}}, "num_attention_heads", "= 3 must divide hidden_size = 32");
}

TEST_F(ModelConfigValidation, EpsilonsRopeAndWindowsMustBeValid) {
  expect_refused(kLlama, {{"rms_norm_eps", -1e-6}}, "rms_norm_eps", "must be a finite number > 0");
  expect_refused(kLlama, {{"rms_norm_eps", 0}}, "rms_norm_eps", "must be a finite number > 0");
  expect_refused(kGpt2, {{"layer_norm_epsilon", -1e-5}}, "layer_norm_epsilon", "must be a finite number > 0");
  expect_refused(kMixtral, {{"rms_norm_eps", -1}}, "rms_norm_eps", "must be a finite number > 0");
  expect_refused(kLlama, {{"rope_theta", -10000}}, "rope_theta", "= -10000.0 must be a finite number > 0");
  expect_refused(kLlama, {{"rope_theta", 0}}, "rope_theta", "must be a finite number > 0");
  expect_refused(kLlama, {{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", -1.5}}}}, "rope_theta",
                 "= -1.5 must be a finite number > 0");
  expect_refused(kLlama, {{"sliding_window", -4}}, "sliding_window", "= -4 must be >= 0");
  expect_refused(kLlama,
                 {{"architectures", {"Qwen2ForCausalLM"}}, {"use_sliding_window", true}, {"sliding_window", 16},
                  {"max_window_layers", -1}},
                 "max_window_layers", "= -1 must be >= 0");
}

}  // namespace
