// Random initialisation of a model without weights: norms 1, biases 0, the rest N(0,
// initializer_range) (by CausalLM::parameter_role), an embedding's padding row 0 as HF's
// nn.Embedding(padding_idx). One drawer for both uses: a whole layer (a model built in full:
// eval, a single process) and ranges of a layer's parameters (a ZeRO rank draws its own shard,
// as it reads only its shard's bytes of a safetensors model), with the same values element for
// element.
//
// A weight is drawn in fp32 in blocks of 4 Mi elements, block b from its own generator seeded by
// `seed`, the weight's HF name and b: its values depend on nothing else — not the thread count,
// the layer order, the partitioning or the world size. Blocks are drawn in parallel on the
// rank's threads (on one thread an 8B took 49-62 s on 16 cores of an H200 machine).
#pragma once

#include <cstdint>
#include <vector>

#include "model/causal_lm.hpp"
#include "model_io/weights.hpp"

namespace superoffload::model {

// Fills `ranges` of layer `layer`'s parameters in fp32; the parameters themselves are not touched.
void init_layer_ranges(const CausalLM& model, size_t layer, uint64_t seed, const std::vector<WeightRange>& ranges);

// Initialises layer `layer`'s parameters themselves, whatever their device and dtype (drawn in
// fp32 on the CPU, then copied over through one staging tensor at a time).
void init_layer(CausalLM& model, size_t layer, uint64_t seed);

}  // namespace superoffload::model
