#include "loader/node_locality.h"

#include <string>
#include <utility>

namespace libshard {

bool NodeLocality::Needed(const LoaderOptions& options) {
  return options.order.kind() == OrderKind::kNodeLocal ||
         (options.resume && options.resume->kind() == OrderKind::kNodeLocal);
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
  const Order order = ResumedOrder(options.order, options.resume ? &*options.resume : nullptr);
  const NodeLocalOrder* node_local = order.get<NodeLocalOrder>();
  n->node_local_ = node_local != nullptr;
  n->spans_ = std::move(spans);
  if (node_local != nullptr) {
    NodesRequest request;
    if (node_local->nodes > 0) request.nodes = node_local->nodes;
    if (node_local->node_rank != kAutoNodeRank) request.node_rank = node_local->node_rank;
    const OrderRanks ranks = OrderRanksOf(options);
    LIBSHARD_ASSIGN_OR_RETURN(n->nodes_,
                              ResolveNodes(ranks.rank, ranks.world_size, request, environment));
    n->seed_ = node_local->seed;
    n->shuffle_ = node_local->shuffle;
    LIBSHARD_ASSIGN_OR_RETURN(n->current_,
                              n->AssignmentFor(n->nodes_.nodes, n->seed_, n->shuffle_));
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
  const NodeLocalCursor* c = state.get<NodeLocalCursor>();
  return node_local_ && c != nullptr && c->progress.nodes == nodes_.nodes &&
         c->progress.local_world_size == nodes_.local_world_size;
}

Result<std::shared_ptr<const StepSequence>> NodeLocality::EpochSteps(
    const PlanOptions& plan, const LoaderState* resume,
    const std::shared_ptr<const std::vector<uint64_t>>& lengths) {
  const NodeLocalCursor* cursor = resume != nullptr ? resume->get<NodeLocalCursor>() : nullptr;
  if (cursor != nullptr && resume->position > 0) {
    // §5.4: the interrupted epoch, as it was planned on its own nodes.
    const NodeProgress& saved = cursor->progress;
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
  if (resume != nullptr && cursor == nullptr && resume->position > 0)
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
