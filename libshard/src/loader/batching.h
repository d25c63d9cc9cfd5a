// BatchLayout: how a stretch of the epoch's permutation is cut into global units (single samples,
// fixed-size batches or token-budget batches). Units are given as [Begin(g), End(g)) ranges of
// positions in the permutation, so a layout never copies sample indices. Pure computation.
// The rules are part of the order contract, docs/ORDER.md §2.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "libshard/loader.h"  // TokenBudget

namespace libshard {

// Whether a unit of `count` samples whose longest is `longest` tokens and whose lengths sum to
// `sum` tokens stays within `max_tokens` under `budget` (kSum: sum; kPadded: count x longest;
// kAuto is not a rule here and counts as kSum). Overflow-safe.
bool FitsBudget(TokenBudget budget, uint64_t count, uint64_t longest, uint64_t sum,
                uint64_t max_tokens);

class BatchLayout {
 public:
  BatchLayout() = default;  // no units

  // Units of `batch` consecutive positions over [begin, end) (batch >= 1); the last unit is
  // shorter when (end - begin) is not a multiple of `batch`, and omitted if `drop_partial`.
  static BatchLayout Fixed(uint64_t begin, uint64_t end, uint64_t batch, bool drop_partial);

  // Greedy token-budget units over positions [begin, perm.size()): a unit takes positions while
  // it stays within max_tokens (> 0) under `budget` (FitsBudget); the position that would
  // overflow starts the next unit; a position whose own length exceeds max_tokens is a unit of
  // its own. Stops after `max_units` units (pass UINT64_MAX for all). Preconditions: begin <=
  // perm.size(), every perm[i] < lengths.size(). O(units) memory.
  static BatchLayout Tokens(std::span<const uint64_t> perm, std::span<const uint64_t> lengths,
                            uint64_t begin, uint64_t max_tokens, uint64_t max_units,
                            TokenBudget budget = TokenBudget::kSum);
  // Same over positions [begin, end) of a permutation given per position: sample_at(i) is
  // perm[i] (every value < lengths.size()). Streams; nothing of size end is built.
  static BatchLayout Tokens(uint64_t end, const std::function<uint64_t(uint64_t)>& sample_at,
                            std::span<const uint64_t> lengths, uint64_t begin,
                            uint64_t max_tokens, uint64_t max_units,
                            TokenBudget budget = TokenBudget::kSum);
  // Units given by their boundaries: bounds[0] < bounds[1] < ... (units = bounds.size() - 1).
  static BatchLayout FromBounds(std::vector<uint64_t> bounds);
  // The units from permutation position `position` on: the suffix from the unit starting there,
  // or, when no unit starts there, the rest of the unit holding it as a unit of its own followed
  // by the units after it. Position >= the end: no units.
  BatchLayout From(uint64_t position) const;

  // The units from unit g on (g <= size()), as a layout of their own.
  BatchLayout Suffix(uint64_t g) const;
  // The unit that starts at permutation position `position`, or size() when none does.
  uint64_t FindUnitStart(uint64_t position) const;

  uint64_t size() const { return units_; }
  bool empty() const { return units_ == 0; }
  // Preconditions: g < size().
  uint64_t Begin(uint64_t g) const { return bounds_.empty() ? begin_ + g * batch_ : bounds_[g]; }
  uint64_t End(uint64_t g) const;

 private:
  uint64_t units_ = 0;
  // Fixed layouts: arithmetic from begin_/end_/batch_; token layouts: bounds_ (units_ + 1 entries).
  uint64_t begin_ = 0;
  uint64_t end_ = 0;
  uint64_t batch_ = 1;
  std::vector<uint64_t> bounds_;
};

}  // namespace libshard
