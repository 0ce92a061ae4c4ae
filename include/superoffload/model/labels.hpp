// The label value that carries no loss (prompt tokens, padding, the position after the
// last token): HuggingFace's and PyTorch's ignore_index. Torch-free, so that the data
// pipeline, which writes labels, and the model, which skips them, share it.
#pragma once

#include <cstdint>

namespace superoffload::model {

inline constexpr int64_t kIgnoreLabel = -100;

}  // namespace superoffload::model
