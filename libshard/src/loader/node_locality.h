// NodeLocality: the StreamingLoader's part of the node-local order (docs/ORDER.md §5): which
// node this rank is on (ResolveNodes), the samples each node reads (computed once per node
// count: it does not change with the epoch) and the StepSequence of each epoch, including an
// epoch resumed from a version 3 state on the same or on other nodes (§5.4).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/status.h"
#include "libshard/world.h"
#include "loader/node_assignment.h"
#include "loader/node_steps.h"
#include "loader/order.h"
#include "loader/step_sequence.h"

namespace libshard {

class NodeLocality {
 public:
  // Needed when options.order is a NodeLocalOrder, or options.resume is a state of a node-local
  // epoch (whose epoch must end in its own order). `environment`: the launcher's variables
  // (ResolveNodes).
  static bool Needed(const LoaderOptions& options);
  static Result<std::unique_ptr<NodeLocality>> Make(const Dataset& dataset,
                                                    const LoaderOptions& options,
                                                    const Environment& environment);
  // Make over the samples' spans (DatasetSpans) instead of a dataset (tests).
  static Result<std::unique_ptr<NodeLocality>> MakeFromSpans(std::vector<SampleSpan> spans,
                                                             const LoaderOptions& options,
                                                             const Environment& environment);

  // The steps of the epoch `plan` describes for this rank, or null when the loader's own order
  // (PlannedSteps) serves it. `resume`: the state the epoch resumes from (Create), null for an
  // epoch started from its beginning (SetEpoch). `lengths` as EpochPlan::Make takes them.
  Result<std::shared_ptr<const StepSequence>> EpochSteps(
      const PlanOptions& plan, const LoaderState* resume,
      const std::shared_ptr<const std::vector<uint64_t>>& lengths);

  // Whether a resume from `state` continues each node where it was (a node-local loader, a state
  // of a node-local epoch on the same nodes and ranks per node): then the state's length-aware
  // batching must be the loader's too.
  bool ContinuesOnSameNodes(const LoaderState& state) const;
  const Nodes& nodes() const { return nodes_; }
  // The samples each node reads with this loader's node count (kNode only).
  const NodeAssignment* assignment() const { return current_.get(); }
  // The bytes this rank's node caches with blocks of `block` bytes: the whole blocks its share
  // touches (kNode only; 0 otherwise).
  Result<uint64_t> NodeCachedBytes(uint64_t block) const;

 private:
  NodeLocality() = default;
  Result<std::shared_ptr<const NodeAssignment>> AssignmentFor(uint32_t nodes, uint64_t seed,
                                                              bool shuffle);

  bool node_local_ = false;  // options.order is a NodeLocalOrder
  uint64_t seed_ = 0;        // of the assignment (the state's when resumed)
  bool shuffle_ = true;
  Nodes nodes_;
  std::vector<SampleSpan> spans_;
  std::shared_ptr<const NodeAssignment> current_;  // for nodes_.nodes and the loader's seed
};

}  // namespace libshard
