#include "loader/follow_order.h"

#include <algorithm>
#include <bit>

#include "loader/order.h"
#include "loader/order_random.h"

namespace libshard {
namespace {

using order_random::Mix;

inline constexpr uint64_t kFollowSalt = 0x666F6C6C6F772121ull;  // "follow!!"

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

// Windows 0..J-1 have capacity 2^w and start at 2^w - 1; from J (the first w with 2^w >= M) on,
// capacity M, starting at 2^J - 1 + (w - J) M.
uint64_t FollowSequence::WindowCapacity(uint64_t w) const {
  return w < 63 ? std::min<uint64_t>(plan_.window, uint64_t{1} << w) : plan_.window;
}

uint64_t FollowSequence::WindowStart(uint64_t w) const {
  const uint64_t j = std::bit_width(plan_.window - 1);  // smallest j with 2^j >= M
  if (w <= j) return (uint64_t{1} << w) - 1;
  return (uint64_t{1} << j) - 1 + (w - j) * plan_.window;
}

uint64_t FollowSequence::WindowOf(uint64_t i) const {
  const uint64_t j = std::bit_width(plan_.window - 1);
  const uint64_t doubling_end = (uint64_t{1} << j) - 1;  // start of window j
  if (i < doubling_end) return std::bit_width(i + 1) - 1;
  return j + (i - doubling_end) / plan_.window;
}

uint64_t FollowSequence::KnownPositions(uint64_t arrived, bool complete) const {
  if (complete) return arrived;
  return WindowStart(WindowOf(arrived));
}

uint64_t FollowSequence::At(uint64_t i, uint64_t n) const {
  if (!plan_.shuffle || plan_.window == 1) return i;
  const uint64_t w = WindowOf(i);
  const uint64_t b = WindowStart(w);
  const uint64_t m = std::min(WindowCapacity(w), n - b);
  if (m <= 1) return i;
  const uint64_t key = Mix(plan_.epoch ^ Mix(w + kFollowSalt));
  return b + ShuffleV2(m, plan_.seed, key).At(i - b);
}

uint64_t FollowSequence::Units(uint64_t n, uint64_t from) const {
  if (n <= from) return 0;
  const uint64_t rem = n - from;
  return plan_.drop_last ? rem / plan_.batch : CeilDiv(rem, plan_.batch);
}

uint64_t FollowSequence::TotalSteps(uint64_t n) const {
  const uint64_t g = Units(n, plan_.start_position);
  return plan_.drop_last ? g / plan_.world_size : CeilDiv(g, plan_.world_size);
}

uint64_t FollowSequence::EpochSteps(uint64_t n) const {
  const uint64_t g = Units(n, 0);
  return plan_.drop_last ? g / plan_.world_size : CeilDiv(g, plan_.world_size);
}

uint64_t FollowSequence::KnownSteps(uint64_t arrived, bool complete) const {
  if (complete) return TotalSteps(arrived);
  const uint64_t known = KnownPositions(arrived, false);
  const uint64_t p = plan_.start_position;
  const uint64_t units = known > p ? (known - p) / plan_.batch : 0;  // whole units known
  const uint64_t w = plan_.world_size;
  if (plan_.drop_last) return units / w;  // step k needs the round's last unit, (k+1)W - 1
  return units > plan_.rank ? (units - plan_.rank - 1) / w + 1 : 0;  // unit kW + r
}

void FollowSequence::AppendStepSamples(uint64_t k, uint64_t n, bool complete,
                                    std::vector<uint64_t>* out) const {
  const uint64_t p = plan_.start_position;
  const uint64_t b = plan_.batch;
  uint64_t g = k * plan_.world_size + plan_.rank;
  uint64_t begin = 0;
  uint64_t end = 0;
  const uint64_t units = complete ? Units(n, p) : UINT64_MAX;
  if (g < units) {
    begin = p + g * b;
    end = complete ? std::min(begin + b, n) : begin + b;
  } else {
    // Padding (ORDER.md §3): the units from position 0, cyclically.
    const uint64_t from0 = Units(n, 0);
    if (from0 == 0) return;
    g = (g - units) % from0;
    begin = g * b;
    end = std::min(begin + b, n);
  }
  for (uint64_t i = begin; i < end; ++i) out->push_back(At(i, n));
}

uint64_t FollowSequence::PositionAfter(uint64_t k, uint64_t n, bool complete) const {
  if (complete && k + 1 >= TotalSteps(n)) return n;
  const uint64_t pos = plan_.start_position + (k + 1) * plan_.world_size * plan_.batch;
  return complete ? std::min(pos, n) : pos;
}

FollowSteps::FollowSteps(FollowSequence order, uint64_t first, uint64_t arrived, bool complete,
                         FollowCursor cursor)
    : order_(std::move(order)),
      cursor_(cursor),
      first_(first),
      arrived_(arrived),
      complete_(complete) {
  end_ = std::max(first_, order_.KnownSteps(arrived, complete));
}

uint64_t FollowSteps::epoch_steps() const {
  if (complete_) return order_.EpochSteps(arrived_);
  return end_;
}

uint64_t FollowSteps::StepSize(uint64_t j) const {
  std::vector<uint64_t> samples;
  AppendStepSamples(j, &samples);
  return samples.size();
}

void FollowSteps::AppendStepSamples(uint64_t j, std::vector<uint64_t>* out) const {
  order_.AppendStepSamples(first_ + j, arrived_, complete_, out);
}

uint64_t FollowSteps::PositionAfter(uint64_t j) const {
  return order_.PositionAfter(first_ + j, arrived_, complete_);
}

}  // namespace libshard
