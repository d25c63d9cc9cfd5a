// StepFactory: the one place an order (libshard/order.h) becomes an epoch's StepSequence
// (loader/step_sequence.h), for the StreamingLoader and the follow loader:
//   GlobalOrder     PlannedSteps (docs/ORDER.md §1-§4)
//   NodeLocalOrder  NodeLocalSteps, or RemainderSteps for an epoch resumed on other nodes (§5)
//   CallerOrder     CallerSteps of the steps the caller gave (§6)
//   FollowOrder     FollowSteps of what one snapshot of the dataset being written decides (§7)
// An epoch resumed from a state of the global or the node-local order ends in the state's own
// order, whichever of the two the loader has (§5.4); the epochs after it are the loader's.
//
// What every kind shares comes from the loader's options once (PlanBase: the ranks, the
// batching, drop_last); what a state decides of the order (its seed, version, follow window) is
// the loader's for every epoch (ResumedOrder). Not thread-safe: the loader's consumer thread
// calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/status.h"
#include "libshard/world.h"
#include "loader/follow_order.h"
#include "loader/node_locality.h"
#include "loader/order.h"
#include "loader/step_sequence.h"

namespace libshard {

// FollowOrder: one snapshot of the follow epoch (loader/follow_loader.h). The epoch starts at
// `start_position` (a resume's position, else 0); the snapshot's steps run from the epoch's step
// `first` to the last one that `arrived` arrivals decide (all of them when `complete`).
struct FollowSnapshot {
  uint64_t start_position = 0;
  uint64_t first = 0;
  uint64_t arrived = 0;
  bool complete = false;
};

// Where an epoch starts.
struct EpochStart {
  uint64_t epoch = 0;
  // The state the epoch continues, a state of epoch `epoch` (null: from its beginning). The
  // global and node-local orders continue at its position; a caller's order continues at it
  // when it is inside the epoch, and only if its digest matches the steps given.
  const LoaderState* resume = nullptr;
  // CallerOrder: this rank's steps of the epoch, already checked (ValidateEpochSteps); null
  // before the caller gave any (an empty epoch whose state keeps the resume's digest).
  std::shared_ptr<const EpochSteps> given;
  // FollowOrder: the snapshot.
  FollowSnapshot snapshot;
};

class StepFactory {
 public:
  // Made once per loader from its resolved options (ResolveLoaderOptions): their order and
  // resume, ranks and batching. `dataset` and `lengths` (every sample's length clipped to
  // max_len; null when neither max_tokens nor bucketing needs them) are what the global and the
  // node-local order plan over; the follow loader, whose datasets are snapshots, passes null.
  // Resolves what the order needs beyond one epoch: the node-local order's nodes (ResolveNodes
  // over `environment`) and assignment. InvalidArgument when options.resume is a state this
  // order cannot continue (CheckResumeFits), or as ResolveNodes.
  static Result<std::unique_ptr<StepFactory>> Make(
      const Dataset* dataset, const LoaderOptions& options,
      std::shared_ptr<const std::vector<uint64_t>> lengths, const Environment& environment);

  // This rank's steps of one epoch. InvalidArgument when a resume inside its epoch asks for
  // other length-aware batching than the loader's, when a caller's steps do not match the
  // resumed state (digest, position), or as EpochPlan::Make and NodeLocalEpoch::Make.
  Result<std::shared_ptr<const StepSequence>> Steps(const EpochStart& start);

  // FollowOrder: the follow epoch `epoch`'s sequence from `start_position` (ORDER.md §7).
  FollowSequence FollowEpoch(uint64_t epoch, uint64_t start_position) const;

  // The order every epoch follows: the loader's, with what its resume state decides.
  const Order& order() const { return order_; }
  // The node-local order's nodes and assignment (also of a loader finishing a node-local
  // epoch it resumed); null otherwise.
  const NodeLocality* node_locality() const { return node_locality_.get(); }

 private:
  StepFactory() = default;
  Result<std::shared_ptr<const StepSequence>> PlannedEpoch(const EpochStart& start);
  Result<std::shared_ptr<const StepSequence>> CallerEpoch(const EpochStart& start) const;
  // InvalidArgument when a resume inside an epoch batched by length asks for other batching.
  Status CheckResumeBucketing(const PlanOptions& plan, const LoaderState& resume) const;

  Order order_;
  PlanOptions base_;
  uint64_t samples_ = 0;
  std::shared_ptr<const std::vector<uint64_t>> lengths_;
  std::unique_ptr<NodeLocality> node_locality_;
};

// InvalidArgument naming `resume` when a loader of `order` cannot continue it: a caller's state
// in a loader with its own order or the reverse, a follow epoch's state outside follow mode.
// (The global and node-local orders continue each other's epochs: ORDER.md §5.4.)
[[nodiscard]] Status CheckResumeFits(const Order& order, const LoaderState& resume);

// What a loader resuming `resume` has that its origin (LoaderState::origin, state version 2)
// records: the dataset at `path` with identity digest `identity` and `samples` samples (either
// unset: not known yet, not checked), and the order's `shuffle`. InvalidArgument naming the first
// that differs ("identity", "samples" for a state inside its epoch, "shuffle"), with both values
// and what to do; what the state does not record is not checked.
[[nodiscard]] Status CheckResumeOrigin(const LoaderState& resume, const std::string& path,
                                       std::optional<uint64_t> identity,
                                       std::optional<uint64_t> samples, bool shuffle);

}  // namespace libshard
