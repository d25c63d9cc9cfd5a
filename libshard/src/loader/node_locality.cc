#include "loader/node_locality.h"

#include <string>
#include <utility>

namespace libshard {

bool NodeLocality::Needed(const LoaderOptions& options) {
  return options.locality == Locality::kNode || (options.resume && options.resume->order == 3);
}

Result<std::unique_ptr<NodeLocality>> NodeLocality::Make(const Dataset& dataset,
                                                         const LoaderOptions& options,
                                                         const Environment& environment) {
  LIBSHARD_ASSIGN_OR_RETURN(std::vector<SampleSpan> spans, DatasetSpans(dataset));
  return MakeFromSpans(std::move(spans), options, environment);
}

Result<std::unique_ptr<NodeLocality>> NodeLocality::MakeFromSpans(
    std::vector<SampleSpan> spans, const LoaderOptions& options, const Environment& environment) {
  std::unique_ptr<NodeLocality> n(new NodeLocality());
  n->node_local_ = options.locality == Locality::kNode;
  n->spans_ = std::move(spans);
  if (n->node_local_) {
    NodesRequest request;
    if (options.nodes > 0) request.nodes = options.nodes;
    if (options.node_rank != kAutoNodeRank) request.node_rank = options.node_rank;
    LIBSHARD_ASSIGN_OR_RETURN(n->nodes_,
                              ResolveNodes(options.rank, options.world_size, request, environment));
    const uint64_t seed = options.resume ? options.resume->seed : options.seed;
    n->seed_ = seed;
    n->shuffle_ = options.shuffle;
    LIBSHARD_ASSIGN_OR_RETURN(n->current_, n->AssignmentFor(n->nodes_.nodes, seed,
                                                            options.shuffle));
  }
  return n;
}

Result<std::shared_ptr<const NodeAssignment>> NodeLocality::AssignmentFor(uint32_t nodes,
                                                                          uint64_t seed,
                                                                          bool shuffle) {
  if (current_ != nullptr && current_->nodes == nodes) return current_;
  LIBSHARD_ASSIGN_OR_RETURN(NodeAssignment a, AssignToNodes(spans_, seed, nodes, shuffle));
  return std::make_shared<const NodeAssignment>(std::move(a));
}

Result<uint64_t> NodeLocality::NodeCachedBytes(uint64_t block) const {
  if (!node_local_ || current_ == nullptr) return uint64_t{0};
  LIBSHARD_ASSIGN_OR_RETURN(NodeAssignment a,
                            AssignToNodes(spans_, seed_, nodes_.nodes, shuffle_, block));
  return nodes_.node_rank < a.cached_bytes.size() ? a.cached_bytes[nodes_.node_rank] : 0;
}

bool NodeLocality::ContinuesOnSameNodes(const LoaderState& state) const {
  return node_local_ && state.order == 3 && state.locality.nodes == nodes_.nodes &&
         state.locality.local_world_size == nodes_.local_world_size;
}

Result<std::shared_ptr<const StepSequence>> NodeLocality::EpochSteps(
    const PlanOptions& plan, const LoaderState* resume,
    const std::shared_ptr<const std::vector<uint64_t>>& lengths) {
  if (resume != nullptr && resume->order == 3 && resume->position > 0) {
    // §5.4: the interrupted epoch, as it was planned on its own nodes.
    const LoaderState::Locality& saved = resume->locality;
    LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<const NodeAssignment> old,
                              AssignmentFor(saved.nodes, plan.seed, plan.shuffle));
    LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<const NodeLocalEpoch> epoch,
                              NodeLocalEpoch::Make(std::move(old), lengths, plan,
                                                   saved.local_world_size));
    if (saved.steps > epoch->steps())
      return Status::InvalidArgument(
          "resume: the state says every rank took " + std::to_string(saved.steps) +
          " steps of epoch " + std::to_string(plan.epoch) + ", which has " +
          std::to_string(epoch->steps()) + " on " + std::to_string(saved.nodes) + " nodes of " +
          std::to_string(saved.local_world_size) + " ranks: it was saved for another dataset "
          "or other batching; resume with those, or start the epoch at position 0");
    const uint64_t base = epoch->Position(saved.steps);
    if (resume->position < base)
      return Status::InvalidArgument(
          "resume: the state's position " + std::to_string(resume->position) + " is before " +
          "the " + std::to_string(base) + " samples its " + std::to_string(saved.steps) +
          " steps consumed: it was saved for another dataset; resume with that dataset, or "
          "start the epoch at position 0");
    if (resume->position == base && ContinuesOnSameNodes(*resume))
      return std::shared_ptr<const StepSequence>(std::make_shared<NodeLocalSteps>(
          std::move(epoch), nodes_.node_rank, nodes_.local_rank, saved.steps));
    LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<const RemainderSteps> rest,
                              RemainderSteps::Make(*epoch, saved, resume->position - base,
                                                   lengths, plan));
    return std::shared_ptr<const StepSequence>(std::move(rest));
  }
  if (resume != nullptr && resume->order != 3 && resume->position > 0)
    return std::shared_ptr<const StepSequence>();  // §5.4: a v1/v2 epoch ends in its own order
  if (!node_local_) return std::shared_ptr<const StepSequence>();
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<const NodeAssignment> assignment,
                            AssignmentFor(nodes_.nodes, plan.seed, plan.shuffle));
  LIBSHARD_ASSIGN_OR_RETURN(
      std::shared_ptr<const NodeLocalEpoch> epoch,
      NodeLocalEpoch::Make(std::move(assignment), lengths, plan, nodes_.local_world_size));
  return std::shared_ptr<const StepSequence>(
      std::make_shared<NodeLocalSteps>(std::move(epoch), nodes_.node_rank, nodes_.local_rank, 0));
}

}  // namespace libshard
