// StepSequence: one rank's steps of one epoch, the only view of the order that the loader's
// pipeline has. The read scheduler (loader/read_scheduler.h) walks it to create items in step
// order, the batch consumer (loader/batch_consumer.h) to cut them into batches and to advance
// LoaderState::position, and the loader's state() to ask for the epoch's cursor. The one factory
// from an order to its sequence is StepFactory (loader/step_factory.h); each kind of order is one
// implementation of this interface:
//   - PlannedSteps (below): GlobalOrder, an EpochPlan (docs/ORDER.md §1-§4);
//   - NodeLocalSteps, RemainderSteps (loader/node_steps.h): NodeLocalOrder (§5);
//   - CallerSteps (loader/caller_steps.h): CallerOrder (§6);
//   - FollowSteps (loader/follow_order.h): FollowOrder's follow epoch (§7);
//   - AnnouncedSteps (loader/announced_steps.h): the read-ahead's announced order
//     (libshard/read_ahead.h), which grows and whose steps a caller may pass over.
// Immutable once made, and every method const and thread-safe, except AnnouncedSteps, which
// changes only under ItemQueue::mu, which whoever reads it (the read scheduler) holds.
#pragma once

#include <cstdint>
#include <vector>

#include "libshard/loader.h"
#include "loader/order.h"

namespace libshard {

class StepSequence {
 public:
  virtual ~StepSequence() = default;

  // Steps (batches, or samples in single-sample mode) this rank gets from the epoch's start
  // position to its end. Identical on every rank.
  virtual uint64_t steps() const = 0;
  // Steps this rank gets in the whole epoch, from position 0 (len(loader) after a resume).
  virtual uint64_t epoch_steps() const = 0;
  // Samples of step k (< steps()), in delivery order.
  virtual uint64_t StepSize(uint64_t k) const = 0;
  // Appends the dataset indices of step k (< steps()) to `out`, in delivery order; never none.
  virtual void AppendStepSamples(uint64_t k, std::vector<uint64_t>* out) const = 0;
  // LoaderState::position once every rank has consumed its steps 0..k.
  virtual uint64_t PositionAfter(uint64_t k) const = 0;
  // LoaderState::cursor once this rank has consumed `consumed` of steps() (the order's kind and
  // its own fields: seed, version, bucketing, node progress, digest, follow window).
  virtual OrderCursor Cursor(uint64_t consumed) const = 0;
  // The first step at or after k that is still wanted: the read scheduler starts no step
  // before it that it has not started (a caller passed it over). k for every order but the
  // read-ahead's.
  virtual uint64_t NextWanted(uint64_t k) const { return k; }
};

// GlobalOrder's epoch: an EpochPlan of docs/ORDER.md §1-§4.
class PlannedSteps final : public StepSequence {
 public:
  explicit PlannedSteps(EpochPlan plan) : plan_(std::move(plan)) {}

  uint64_t steps() const override { return plan_.batches_for_rank(); }
  uint64_t epoch_steps() const override { return plan_.epoch_batches_for_rank(); }
  uint64_t StepSize(uint64_t k) const override { return plan_.BatchSamples(k).size(); }
  void AppendStepSamples(uint64_t k, std::vector<uint64_t>* out) const override {
    plan_.AppendBatchSamples(k, out);
  }
  uint64_t PositionAfter(uint64_t k) const override { return plan_.PositionAfter(k); }
  OrderCursor Cursor(uint64_t) const override {
    return GlobalCursor{plan_.options().seed, plan_.options().order, BucketingOf(plan_.options())};
  }

  const EpochPlan& plan() const { return plan_; }

 private:
  EpochPlan plan_;
};

}  // namespace libshard
