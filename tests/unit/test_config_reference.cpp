// configs/reference.toml stays in step with the schema: it is exactly what
// `superoffload config --reference` prints, it loads, and its values are the defaults.
#include <gtest/gtest.h>

#include <fstream>
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
  for (const char* name : {"tiny.toml"}) {
    const std::string path = std::string(SUPEROFFLOAD_SOURCE_DIR) + "/configs/" + name;
    EXPECT_NO_THROW(so::config::load_config({path, std::nullopt, {}}, 2)) << path;
  }
}

}  // namespace
