// Plugin loading: the shipped plugin is found and complete; mismatched plugins are refused
// with both sides named; non-plugins are refused with the reason.
#include <gtest/gtest.h>

#include <torch/version.h>

#include <fstream>

#include "base/error.hpp"
#include "model_io/plugin_loader.hpp"

namespace m = superoffload::model;

namespace {

TEST(PluginLoader, ShippedLlamaPluginIsUsable) {
  const auto registry = m::PluginRegistry::discover();
  const m::PluginCandidate* llama = nullptr;
  for (const auto& c : registry.candidates()) {
    if (c.name == "llama") llama = &c;
  }
  ASSERT_NE(llama, nullptr) << "libsuperoffload_llama.so not found in the build tree";
  EXPECT_TRUE(llama->usable) << llama->refusal;
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                           "Phi3ForCausalLM", "SeedOssForCausalLM"}) {
    EXPECT_NE(std::find(llama->architectures.begin(), llama->architectures.end(), arch), llama->architectures.end())
        << arch;
  }
  auto copy = registry;
  EXPECT_EQ(copy.select("auto", "Qwen3ForCausalLM").name, "llama");
  EXPECT_EQ(copy.select("llama", "").name, "llama");
}

TEST(PluginLoader, OtherAbiVersionIsRefusedNamingBoth) {
  const auto c = m::probe_plugin(TEST_PLUGIN_ABI_MISMATCH);
  EXPECT_FALSE(c.usable);
  EXPECT_NE(c.refusal.find("plugin ABI version " + std::to_string(SUPEROFFLOAD_PLUGIN_ABI_VERSION + 1)), std::string::npos)
      << c.refusal;
  EXPECT_NE(c.refusal.find("this superoffload uses " + std::to_string(SUPEROFFLOAD_PLUGIN_ABI_VERSION)), std::string::npos)
      << c.refusal;
}

TEST(PluginLoader, PluginBuiltAgainstOtherHeadersIsRefusedNamingBothTags) {
  ASSERT_STRNE(TEST_PLUGIN_MODIFIED_TAG, TEST_HOST_ABI_TAG) << "the modified header must change the tag";
  const auto c = m::probe_plugin(TEST_PLUGIN_HEADERS_MISMATCH);
  EXPECT_FALSE(c.usable);
  EXPECT_NE(c.refusal.find("ABI tag " TEST_PLUGIN_MODIFIED_TAG), std::string::npos) << c.refusal;
  EXPECT_NE(c.refusal.find("this superoffload has " TEST_HOST_ABI_TAG), std::string::npos) << c.refusal;
}

TEST(PluginLoader, OtherLibTorchIsRefusedNamingBoth) {
  const auto c = m::probe_plugin(TEST_PLUGIN_TORCH_MISMATCH);
  EXPECT_FALSE(c.usable);
  EXPECT_NE(c.refusal.find("LibTorch 1.13.1"), std::string::npos) << c.refusal;
  EXPECT_NE(c.refusal.find("LibTorch " TORCH_VERSION), std::string::npos) << c.refusal;
}

TEST(PluginLoader, NonPluginsAreRefusedWithTheReason) {
  const auto path = std::filesystem::temp_directory_path() / "not_a_plugin.so";
  std::ofstream(path) << "not an ELF file";
  auto c = m::probe_plugin(path.string());
  EXPECT_FALSE(c.usable);
  EXPECT_NE(c.refusal.find("cannot be loaded"), std::string::npos) << c.refusal;
  std::filesystem::remove(path);
  m::PluginRegistry registry;
  try {
    registry.select("auto", "NoSuchForCausalLM");
    FAIL() << "expected an error";
  } catch (const superoffload::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no plugin handles the architecture \"NoSuchForCausalLM\""), std::string::npos);
  }
}

}  // namespace
