// A fixture for tests that build models from an HF config.json they write: a temporary
// directory per test, removed after it, and the model built with random weights (seed 5).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "base/logging.hpp"
#include "model_io/load_model.hpp"

namespace superoffload::testing {

class ConfigModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { superoffload::log::init(superoffload::log::Level::warning); }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("so_config_models_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::shared_ptr<model::CausalLM> build(const std::string& config_json) {
    std::ofstream(dir_ / "config.json") << config_json;
    return model::load_model(dir_.string(), "auto", config::InitMode::random, 5).model;
  }
  std::filesystem::path dir_;
};

}  // namespace superoffload::testing
