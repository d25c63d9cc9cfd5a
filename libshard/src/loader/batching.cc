#include "loader/batching.h"

#include <algorithm>

namespace libshard {

BatchLayout BatchLayout::Fixed(uint64_t begin, uint64_t end, uint64_t batch, bool drop_partial) {
  BatchLayout layout;
  layout.batch_ = std::max<uint64_t>(batch, 1);
  layout.begin_ = begin;
  layout.end_ = std::max(begin, end);
  const uint64_t span = layout.end_ - begin;
  layout.units_ = span / layout.batch_ + ((!drop_partial && span % layout.batch_ != 0) ? 1 : 0);
  return layout;
}

bool FitsBudget(TokenBudget budget, uint64_t count, uint64_t longest, uint64_t sum,
                uint64_t max_tokens) {
  if (budget == TokenBudget::kPadded)
    return count == 0 || longest <= max_tokens / count;  // count * longest <= max_tokens
  return sum <= max_tokens;
}

BatchLayout BatchLayout::Tokens(std::span<const uint64_t> perm, std::span<const uint64_t> lengths,
                                uint64_t begin, uint64_t max_tokens, uint64_t max_units,
                                TokenBudget budget) {
  return Tokens(
      perm.size(), [perm](uint64_t i) { return perm[i]; }, lengths, begin, max_tokens,
      max_units, budget);
}

BatchLayout BatchLayout::Tokens(uint64_t end, const std::function<uint64_t(uint64_t)>& sample_at,
                                std::span<const uint64_t> lengths, uint64_t begin,
                                uint64_t max_tokens, uint64_t max_units, TokenBudget budget) {
  BatchLayout layout;
  layout.begin_ = std::min(begin, end);
  layout.end_ = end;
  layout.bounds_.push_back(layout.begin_);
  // The open unit [bounds_.back(), i): its summed and its longest length.
  uint64_t tokens = 0;
  uint64_t longest = 0;
  for (uint64_t i = layout.begin_; i < end && layout.units_ < max_units; ++i) {
    const uint64_t len = lengths[sample_at(i)];
    const uint64_t count = i - layout.bounds_.back();
    // `len > max_tokens - tokens` is `tokens + len > max_tokens` without overflow.
    if (count > 0 && (len > max_tokens - tokens ||
                      !FitsBudget(budget, count + 1, std::max(longest, len), 0, max_tokens))) {
      layout.bounds_.push_back(i);
      ++layout.units_;
      tokens = 0;
      longest = 0;
      if (layout.units_ == max_units) break;
    }
    if (len > max_tokens) {  // oversized: a unit of its own
      layout.bounds_.push_back(i + 1);
      ++layout.units_;
      tokens = 0;
      longest = 0;
      continue;
    }
    tokens += len;
    longest = std::max(longest, len);
  }
  if (layout.units_ < max_units && layout.bounds_.back() < end) {
    layout.bounds_.push_back(end);
    ++layout.units_;
  }
  layout.bounds_.shrink_to_fit();
  return layout;
}

BatchLayout BatchLayout::FromBounds(std::vector<uint64_t> bounds) {
  BatchLayout layout;
  if (bounds.size() < 2) {
    layout.begin_ = layout.end_ = bounds.empty() ? 0 : bounds.front();
    return layout;
  }
  layout.units_ = bounds.size() - 1;
  layout.begin_ = bounds.front();
  layout.end_ = bounds.back();
  layout.bounds_ = std::move(bounds);
  return layout;
}

BatchLayout BatchLayout::From(uint64_t position) const {
  if (units_ == 0 || position >= End(units_ - 1)) {
    BatchLayout none;
    none.begin_ = none.end_ = end_;
    return none;
  }
  if (position <= Begin(0)) return *this;
  if (const uint64_t g = FindUnitStart(position); g < units_) return Suffix(g);
  // The unit holding `position`: the last one that begins before it.
  uint64_t lo = 0;
  uint64_t hi = units_;  // Begin(lo) < position <= ... ; find the largest g with Begin(g) < pos
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (Begin(mid) < position) lo = mid; else hi = mid;
  }
  std::vector<uint64_t> bounds;
  bounds.reserve(units_ - lo + 1);
  bounds.push_back(position);
  for (uint64_t g = lo; g < units_; ++g) bounds.push_back(End(g));
  return FromBounds(std::move(bounds));
}

BatchLayout BatchLayout::Suffix(uint64_t g) const {
  BatchLayout layout;
  g = std::min(g, units_);
  layout.units_ = units_ - g;
  layout.batch_ = batch_;
  layout.end_ = end_;
  if (bounds_.empty()) {
    layout.begin_ = std::min(begin_ + g * batch_, end_);
  } else {
    layout.bounds_.assign(bounds_.begin() + static_cast<std::ptrdiff_t>(g), bounds_.end());
    layout.begin_ = layout.bounds_.front();
  }
  return layout;
}

uint64_t BatchLayout::FindUnitStart(uint64_t position) const {
  if (bounds_.empty()) {
    if (position < begin_ || (position - begin_) % batch_ != 0) return units_;
    return std::min((position - begin_) / batch_, units_);
  }
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end() - 1, position);
  if (it == bounds_.end() - 1 || *it != position) return units_;
  return static_cast<uint64_t>(it - bounds_.begin());
}

uint64_t BatchLayout::End(uint64_t g) const {
  if (!bounds_.empty()) return bounds_[g + 1];
  return std::min(begin_ + (g + 1) * batch_, end_);
}

}  // namespace libshard
