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

// Every field the supported RoPE types read (#32): type and range, in both config.json forms
// (rope_scaling beside rope_theta, and rope_parameters), and a RoPE type that is not supported.
// "factor": 0 used to train on infinite frequencies until the non-finite-loss guard stopped
// step 1; a string ended in a raw JSON type error.
TEST_F(ModelConfigValidation, RopeScalingFieldsMustBeValid) {
  const json llama3 = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const json yarn = {{"rope_type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
                     {"beta_fast", 32.0}, {"beta_slow", 1.0}};
  EXPECT_EQ(load(kLlama, {{"rope_scaling", llama3}}), "");
  EXPECT_EQ(load(kLlama, {{"rope_scaling", yarn}}), "");
  EXPECT_EQ(load(kLlama, {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}), "");
  for (const char* form : {"rope_scaling", "rope_parameters"}) {
    auto with = [&](json rope, const json& change) {
      rope.merge_patch(change);
      if (std::string(form) == "rope_parameters") rope["rope_theta"] = 10000.0;
      return json{{form, rope}};
    };
    const std::string f = form;
    expect_refused(kLlama, with({{"rope_type", "linear"}}, {{"factor", 0}}), f + ".factor", "= 0 must be a finite number > 0");
    expect_refused(kLlama, with({{"rope_type", "linear"}}, json::object()), f + ".factor", "is missing: RoPE type \"linear\" needs it");
    expect_refused(kLlama, with(llama3, {{"factor", "8"}}), f + ".factor", "= \"8\" must be a finite number > 0");
    expect_refused(kLlama, with(llama3, {{"factor", -8}}), f + ".factor", "must be a finite number > 0");
    expect_refused(kLlama, with(llama3, {{"low_freq_factor", 0}}), f + ".low_freq_factor", "must be a finite number > 0");
    expect_refused(kLlama, with(llama3, {{"high_freq_factor", 1.0}}), f + ".high_freq_factor", "must exceed low_freq_factor");
    expect_refused(kLlama, with(llama3, {{"original_max_position_embeddings", 0}}), f + ".original_max_position_embeddings",
                   "must be a finite number > 0");
    expect_refused(kLlama, with(llama3, {{"original_max_position_embeddings", nullptr}}),
                   f + ".original_max_position_embeddings", "is missing");
    expect_refused(kLlama, with(yarn, {{"factor", -2}}), f + ".factor", "must be a finite number >= 0");
    expect_refused(kLlama, with(yarn, {{"beta_fast", 0}}), f + ".beta_fast", "must be a finite number > 0");
    expect_refused(kLlama, with(yarn, {{"beta_slow", "1"}}), f + ".beta_slow", "must be a finite number > 0");
    expect_refused(kLlama, with(yarn, {{"mscale", -1}}), f + ".mscale", "must be a finite number >= 0");
    expect_refused(kLlama, with(yarn, {{"mscale_all_dim", true}}), f + ".mscale_all_dim", "must be a finite number >= 0");
    expect_refused(kLlama, with(yarn, {{"attention_factor", 0}}), f + ".attention_factor", "must be a finite number > 0");
    expect_refused(kLlama, with(yarn, {{"truncate", "yes"}}), f + ".truncate", "must be true or false");
    expect_refused(kLlama, with(yarn, {{"partial_rotary_factor", 1.5}}), "partial_rotary_factor", "must lie in (0, 1]");
    expect_refused(kLlama, with({{"rope_type", "dynamic"}}, {{"factor", 2.0}}), f + ".rope_type", "is not supported");
  }
  expect_refused(kLlama, {{"rope_scaling", {{"type", 3}}}}, "rope_scaling.type", "must be a string");
  expect_refused(kMixtral, {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 0}}}}, "rope_scaling.factor",
                 "must be a finite number > 0");
}

// RoPE rotates channel pairs: an odd head_dim used to end in a raw LibTorch message ("start
// (0) + length (8) exceeds dimension size (7)") naming neither the file nor the key.
TEST_F(ModelConfigValidation, HeadDimMustBeEven) {
  expect_refused(kLlama, {{"head_dim", 7}}, "head_dim", "= 7 must be even");
  expect_refused(kMixtral, {{"head_dim", 9}}, "head_dim", "= 9 must be even");
  expect_refused(kLlama, {{"hidden_size", 36}, {"num_attention_heads", 4}, {"num_key_value_heads", 4}},
                 "num_attention_heads", "gives head_dim = hidden_size / heads = 9, which must be even");
}

TEST_F(ModelConfigValidation, LayerTypesHaveOneValidEntryPerLayer) {
  EXPECT_EQ(load(kLlama, {{"layer_types", {"full_attention", "sliding_attention"}}, {"sliding_window", 8}}), "");
  expect_refused(kLlama, {{"layer_types", {"full_attention"}}}, "layer_types", "has 1 entries, but num_hidden_layers = 2");
  expect_refused(kMixtral, {{"layer_types", {"full_attention", "full_attention", "full_attention"}}}, "layer_types",
                 "has 3 entries, but num_hidden_layers = 2");
  expect_refused(kLlama, {{"layer_types", {"full_attention", "local"}}}, "layer_types",
                 "entry 1 = \"local\" is not \"full_attention\" or \"sliding_attention\"");
}

}  // namespace

namespace {

// pad_token_id is the embedding row HF freezes: a row of the table, negatives counting from the
// end as nn.Embedding's padding_idx does; null means none.
TEST_F(ModelConfigValidation, PadTokenIdMustBeARowOfTheEmbedding) {
  EXPECT_EQ(load(kLlama, {{"pad_token_id", 0}}), "");
  EXPECT_EQ(load(kLlama, {{"pad_token_id", -1}}), "");
  EXPECT_EQ(load(kLlama, {{"pad_token_id", nullptr}}), "");
  EXPECT_EQ(load(kMixtral, {{"pad_token_id", 52}}), "");
  expect_refused(kLlama, {{"pad_token_id", 53}}, "pad_token_id", "= 53 is not a row of the embedding (vocab_size 53)");
  expect_refused(kMixtral, {{"pad_token_id", -54}}, "pad_token_id", "= -54 is not a row");
  expect_refused(kLlama, {{"pad_token_id", "<pad>"}}, "pad_token_id", "");
  auto with = [](json base, const json& changes) {
    base.merge_patch(changes);
    return so::model::HfConfig::parse(base.dump(), "config.json");
  };
  EXPECT_EQ(with(kLlama, {{"pad_token_id", -1}}).padding_idx(53), 52);
  EXPECT_EQ(with(kLlama, json::object()).padding_idx(53), -1);
}

// Dropout is not implemented: the keys that set one above 0 are found for the warning, the
// heads a causal LM has not are left out.
TEST_F(ModelConfigValidation, DropoutsAboveZeroAreFound) {
  auto dropouts = [](json base, const json& changes) {
    base.merge_patch(changes);
    return so::model::HfConfig::parse(base.dump(), "config.json").dropouts();
  };
  EXPECT_TRUE(dropouts(kLlama, {{"attention_dropout", 0.0}}).empty());
  const auto seed_oss = dropouts(kLlama, {{"attention_dropout", 0.1}, {"residual_dropout", 0.05}});
  ASSERT_EQ(seed_oss.size(), 2u);
  EXPECT_EQ(seed_oss[0].first, "attention_dropout");
  EXPECT_EQ(seed_oss[1].second, 0.05);
  const auto gpt2 = dropouts(kGpt2, {{"resid_pdrop", 0.1}, {"embd_pdrop", 0.1}, {"attn_pdrop", 0.1},
                                     {"summary_first_dropout", 0.1}, {"classifier_dropout", 0.2}});
  EXPECT_EQ(gpt2.size(), 3u);
}

}  // namespace
