// Random initialisation of ranges of a layer's parameters: what a ZeRO rank draws of a model
// without weights is its own shard, not the whole model (as it reads only its shard's bytes of
// a safetensors model). The values equal CausalLM::init_layer_parameters's element for element:
// the same seeds and blocks (model/init_seeds.hpp), each block overlapping a range drawn whole.
#pragma once

#include <cstdint>
#include <vector>

#include "model/causal_lm.hpp"
#include "model_io/weights.hpp"

namespace superoffload::model {

// Fills `ranges` of layer `layer`'s parameters (norms 1, biases 0, weights N(0,
// initializer_range), an embedding's padding row 0) in fp32, on the rank's threads; the
// parameters themselves are not touched.
void init_layer_ranges(const CausalLM& model, size_t layer, uint64_t seed, const std::vector<WeightRange>& ranges);

}  // namespace superoffload::model
