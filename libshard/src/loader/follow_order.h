// The follow order (docs/ORDER.md §7): the sequence of the first epoch of a dataset being
// written, over its arrival order (FORMAT.md §6.1), shuffled within windows of arrivals that grow
// 1, 2, 4, ... up to the shuffle window; cut into units, striped over ranks and counted in
// positions as ORDER.md §2-§4 do over P. Pure computation, no I/O, no threads.
//
// THE CONTRACT is docs/ORDER.md §7; tests/follow_order_test.cc pins its values. Resume depends
// on it never changing.
#pragma once

#include <cstdint>
#include <vector>

#include "libshard/loader.h"
#include "loader/step_sequence.h"

namespace libshard {

// What the follow epoch's sequence depends on.
struct FollowPlan {
  bool shuffle = true;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t window = 1;  // M >= 1 (FollowOrder::shuffle_window, FollowCursor::window)
  uint64_t rank = 0;
  uint64_t world_size = 1;
  uint64_t batch = 1;   // samples per unit: batch_size, 1 for single samples
  bool drop_last = false;
  uint64_t start_position = 0;  // p (LoaderState::position of a resume)
};

// ORDER.md §7.1's windows and S, §7.2's steps, for one rank.
class FollowSequence {
 public:
  explicit FollowSequence(const FollowPlan& plan) : plan_(plan) {}

  // Window w: its first position b_w and its capacity c_w = min(M, 2^w).
  uint64_t WindowStart(uint64_t w) const;
  uint64_t WindowCapacity(uint64_t w) const;
  // The window holding position i.
  uint64_t WindowOf(uint64_t i) const;
  // Positions of S decided by the first `arrived` arrivals: the end of the last complete window,
  // or `arrived` itself when the stream is complete (then `arrived` is N).
  uint64_t KnownPositions(uint64_t arrived, bool complete) const;
  // S[i], the arrival at position i; i must lie in a complete window (i < KnownPositions), and
  // `n` is N when the stream is complete, else anything >= the arrivals known.
  uint64_t At(uint64_t i, uint64_t n) const;

  // This rank's steps from the start position that `arrived` arrivals decide, counted from step
  // 0 (a prefix: step k known implies every earlier one is). With `complete`, every step of the
  // epoch: TotalSteps(arrived).
  uint64_t KnownSteps(uint64_t arrived, bool complete) const;
  // Steps from the start position, and from position 0 (len(loader)), of a stream of n samples.
  uint64_t TotalSteps(uint64_t n) const;
  uint64_t EpochSteps(uint64_t n) const;
  // Appends the arrival indices of step k (< KnownSteps) to `out`; `n` as for At.
  void AppendStepSamples(uint64_t k, uint64_t n, bool complete, std::vector<uint64_t>* out) const;
  // LoaderState::position once every rank has consumed its steps 0..k (ORDER.md §7.2).
  uint64_t PositionAfter(uint64_t k, uint64_t n, bool complete) const;

  const FollowPlan& plan() const { return plan_; }

 private:
  // Units from the start position a complete stream of n samples has (§2, §3).
  uint64_t Units(uint64_t n, uint64_t from) const;

  FollowPlan plan_;
};

// Steps [first, end) of a FollowSequence, as far as one snapshot of the followed dataset decides
// them (`arrived` samples, all of them when `complete`): the StepSequence of one of the follow
// epoch's StreamingLoaders (loader/follow_loader.h), made by StepFactory. Its step j is the
// order's step first + j; its states carry `cursor`.
class FollowSteps final : public StepSequence {
 public:
  FollowSteps(FollowSequence order, uint64_t first, uint64_t arrived, bool complete,
              FollowCursor cursor);

  uint64_t steps() const override { return end_ - first_; }
  // The epoch's steps from position 0 once complete; the steps known so far otherwise.
  uint64_t epoch_steps() const override;
  uint64_t StepSize(uint64_t j) const override;
  void AppendStepSamples(uint64_t j, std::vector<uint64_t>* out) const override;
  uint64_t PositionAfter(uint64_t j) const override;
  OrderCursor Cursor(uint64_t) const override { return cursor_; }

 private:
  FollowSequence order_;
  FollowCursor cursor_;
  uint64_t first_;
  uint64_t end_;
  uint64_t arrived_;
  bool complete_;
};

}  // namespace libshard
