// Sample order of one epoch: the global permutation, batching, rank striping and resume.
// Pure computation, no I/O, no threads.
//
// THE CONTRACT is docs/ORDER.md (permutation §1, units §2, length-aware batching §2a, striping
// §3, position and resume §4); resume depends on it never changing, and tests/order_test.cc pins
// its golden values. This header implements it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "libshard/loader.h"
#include "libshard/status.h"
#include "loader/batching.h"

namespace libshard {

// The global order of epoch `epoch`: a permutation of [0, n), order version 1 (docs/ORDER.md
// §1.1, exact; any change breaks resume of saved states). O(n) time and 8n bytes.
// EpochPlan::Make adds one pass over the lengths in token mode.
std::vector<uint64_t> EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch);

// Order versions (kOrderV1: EpochPermutation, kOrderV2: ShuffleV2) are in libshard/order.h.

// The global order of epoch `epoch`, version 2 (docs/ORDER.md §1.2, exact; any change breaks
// resume of saved states): P[i] = ShuffleV2(n, seed, epoch).At(i), a bijection of [0, n)
// evaluated per position, with no state of size n. O(1) expected time per position (about
// 30 ns) and 48 bytes; no precomputation.
class ShuffleV2 {
 public:
  ShuffleV2() = default;  // n = 0
  ShuffleV2(uint64_t n, uint64_t seed, uint64_t epoch);
  // Preconditions: i < n.
  uint64_t At(uint64_t i) const {
    uint64_t y = Encrypt(i);
    while (y >= n_) y = Encrypt(y);
    return y;
  }
  uint64_t size() const { return n_; }

 private:
  uint64_t Encrypt(uint64_t x) const;

  uint64_t n_ = 0;
  uint32_t half_ = 1;
  uint64_t mask_ = 1;
  uint64_t keys_[4] = {};
};

// The whole order of version `order` (1 or 2) as a vector: EpochPermutation for 1, ShuffleV2
// evaluated at every position for 2. For tests and tools; the loader never builds it for v2.
std::vector<uint64_t> EpochOrder(uint64_t n, uint64_t seed, uint64_t epoch, uint32_t order);

struct PlanOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t rank = 0;
  uint64_t world_size = 1;
  bool drop_last = false;
  uint64_t batch_size = 0;      // 0 or 1: single samples; > 1: fixed-size batches
  uint64_t max_tokens = 0;      // > 0: token-budget batches (exclusive with batch_size > 1)
  OversizedSample oversized = OversizedSample::kOwnBatch;
  TokenBudget budget = TokenBudget::kSum;  // the rule of max_tokens (section 2); kAuto = kSum
  uint64_t bucket_window = 0;   // > 0: length-aware batching (section 2a)
  uint64_t start_position = 0;  // LoaderState::position to resume from; 0..n
  uint32_t order = kOrderLatest;  // order version (1 or 2) of a shuffled epoch; see section 1.
  // > 0: exactly this many steps per rank from start_position, whatever §3 gives: steps past
  // the units are padding as in §3, and units past them are dropped. The node-local order
  // (docs/ORDER.md §5.3) gives every node's plan the same count.
  uint64_t steps = 0;
};

// `order` as a loader resumed from `resume` (null: none) continues it, in this and every later
// epoch: with the seed of a state that has one, the version of a global or follow state (a
// node-local state's epochs have no version; a loader keeps its own) and the shuffle window of
// a follow state. A caller's order has none of these.
Order ResumedOrder(const Order& order, const LoaderState* resume);

// The ranks an order's epochs are striped over (§3; §5's nodes and ranks per node; §7.2): this
// process's rank of the world, as the options give them. Every kind but CallerOrder (whose steps
// are the rank's own) reads them here and only here (PlanBase, NodeLocality), so that a grouping
// of the world's ranks (several ranks that read the same steps) is decided in one place.
struct OrderRanks {
  uint32_t rank = 0;
  uint32_t world_size = 1;
};
OrderRanks OrderRanksOf(const LoaderOptions& options);

// What every epoch of a Loader built with `options` (resolved by ResolveLoaderOptions, which
// decides the "auto" budget and bucket window) plans with, whatever its order: ranks, batching,
// bucketing and drop_last. The order's fields (shuffle, seed, order version, epoch,
// start_position) are left at their defaults.
PlanOptions PlanBase(const LoaderOptions& options);

// The PlanOptions a Loader built with `options` uses for its first epoch in the global order:
// PlanBase, with the shuffle, seed and version of ResumedOrder (a node-local order's: version 2;
// a follow order's later epochs'), and epoch and start_position from options.resume when set,
// else options.epoch and 0. (SetEpoch(e): set .epoch = e and .start_position = 0.)
// With a resume inside an epoch, bucketing follows the state (LoaderState::bucketing()).
PlanOptions PlanOptionsFor(const LoaderOptions& options);

// The EpochBucketing of an epoch planned with `plan` (window 0 without bucketing).
EpochBucketing BucketingOf(const PlanOptions& plan);

// One rank's view of one epoch. Immutable after Make; copies share the permutation; all const
// methods are thread-safe.
class BucketedSequence;  // section 2a's S (order.cc)

class EpochPlan {
 public:
  // `lengths` holds every sample's token length (size n) and is needed only for max_tokens > 0;
  // pass the lengths the loader will actually deliver (e.g. clipped to max_len). It is not
  // retained. InvalidArgument when options are inconsistent (the message says what to change).
  // Memory: order 1 shuffled: the permutation, 8n bytes. Order 2 or no shuffle, without
  // max_tokens: O(1), nothing of size n. Order 2 or no shuffle, with max_tokens: one streaming
  // pass over P (ShuffleV2::At per position) keeps only the unit bounds, 8 bytes per global
  // batch (twice when a resume off the epoch's unit boundaries needs a second layout); the
  // caller's lengths (8n) remain the caller's.
  // With bucket_window > 0 the plan keeps the lengths (to recompute a window's units on demand,
  // a few windows cached): Make copies them, MakeSharingLengths shares them (null: none).
  // Memory under 2a: 8 bytes per global unit plus the lengths; a window's sort costs
  // O(M log M) once per window and is cached, so a plan walks an epoch in O(N log M).
  static Result<EpochPlan> Make(uint64_t n, std::span<const uint64_t> lengths,
                                const PlanOptions& options);
  static Result<EpochPlan> MakeSharingLengths(
      uint64_t n, std::shared_ptr<const std::vector<uint64_t>> lengths,
      const PlanOptions& options);

  // The plan of rank `rank` (< world_size) of the same epoch, world and resume position: O(1), it
  // shares the permutation and the units (what Make would build for that rank, at no cost; for
  // simulating many ranks in one process).
  EpochPlan ForRank(uint64_t rank) const;

  // Steps (batches, or samples in single-sample mode) this rank gets from start_position to the
  // end of the epoch. Identical on every rank.
  uint64_t batches_for_rank() const { return steps_; }
  // Steps this rank gets in the whole epoch, from position 0 (equals batches_for_rank() when
  // start_position is 0). For len(loader)-style reporting after a resume.
  uint64_t epoch_batches_for_rank() const { return epoch_steps_; }
  // Sample indices of this rank's k-th step in delivery order; never empty for
  // k < batches_for_rank(), empty for k >= batches_for_rank().
  std::vector<uint64_t> BatchSamples(uint64_t k) const;
  // Same, appended to `out` (no allocation once `out` has capacity).
  void AppendBatchSamples(uint64_t k, std::vector<uint64_t>* out) const;
  // LoaderState::position once every rank has consumed its steps 0..k; the same on every rank.
  // N after the last step (and for any k >= batches_for_rank() - 1).
  uint64_t PositionAfter(uint64_t k) const;

  // Global units from start_position (before drop/padding), and the permutation itself.
  uint64_t global_units() const { return main_->size(); }
  // The first position of global unit g from start_position; size() when g >= global_units().
  uint64_t UnitBegin(uint64_t g) const { return g < main_->size() ? main_->Begin(g) : n_; }
  // The sample at position i of the epoch's sequence (i < size()): P, or S under 2a. O(1) for
  // every order without bucketing; under 2a, O(1) within a cached window.
  uint64_t SampleAt(uint64_t i) const {
    if (bucketed_) return BucketedSampleAt(i);
    return BaseAt(i);
  }
  // The sample at position i of P (section 1).
  uint64_t BaseAt(uint64_t i) const {
    return perm_ ? (*perm_)[i] : options_.shuffle ? v2_.At(i) : i;
  }
  // P materialized, only for order 1 when shuffled; empty otherwise (use BaseAt). Under 2a
  // this is P, not S.
  std::span<const uint64_t> permutation() const {
    return perm_ ? std::span<const uint64_t>(*perm_) : std::span<const uint64_t>();
  }
  const PlanOptions& options() const { return options_; }
  uint64_t size() const { return n_; }

 private:
  EpochPlan() = default;
  // `shared` holds `lengths` when bucketing keeps them (else null).
  static Result<EpochPlan> MakeImpl(uint64_t n, std::span<const uint64_t> lengths,
                                    std::shared_ptr<const std::vector<uint64_t>> shared,
                                    const PlanOptions& options);
  // Global unit index g (from start_position, padding included) -> [begin, end) in P (S).
  void UnitRange(uint64_t g, uint64_t* begin, uint64_t* end) const;
  uint64_t BucketedSampleAt(uint64_t i) const;

  PlanOptions options_;
  uint64_t n_ = 0;
  uint64_t steps_ = 0;
  uint64_t epoch_steps_ = 0;
  std::shared_ptr<const std::vector<uint64_t>> perm_;  // order 1 shuffled only
  ShuffleV2 v2_;                                       // order 2 shuffled
  std::shared_ptr<BucketedSequence> bucketed_;         // section 2a (shared, internally locked)
  // Shared by copies (ForRank): units from start_position, and units from 0 used cyclically for
  // padding (empty when none is needed).
  std::shared_ptr<const BatchLayout> main_;
  std::shared_ptr<const BatchLayout> pad_;
};

}  // namespace libshard
