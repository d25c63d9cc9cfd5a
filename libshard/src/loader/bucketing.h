// Length-aware batching (the order contract's §2a, docs/ORDER.md): the epoch's base order
// P is cut into windows of consecutive positions; each window's samples are sorted by length, cut
// into units (fixed-size or token-budget batches) and the window's units are shuffled. The result
// is a permutation S of the samples whose windows cover the same positions as P's, so a position
// of S is as meaningful for resume as one of P. Pure computation.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "libshard/loader.h"  // TokenBudget

namespace libshard {

struct BucketRule {
  uint64_t window = 0;       // M: positions per window (> 0; a multiple of batch_size for fixed)
  uint64_t batch_size = 0;   // > 1: fixed-size units; else token units with max_tokens
  uint64_t max_tokens = 0;
  TokenBudget budget = TokenBudget::kSum;
  bool shuffle = true;       // shuffle each window's units (off: ascending length)
  uint64_t seed = 0;
  uint64_t epoch = 0;
};

// The window size section 2a uses for a requested `bucket_window`: rounded up to a multiple of
// batch_size for fixed-size units (so only the epoch's last unit can be partial), as is for
// token units. Never 0 for bucket_window > 0; saturates instead of overflowing.
uint64_t EffectiveBucketWindow(uint64_t bucket_window, uint64_t batch_size);

struct BucketWindow {
  std::vector<uint64_t> samples;  // the window's samples in S order
  std::vector<uint64_t> bounds;   // unit boundaries, relative to the window's first position:
                                  // 0 = bounds[0] < ... < bounds.back() = samples.size()
};

// Window `w` of S: positions [w M, min(n, (w + 1) M)) of the base order `base_at` (base_at(i) =
// P[i] < lengths.size()). Preconditions: w M < n.
BucketWindow MakeBucketWindow(uint64_t n, const std::function<uint64_t(uint64_t)>& base_at,
                              std::span<const uint64_t> lengths, const BucketRule& rule,
                              uint64_t w);

}  // namespace libshard
