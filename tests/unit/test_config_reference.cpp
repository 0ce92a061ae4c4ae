// configs/reference.toml stays in step with the schema: it is exactly what
// `superoffload config --reference` prints, it loads, and its values are the defaults.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "config/toml_writer.hpp"

namespace so = superoffload;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::string kReference = std::string(SUPEROFFLOAD_SOURCE_DIR) + "/configs/reference.toml";

// Every config the project ships: the embedded default, the reference and the reference models.
std::vector<std::string> shipped_configs() {
  const std::string configs = std::string(SUPEROFFLOAD_SOURCE_DIR) + "/configs";
  std::vector<std::string> paths = {configs + "/tiny.toml", kReference};
  for (const auto& entry : std::filesystem::directory_iterator(configs + "/reference-models")) {
    if (entry.path().extension() == ".toml") paths.push_back(entry.path().string());
  }
  return paths;
}

// The world size a config was written for: the smallest its batch sizes divide.
int world_size_of(const std::string& path) {
  for (int world : {1, 2, 4, 8}) {
    try {
      so::config::load_config({path, std::nullopt, {}}, world);
      return world;
    } catch (const so::config::ConfigError&) {
    }
  }
  return 1;
}

// The text of a value as --set takes it.
std::string as_set_value(const so::config::Value& value) {
  if (const auto* flag = std::get_if<bool>(&value)) return *flag ? "true" : "false";
  if (const auto* text = std::get_if<std::string>(&value)) return "\"" + *text + "\"";
  return {};
}

TEST(ConfigReference, FileMatchesTheSchema) {
  EXPECT_EQ(read(kReference), so::config::reference_toml())
      << "configs/reference.toml is out of date: regenerate it with\n"
         "  build/bin/superoffload config --reference > configs/reference.toml";
}

TEST(ConfigReference, EveryKeyIsDocumented) {
  const auto text = read(kReference);
  for (const auto& section : so::config::schema()) {
    EXPECT_NE(text.find("[" + section.name + "]\n"), std::string::npos) << section.name;
    for (const auto& field : section.fields) {
      EXPECT_FALSE(field.doc.empty()) << field.name();
      EXPECT_NE(text.find("\n" + field.key + " = "), std::string::npos) << field.name();
    }
  }
}

TEST(ConfigReference, LoadsWithDefaultValues) {
  auto loaded = so::config::load_config({kReference, std::nullopt, {}}, 1);
  so::config::Config expected;
  expected.model.path = loaded.config.model.path;  // the required keys carry examples
  expected.data.path = loaded.config.data.path;
  expected.training.train_batch_size = 1;  // derived for one rank
  expected.training.train_micro_batch_size_per_gpu = 1;
  expected.training.gradient_accumulation_steps = 1;
  EXPECT_EQ(so::config::to_toml(loaded.config), so::config::to_toml(expected));
}

TEST(ConfigReference, ShippedConfigsLoad) {
  for (const auto& path : shipped_configs()) {
    EXPECT_NO_THROW(so::config::load_config({path, std::nullopt, {}}, world_size_of(path))) << path;
  }
}

// Every documented switch of every shipped config, flipped alone, loads: each boolean to its
// other value, each key with a list of choices to every other choice. A flip never meets a
// "contradiction" with a value the file states (a copy of reference.toml with super_offload
// = false must start). The exceptions need another key or hardware by nature, and their
// error must say what to set.
TEST(ConfigReference, EverySwitchOfEveryShippedConfigFlippedAloneLoads) {
  // Flips that cannot stand alone: what their error must name.
  const std::map<std::string, std::string> needs = {
      {"offload.device=\"nvme\"", "needs nvme_path"},                  // a directory only the user knows
      {"runtime.comm_backend=\"nccl\"", "NCCL works on GPU buffers only"},  // in configs with device = "cpu"
  };
  int flips = 0;
  for (const auto& path : shipped_configs()) {
    const int world = world_size_of(path);
    const auto original = so::config::load_config({path, std::nullopt, {}}, world).config;
    for (const auto& section : so::config::schema()) {
      for (const auto& field : section.fields) {
        std::vector<std::string> values;
        const auto now = field.get(original);
        if (field.kind == so::config::Kind::boolean) {
          values.push_back(std::get<bool>(now) ? "false" : "true");
        } else if (field.kind == so::config::Kind::string) {
          for (const auto& choice : field.choices) {
            if (choice != std::get<std::string>(now)) values.push_back(as_set_value(choice));
          }
        }
        for (const auto& value : values) {
          const std::string set = field.dotted() + "=" + value;
          ++flips;
          try {
            so::config::load_config({path, std::nullopt, {set}}, world);
          } catch (const so::config::ConfigError& e) {
            const auto need = needs.find(set);
            const std::string message = e.what();
            if (need == needs.end() || message.find(need->second) == std::string::npos) {
              ADD_FAILURE() << path << " --set " << set << " does not load:\n" << message;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(flips, 9 * 30);  // 9 configs, 30+ switches each
}

}  // namespace
