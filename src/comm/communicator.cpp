// Data type facts and argument checks shared by the backends.
#include "comm/communicator.hpp"

#include "base/error.hpp"

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

void check_all_to_all_layout(int ranks, const std::vector<size_t>& send_counts, const std::vector<size_t>& send_offsets,
                             const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_offsets) {
  const auto n = static_cast<size_t>(ranks);
  SO_CHECK(send_counts.size() == n && send_offsets.size() == n && recv_counts.size() == n && recv_offsets.size() == n,
           "all_to_all: counts and offsets need one entry per rank (" << ranks << "), not " << send_counts.size() << ", "
                                                                     << send_offsets.size() << ", " << recv_counts.size()
                                                                     << " and " << recv_offsets.size());
}

}  // namespace superoffload::comm
