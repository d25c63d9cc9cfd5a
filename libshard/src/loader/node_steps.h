// The node-local order's epochs (docs/ORDER.md §5.3 and §5.4) as the loader's pipeline sees
// them (loader/step_sequence.h):
//   - NodeLocalEpoch: one epoch of every node, each node's units planned over its own samples;
//   - NodeLocalSteps: one rank's steps of it (the rank's node, its local rank), from a step on;
//   - RemainderSteps: the rest of an epoch interrupted on other nodes or ranks per node, spread
//     over all ranks of the new world (§5.4).
// Pure computation, no I/O; immutable once made, thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "libshard/loader.h"
#include "libshard/status.h"
#include "loader/node_assignment.h"
#include "loader/order.h"
#include "loader/step_sequence.h"

namespace libshard {

class NodeLocalEpoch {
 public:
  // `base`: the epoch's shuffle, seed, epoch, batching, bucketing and drop_last (its rank,
  // world_size, order and start_position are not used). `lengths`: every sample's length
  // (clipped to max_len), needed with max_tokens or bucket_window, else may be null.
  // `local_world_size`: ranks per node (>= 1). InvalidArgument when a node has no sample, or
  // as EpochPlan::Make.
  static Result<std::shared_ptr<const NodeLocalEpoch>> Make(
      std::shared_ptr<const NodeAssignment> assignment,
      const std::shared_ptr<const std::vector<uint64_t>>& lengths, const PlanOptions& base,
      uint32_t local_world_size);

  uint32_t nodes() const { return assignment_->nodes; }
  uint32_t local_world_size() const { return local_world_size_; }
  // S: steps every rank takes in the epoch.
  uint64_t steps() const { return steps_; }
  // G_k: node k's units (§2 over Q_k); units past it are padding. Requires steps() > 0.
  uint64_t NodeUnits(uint32_t node) const { return plans_[node].global_units(); }
  // Node k's plan for local rank `local` (S steps over positions [0, n_k) of its sequence) and
  // its samples A_k, which map the plan's positions to dataset indices. Requires steps() > 0.
  EpochPlan NodePlan(uint32_t node, uint32_t local) const { return plans_[node].ForRank(local); }
  const std::vector<uint64_t>& NodeSamples(uint32_t node) const {
    return *assignment_->samples[node];
  }
  // P_k(s): positions of node k's sequence consumed once every rank has taken s steps (n_k
  // once s = S).
  uint64_t NodePosition(uint32_t node, uint64_t s) const;
  // Σ_k P_k(s): LoaderState::position after s steps of every rank.
  uint64_t Position(uint64_t s) const;
  // E_k: the end of node k's served positions (n_k; with drop_last the end of its last unit
  // below S x L).
  uint64_t NodeEnd(uint32_t node) const;
  // Q_k[i] (or S_k[i] under §2a): the dataset index at position i of node k's sequence.
  uint64_t SampleAt(uint32_t node, uint64_t i) const;
  EpochBucketing bucketing() const {
    return plans_.empty() ? EpochBucketing{} : BucketingOf(plans_.front().options());
  }
  uint64_t seed() const { return seed_; }  // the order's (base.seed), not a node's

 private:
  NodeLocalEpoch() = default;
  std::shared_ptr<const NodeAssignment> assignment_;
  uint64_t seed_ = 0;
  uint32_t local_world_size_ = 1;
  uint64_t steps_ = 0;
  std::vector<EpochPlan> plans_;  // node k's plan (local rank 0), S steps, over [0, n_k)
};

// One rank's steps of a NodeLocalEpoch, from step `start` (a resume on the same nodes).
class NodeLocalSteps final : public StepSequence {
 public:
  NodeLocalSteps(std::shared_ptr<const NodeLocalEpoch> epoch, uint32_t node, uint32_t local,
                 uint64_t start);
  uint64_t steps() const override { return epoch_->steps() - start_; }
  uint64_t epoch_steps() const override { return epoch_->steps(); }
  uint64_t StepSize(uint64_t k) const override;
  void AppendStepSamples(uint64_t k, std::vector<uint64_t>* out) const override;
  uint64_t PositionAfter(uint64_t k) const override;
  // Order version 3 with (K, L, the steps every rank took): §5.4.
  OrderCursor Cursor(uint64_t consumed) const override;

 private:
  std::shared_ptr<const NodeLocalEpoch> epoch_;
  std::optional<EpochPlan> plan_;  // the node's plan for this rank; none when S is 0
  const std::vector<uint64_t>* samples_;  // A_k, owned by epoch_
  uint64_t start_;
};

// §5.4: the samples an interrupted node-local epoch had still to serve, R, cut into units by §2
// and striped over `plan.world_size` ranks by §3 from `offset` (plan.start_position is ignored;
// plan.shuffle and bucket_window are off for R). `saved`: the interrupted epoch's node progress,
// kept in every state until the epoch ends.
class RemainderSteps final : public StepSequence {
 public:
  static Result<std::shared_ptr<const RemainderSteps>> Make(
      const NodeLocalEpoch& interrupted, const NodeProgress& saved, uint64_t offset,
      const std::shared_ptr<const std::vector<uint64_t>>& lengths, PlanOptions plan);
  uint64_t steps() const override { return plan_.batches_for_rank(); }
  uint64_t epoch_steps() const override { return plan_.epoch_batches_for_rank(); }
  uint64_t StepSize(uint64_t k) const override { return plan_.BatchSamples(k).size(); }
  void AppendStepSamples(uint64_t k, std::vector<uint64_t>* out) const override;
  // Σ_k P_k(s) + the positions of R consumed; N after the last step (§4).
  uint64_t PositionAfter(uint64_t k) const override {
    return k + 1 >= plan_.batches_for_rank() ? total_ : base_ + plan_.PositionAfter(k);
  }
  OrderCursor Cursor(uint64_t consumed) const override;
  uint64_t size() const { return rest_->size(); }

 private:
  explicit RemainderSteps(EpochPlan plan) : plan_(std::move(plan)) {}
  EpochPlan plan_;
  std::shared_ptr<const std::vector<uint64_t>> rest_;  // R
  uint64_t base_ = 0;                                   // Σ_k P_k(s)
  uint64_t total_ = 0;                                  // the dataset's samples, N
  uint64_t seed_ = 0;                                   // the order's
  NodeProgress saved_;
};

}  // namespace libshard
