// Data type facts shared by the backends.
#include "comm/communicator.hpp"

namespace superoffload::comm {

size_t size_of(DataType type) {
  switch (type) {
    case DataType::f64: return 8;
    case DataType::f32: return 4;
    case DataType::bf16: return 2;
    case DataType::f16: return 2;
    case DataType::i64: return 8;
    case DataType::i32: return 4;
    case DataType::u8: return 1;
  }
  return 0;
}

const char* name_of(DataType type) {
  switch (type) {
    case DataType::f64: return "f64";
    case DataType::f32: return "f32";
    case DataType::bf16: return "bf16";
    case DataType::f16: return "f16";
    case DataType::i64: return "i64";
    case DataType::i32: return "i32";
    case DataType::u8: return "u8";
  }
  return "?";
}

}  // namespace superoffload::comm
