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

BatchLayout BatchLayout::Tokens(std::span<const uint64_t> perm, std::span<const uint64_t> lengths,
                                uint64_t begin, uint64_t max_tokens, uint64_t max_units) {
  return Tokens(
      perm.size(), [perm](uint64_t i) { return perm[i]; }, lengths, begin, max_tokens,
      max_units);
}

BatchLayout BatchLayout::Tokens(uint64_t end, const std::function<uint64_t(uint64_t)>& sample_at,
                                std::span<const uint64_t> lengths, uint64_t begin,
                                uint64_t max_tokens, uint64_t max_units) {
  BatchLayout layout;
  layout.begin_ = std::min(begin, end);
  layout.end_ = end;
  layout.bounds_.push_back(layout.begin_);
  uint64_t tokens = 0;  // of the open unit [bounds_.back(), i)
  for (uint64_t i = layout.begin_; i < end && layout.units_ < max_units; ++i) {
    const uint64_t len = lengths[sample_at(i)];
    const bool open_unit_nonempty = i > layout.bounds_.back();
    // `len > max_tokens - tokens` is `tokens + len > max_tokens` without overflow.
    if (open_unit_nonempty && len > max_tokens - tokens) {
      layout.bounds_.push_back(i);
      ++layout.units_;
      tokens = 0;
      if (layout.units_ == max_units) break;
    }
    if (len > max_tokens) {  // oversized: a unit of its own
      layout.bounds_.push_back(i + 1);
      ++layout.units_;
      tokens = 0;
      continue;
    }
    tokens += len;
  }
  if (layout.units_ < max_units && layout.bounds_.back() < end) {
    layout.bounds_.push_back(end);
    ++layout.units_;
  }
  layout.bounds_.shrink_to_fit();
  return layout;
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
