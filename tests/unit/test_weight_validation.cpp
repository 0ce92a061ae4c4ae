// Hostile safetensors weights are refused before training, naming file, tensor and problem:
// integer data is never reinterpreted as float (an I32 tensor has an F32 tensor's byte size
// and used to load as garbage, loss 1.9e10), and NaN/inf weights are refused unless
// [model] allow_non_finite_weights says they are wanted.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "base/error.hpp"
#include "base/logging.hpp"
#include "model_io/load_model.hpp"
#include "model_io/safetensors.hpp"

namespace so = superoffload;
namespace m = so::model;

namespace {

class WeightValidation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { so::log::init(so::log::Level::warning); }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("so_weight_validation_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 53,
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2})";
    // The weights of a randomly initialised model, as F32 bytes per HF name.
    const auto model = m::load_model(dir_.string(), "auto", so::config::InitMode::random, 3).model;
    for (const auto& layer : model->layers()) {
      for (const auto& [name, tensor] : layer->hf_parameters()) {
        const auto values = tensor.detach().to(at::kFloat).contiguous();
        tensors_.push_back({name, values.sizes().vec(),
                            std::vector<float>(values.data_ptr<float>(), values.data_ptr<float>() + values.numel())});
      }
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  struct Stored {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
    m::DType dtype = m::DType::F32;
  };
  void write() {
    std::vector<m::TensorToWrite> out;
    for (const auto& t : tensors_) out.push_back({t.name, t.dtype, t.shape, t.values.data()});
    m::write_safetensors(dir_ / "model.safetensors", out);
  }
  // The error loading the written weights gives ("" when they loaded).
  std::string load(m::NonFiniteWeights non_finite = m::NonFiniteWeights::refuse) {
    write();
    try {
      m::load_model(dir_.string(), "auto", so::config::InitMode::pretrained, 0, false, non_finite);
    } catch (const so::Error& e) {
      hint_ = e.hint();
      return e.what();
    }
    return "";
  }
  Stored& tensor(const std::string& name) {
    for (auto& t : tensors_) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  }
  std::filesystem::path dir_;
  std::vector<Stored> tensors_;
  std::string hint_;  // of the last error
};

TEST_F(WeightValidation, ValidWeightsLoad) { EXPECT_EQ(load(), ""); }

TEST_F(WeightValidation, IntegerTensorsAreNotReadAsFloat) {
  // Same byte size as F32: only the dtype in the header changes.
  tensor("model.layers.1.mlp.up_proj.weight").dtype = m::DType::I32;
  const auto message = load();
  EXPECT_NE(message.find((dir_ / "model.safetensors").string()), std::string::npos) << message;
  EXPECT_NE(message.find("\"model.layers.1.mlp.up_proj.weight\""), std::string::npos) << message;
  EXPECT_NE(message.find("stored as I32"), std::string::npos) << message;
  EXPECT_NE(message.find("F32, BF16, F16 or F64"), std::string::npos) << message;
}

TEST_F(WeightValidation, NonFiniteWeightsAreRefusedUnlessAllowed) {
  auto& t = tensor("model.layers.0.self_attn.q_proj.weight");
  t.values[5] = std::nanf("");
  t.values[17] = INFINITY;
  auto message = load();
  EXPECT_NE(message.find((dir_ / "model.safetensors").string()), std::string::npos) << message;
  EXPECT_NE(message.find("\"model.layers.0.self_attn.q_proj.weight\""), std::string::npos) << message;
  EXPECT_NE(message.find("holds 2 non-finite value(s)"), std::string::npos) << message;
  EXPECT_TRUE(hint_.find("[model] allow_non_finite_weights = true") != std::string::npos) << hint_;
  EXPECT_EQ(load(m::NonFiniteWeights::allow), "");
}

}  // namespace
