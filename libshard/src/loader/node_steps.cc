// docs/ORDER.md §5.3 and §5.4.
#include "loader/node_steps.h"

#include <algorithm>
#include <string>
#include <utility>

namespace libshard {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Node k's lengths: lengths[A_k[i]], or null when the plan needs none.
std::shared_ptr<const std::vector<uint64_t>> NodeLengths(
    const std::vector<uint64_t>& samples,
    const std::shared_ptr<const std::vector<uint64_t>>& lengths) {
  if (lengths == nullptr) return nullptr;
  auto out = std::make_shared<std::vector<uint64_t>>();
  out->reserve(samples.size());
  for (const uint64_t i : samples) out->push_back((*lengths)[i]);
  return out;
}

}  // namespace

Result<std::shared_ptr<const NodeLocalEpoch>> NodeLocalEpoch::Make(
    std::shared_ptr<const NodeAssignment> assignment,
    const std::shared_ptr<const std::vector<uint64_t>>& lengths, const PlanOptions& base,
    uint32_t local_world_size) {
  if (local_world_size == 0)
    return Status::InvalidArgument("the node-local order needs at least one rank per node");
  const uint32_t nodes = assignment->nodes;
  for (uint32_t k = 0; k < nodes; ++k) {
    if (assignment->samples[k]->empty()) {
      uint64_t total = 0;
      for (const auto& a : assignment->samples) total += a->size();
      return Status::InvalidArgument(
          "the node-local order has no sample for node " + std::to_string(k) + " of " +
          std::to_string(nodes) + ": the dataset's " + std::to_string(total) +
          " samples fall into " + std::to_string(assignment->groups) + " groups of up to " +
          std::to_string(assignment->group_bytes >> 20) +
          " MiB (docs/ORDER.md §5.1), fewer than the nodes; use locality='global' for a "
          "dataset this small");
    }
  }
  auto epoch = std::shared_ptr<NodeLocalEpoch>(new NodeLocalEpoch());
  epoch->assignment_ = std::move(assignment);
  epoch->seed_ = base.seed;
  epoch->local_world_size_ = local_world_size;
  PlanOptions node = base;
  node.rank = 0;
  node.world_size = local_world_size;
  node.order = kOrderV2;
  node.start_position = 0;
  node.steps = 0;
  // Per node: its lengths, and its natural step count (§3 within the node).
  std::vector<std::shared_ptr<const std::vector<uint64_t>>> node_lengths(nodes);
  std::vector<uint64_t> natural(nodes);
  for (uint32_t k = 0; k < nodes; ++k) {
    const std::vector<uint64_t>& samples = *epoch->assignment_->samples[k];
    node_lengths[k] = NodeLengths(samples, lengths);
    node.seed = NodeSeed(base.seed, k);
    LIBSHARD_ASSIGN_OR_RETURN(EpochPlan plan,
                              EpochPlan::MakeSharingLengths(samples.size(), node_lengths[k], node));
    const uint64_t units = plan.global_units();
    natural[k] = base.drop_last ? units / local_world_size : CeilDiv(units, local_world_size);
  }
  epoch->steps_ = base.drop_last ? *std::min_element(natural.begin(), natural.end())
                                 : *std::max_element(natural.begin(), natural.end());
  if (epoch->steps_ == 0) return epoch;  // nothing to serve (an empty epoch with drop_last)
  node.steps = epoch->steps_;
  epoch->plans_.reserve(nodes);
  for (uint32_t k = 0; k < nodes; ++k) {
    node.seed = NodeSeed(base.seed, k);
    LIBSHARD_ASSIGN_OR_RETURN(
        EpochPlan plan, EpochPlan::MakeSharingLengths(epoch->assignment_->samples[k]->size(),
                                                      node_lengths[k], node));
    epoch->plans_.push_back(std::move(plan));
  }
  return std::shared_ptr<const NodeLocalEpoch>(std::move(epoch));
}

uint64_t NodeLocalEpoch::NodePosition(uint32_t node, uint64_t s) const {
  if (s == 0) return 0;
  if (plans_.empty()) return assignment_->samples[node]->size();
  return plans_[node].PositionAfter(s - 1);
}

uint64_t NodeLocalEpoch::Position(uint64_t s) const {
  uint64_t sum = 0;
  for (uint32_t k = 0; k < nodes(); ++k) sum += NodePosition(k, s);
  return sum;
}

uint64_t NodeLocalEpoch::NodeEnd(uint32_t node) const {
  if (plans_.empty()) return 0;
  return plans_[node].UnitBegin(steps_ * local_world_size_);
}

uint64_t NodeLocalEpoch::SampleAt(uint32_t node, uint64_t i) const {
  return (*assignment_->samples[node])[plans_[node].SampleAt(i)];
}

NodeLocalSteps::NodeLocalSteps(std::shared_ptr<const NodeLocalEpoch> epoch, uint32_t node,
                               uint32_t local, uint64_t start)
    : epoch_(std::move(epoch)),
      plan_(epoch_->steps() > 0 ? std::optional<EpochPlan>(epoch_->NodePlan(node, local))
                                : std::nullopt),
      samples_(&epoch_->NodeSamples(node)),
      start_(start) {}

uint64_t NodeLocalSteps::StepSize(uint64_t k) const {
  return plan_->BatchSamples(start_ + k).size();
}

void NodeLocalSteps::AppendStepSamples(uint64_t k, std::vector<uint64_t>* out) const {
  const size_t first = out->size();
  plan_->AppendBatchSamples(start_ + k, out);
  for (size_t i = first; i < out->size(); ++i) (*out)[i] = (*samples_)[(*out)[i]];
}

uint64_t NodeLocalSteps::PositionAfter(uint64_t k) const {
  return epoch_->Position(start_ + k + 1);
}

OrderCursor NodeLocalSteps::Cursor(uint64_t consumed) const {
  return NodeLocalCursor{epoch_->seed(), epoch_->bucketing(),
                         {epoch_->nodes(), epoch_->local_world_size(), start_ + consumed}};
}

Result<std::shared_ptr<const RemainderSteps>> RemainderSteps::Make(
    const NodeLocalEpoch& interrupted, const NodeProgress& saved, uint64_t offset,
    const std::shared_ptr<const std::vector<uint64_t>>& lengths, PlanOptions plan) {
  auto rest = std::make_shared<std::vector<uint64_t>>();
  uint64_t base = 0;
  uint64_t total = 0;
  for (uint32_t k = 0; k < interrupted.nodes(); ++k) {
    const uint64_t from = interrupted.NodePosition(k, saved.steps);
    const uint64_t end = std::max(from, interrupted.NodeEnd(k));
    base += from;
    for (uint64_t i = from; i < end; ++i) rest->push_back(interrupted.SampleAt(k, i));
  }
  total = interrupted.Position(interrupted.steps());
  if (offset > rest->size())
    return Status::InvalidArgument(
        "resume position " + std::to_string(base + offset) + " is past the end of the epoch's " +
        "node-local order (" + std::to_string(base + rest->size()) +
        " samples): the state was saved for another dataset or seed; resume with the matching "
        "dataset or start the epoch at position 0");
  std::shared_ptr<const std::vector<uint64_t>> rest_lengths;
  if (lengths != nullptr) {
    auto l = std::make_shared<std::vector<uint64_t>>();
    l->reserve(rest->size());
    for (const uint64_t i : *rest) l->push_back((*lengths)[i]);
    rest_lengths = std::move(l);
  }
  plan.shuffle = false;
  plan.bucket_window = 0;
  plan.order = kOrderV2;
  plan.start_position = offset;
  plan.steps = 0;
  LIBSHARD_ASSIGN_OR_RETURN(EpochPlan made,
                            EpochPlan::MakeSharingLengths(rest->size(), rest_lengths, plan));
  auto steps = std::shared_ptr<RemainderSteps>(new RemainderSteps(std::move(made)));
  steps->rest_ = std::move(rest);
  steps->base_ = base;
  steps->total_ = total;
  steps->seed_ = interrupted.seed();
  steps->saved_ = saved;
  return std::shared_ptr<const RemainderSteps>(std::move(steps));
}

void RemainderSteps::AppendStepSamples(uint64_t k, std::vector<uint64_t>* out) const {
  const size_t first = out->size();
  plan_.AppendBatchSamples(k, out);
  for (size_t i = first; i < out->size(); ++i) (*out)[i] = (*rest_)[(*out)[i]];
}

OrderCursor RemainderSteps::Cursor(uint64_t) const {
  return NodeLocalCursor{seed_, {}, saved_};  // R has no §2a
}

}  // namespace libshard
