// Test helper: load a HF directory and export it again (the path `superoffload export`
// takes once checkpoints exist). Usage: export_roundtrip IN_DIR OUT_DIR DTYPE MAX_SHARD_SIZE
#include <iostream>

#include "base/logging.hpp"
#include "model_io/export_hf.hpp"
#include "model_io/load_model.hpp"
#include "model_io/safetensors.hpp"

int main(int argc, char** argv) {
  namespace m = superoffload::model;
  if (argc != 5) {
    std::cerr << "usage: export_roundtrip IN_DIR OUT_DIR bf16|fp32 MAX_SHARD_SIZE\n";
    return 2;
  }
  superoffload::log::init(superoffload::log::Level::warning);
  try {
    auto loaded = m::load_model(argv[1], "auto", superoffload::config::InitMode::pretrained, 0);
    m::export_hf(*loaded.model, argv[1], argv[2], {argv[3], m::parse_byte_size(argv[4])});
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
