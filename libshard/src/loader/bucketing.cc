#include "loader/bucketing.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "loader/batching.h"
#include "loader/order_random.h"

namespace libshard {

uint64_t EffectiveBucketWindow(uint64_t bucket_window, uint64_t batch_size) {
  if (bucket_window == 0) return 0;
  if (batch_size <= 1) return bucket_window;
  const uint64_t units = bucket_window / batch_size + (bucket_window % batch_size != 0 ? 1 : 0);
  if (units > std::numeric_limits<uint64_t>::max() / batch_size)
    return std::numeric_limits<uint64_t>::max() / batch_size * batch_size;
  return units * batch_size;
}

BucketWindow MakeBucketWindow(uint64_t n, const std::function<uint64_t(uint64_t)>& base_at,
                              std::span<const uint64_t> lengths, const BucketRule& rule,
                              uint64_t w) {
  const uint64_t begin = w * rule.window;
  const uint64_t end = begin + std::min(rule.window, n - begin);
  // 1. The window's samples sorted by (length, sample index): a total order, so exact.
  std::vector<std::pair<uint64_t, uint64_t>> sorted;
  sorted.reserve(end - begin);
  for (uint64_t i = begin; i < end; ++i) {
    const uint64_t sample = base_at(i);
    sorted.emplace_back(lengths[sample], sample);
  }
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> by_length(sorted.size());
  std::vector<uint64_t> sorted_lengths(sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) {
    sorted_lengths[i] = sorted[i].first;
    by_length[i] = sorted[i].second;
  }
  sorted = {};

  // 2. Units over the sorted window, by the rules of section 2 (positions relative to begin).
  const uint64_t count = by_length.size();
  const BatchLayout units =
      rule.batch_size > 1
          ? BatchLayout::Fixed(0, count, rule.batch_size, /*drop_partial=*/false)
          : BatchLayout::Tokens(
                count, [](uint64_t i) { return i; }, sorted_lengths, 0, rule.max_tokens,
                std::numeric_limits<uint64_t>::max(), rule.budget);

  // 3. The window's units in a shuffled order; with fixed-size units a partial last unit (only
  //    the epoch's last window has one) keeps its place at the end.
  std::vector<uint64_t> order(units.size());
  for (uint64_t g = 0; g < order.size(); ++g) order[g] = g;
  if (rule.shuffle) {
    uint64_t shuffled = order.size();
    if (rule.batch_size > 1 && shuffled > 0 &&
        units.End(shuffled - 1) - units.Begin(shuffled - 1) < rule.batch_size)
      --shuffled;
    order_random::SplitMix64 rng(order_random::BucketWindowKey(rule.seed, rule.epoch, w));
    for (uint64_t i = shuffled; i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  }

  BucketWindow out;
  out.samples.reserve(count);
  out.bounds.reserve(order.size() + 1);
  out.bounds.push_back(0);
  for (const uint64_t g : order) {
    for (uint64_t i = units.Begin(g); i < units.End(g); ++i) out.samples.push_back(by_length[i]);
    out.bounds.push_back(out.samples.size());
  }
  return out;
}

}  // namespace libshard
