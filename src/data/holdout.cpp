// hold_out.
#include "data/holdout.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "base/error.hpp"

namespace superoffload::data {

HoldOut hold_out(int64_t samples, double fraction, uint64_t seed) {
  SO_CHECK(fraction > 0 && fraction < 1, "hold_out: fraction " << fraction << " is not in (0, 1)");
  const auto count = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(fraction * static_cast<double>(samples) - 1e-9)));
  SO_CHECK(count < samples, "[data] eval_fraction = " << fraction << " of " << samples << " samples leaves none to train on"
                                                     << hint("use more data, or a file of its own as [data] eval_path"));
  std::vector<int64_t> order(static_cast<size_t>(samples));
  std::iota(order.begin(), order.end(), 0);
  // A partial Fisher–Yates with a fixed engine and explicit arithmetic: the same on every
  // platform. Its stream differs from the sampler's shuffles (another seed mix).
  std::mt19937_64 engine(seed * 2654435761u + 0x5eed);
  for (int64_t i = 0; i < count; ++i) {
    const auto j = i + static_cast<int64_t>(engine() % static_cast<uint64_t>(samples - i));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  HoldOut out;
  out.eval.assign(order.begin(), order.begin() + count);
  out.train.assign(order.begin() + count, order.end());
  std::sort(out.eval.begin(), out.eval.end());
  std::sort(out.train.begin(), out.train.end());
  return out;
}

}  // namespace superoffload::data
