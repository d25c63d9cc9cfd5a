// The order a Loader serves a dataset's samples in, as one value: the kind of order and exactly
// the settings that kind has (docs/ORDER.md is the contract of every kind).
//
//   Order::Shuffled(seed, version)  ORDER.md §1-§4 (GlobalOrder): each epoch one permutation of
//                                   the whole dataset by (seed, epoch), striped over all ranks;
//                                   the default of every loader
//   Order::Unshuffled()             the same in the dataset's own order
//   NodeLocalOrder{...}             §5, order version 3: each node reads its own share of the
//                                   dataset every epoch, shuffled within the node
//   CallerOrder{}                   §6: the caller gives each epoch's steps
//                                   (Loader::SetEpochSteps; in Python a torch Sampler)
//   FollowOrder{...}                §7: the first epoch of a dataset being written
//                                   (Loader::Follow)
//
//   LoaderOptions o;
//   o.order = NodeLocalOrder{.seed = 3, .nodes = 4};
//
// Where an epoch of an order stands is the LoaderState (libshard/loader_state.h), whose cursor has
// the same kinds. What every kind shares is in LoaderOptions: the first epoch, the ranks the order
// is striped over (rank, world_size), the batching and drop_last. Front ends spell an order as the
// loader option group "order" (Python: `Loader(path, order=libshard.Order.node_local(nodes=4))`)
// or by the flat options of earlier releases (shuffle, seed, order=1|2, locality, nodes,
// node_rank, follow, shuffle_window, a sampler): LoaderOptionTable (libshard/loader.h) turns
// either into one Order, naming the option of any spelling that has no order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "libshard/status.h"

namespace libshard {

// Order versions: LoaderState's "order" (docs/ORDER.md). A state saved without one means 1.
inline constexpr uint32_t kOrderCaller = 0;  // an order the caller gave (§6)
inline constexpr uint32_t kOrderV1 = 1;      // §1.1: Fisher-Yates, O(n) per epoch
inline constexpr uint32_t kOrderV2 = 2;      // §1.2: evaluated per position in O(1)
inline constexpr uint32_t kOrderV3 = 3;      // §5: node-local
inline constexpr uint32_t kOrderLatest = kOrderV2;  // of a shuffled order made today

// NodeLocalOrder::node_rank: from the launcher's variables, else from the rank.
inline constexpr uint32_t kAutoNodeRank = UINT32_MAX;
// FollowOrder::shuffle_window: 1..2^24 samples; 4096 by default.
inline constexpr uint64_t kMaxLoaderShuffleWindow = uint64_t{1} << 24;
inline constexpr uint64_t kDefaultShuffleWindow = 4096;

// The kinds, in the order of Order's (and LoaderState's cursor's) alternatives.
enum class OrderKind : uint8_t { kGlobal = 0, kNodeLocal = 1, kCaller = 2, kFollow = 3 };

// ORDER.md §1-§4: every epoch's order striped over all ranks. `shuffle` false: the dataset's
// order (the permutation is the identity, whatever the seed and version).
struct GlobalOrder {
  bool shuffle = true;
  uint64_t seed = 0;
  // 2: evaluated per position in O(1) (a rank of a large world starts at once); 1: the
  // Fisher-Yates order of libshard before order versions (O(n) per epoch), to reproduce
  // earlier runs.
  uint32_t version = kOrderLatest;
  bool operator==(const GlobalOrder&) const = default;
};

// ORDER.md §5 (order version 3): `world_size` ranks on `nodes` nodes of world_size / nodes ranks
// each, numbered node by node (rank = node_rank x ranks per node + local rank, as torchrun and
// Slurm number them). The samples are assigned to nodes once (by dataset, seed and node count);
// each node's ranks read only their node's samples, shuffled within the node each epoch, so a
// node's cache of an s3:// dataset downloads its share once.
struct NodeLocalOrder {
  bool shuffle = true;
  uint64_t seed = 0;
  // 0: from the launcher (ResolveNodes in libshard/world.h: GROUP_WORLD_SIZE, WORLD_SIZE /
  // LOCAL_WORLD_SIZE, SLURM_JOB_NUM_NODES; 1 when none is set).
  uint32_t nodes = 0;
  // kAutoNodeRank: from the launcher (GROUP_RANK, SLURM_NODEID) when set, else rank / ranks per
  // node; a node rank that the rank does not fall on is InvalidArgument at Create.
  uint32_t node_rank = kAutoNodeRank;
  bool operator==(const NodeLocalOrder&) const = default;
};

// ORDER.md §6: each epoch begins with Loader::SetEpochSteps and this rank's steps, taken as they
// are: nothing is striped over rank and world_size (a DistributedSampler has split the epoch
// already), shuffled or batched again. batch_size > 1, max_tokens and bucket_window > 0 are
// InvalidArgument (the steps are the batches; "auto" bucketing resolves to off).
struct CallerOrder {
  bool operator==(const CallerOrder&) const = default;
};

// ORDER.md §7: the first epoch serves a dataset while its writer still writes it (Loader::Follow),
// arrivals shuffled within windows growing 1, 2, 4, ... up to `shuffle_window` samples (larger
// mixes more, smaller serves sooner); later epochs are the global order of the complete dataset
// (later()). Needs single samples or batch_size (not max_tokens); bucket_window applies from the
// next epoch.
struct FollowOrder {
  bool shuffle = true;
  uint64_t seed = 0;
  uint64_t shuffle_window = kDefaultShuffleWindow;  // 1..kMaxLoaderShuffleWindow
  uint32_t version = kOrderLatest;                   // of the epochs after the follow epoch
  GlobalOrder later() const { return {shuffle, seed, version}; }
  bool operator==(const FollowOrder&) const = default;
};

class Order {
 public:
  Order() = default;  // Shuffled(0)
  // Implicit, so that `options.order = NodeLocalOrder{.nodes = 4};` reads as it means.
  Order(GlobalOrder o) : value_(o) {}     // NOLINT(google-explicit-constructor)
  Order(NodeLocalOrder o) : value_(o) {}  // NOLINT(google-explicit-constructor)
  Order(CallerOrder o) : value_(o) {}     // NOLINT(google-explicit-constructor)
  Order(FollowOrder o) : value_(o) {}     // NOLINT(google-explicit-constructor)

  static Order Shuffled(uint64_t seed = 0, uint32_t version = kOrderLatest) {
    return GlobalOrder{true, seed, version};
  }
  static Order Unshuffled() { return GlobalOrder{false, 0, kOrderLatest}; }

  OrderKind kind() const { return static_cast<OrderKind>(value_.index()); }
  // The kind's settings, or null for another kind.
  template <typename Kind>
  const Kind* get() const {
    return std::get_if<Kind>(&value_);
  }
  template <typename Kind>
  Kind* get() {
    return std::get_if<Kind>(&value_);
  }
  const std::variant<GlobalOrder, NodeLocalOrder, CallerOrder, FollowOrder>& value() const {
    return value_;
  }
  // The permutation's shuffle and seed (kCaller has none: false and 0).
  bool shuffle() const;
  uint64_t seed() const;
  // Its name in the loader option group "order": "shuffled", "unshuffled", "node_local",
  // "caller" or "follow".
  std::string_view name() const;
  // For messages: "shuffled (seed 3, order version 2)", "node-local (nodes from the launcher,
  // seed 0)", ...
  std::string Describe() const;

  bool operator==(const Order&) const = default;

 private:
  std::variant<GlobalOrder, NodeLocalOrder, CallerOrder, FollowOrder> value_;
};

// InvalidArgument naming the setting ("order.version", "order.shuffle_window") when one is out of
// its bounds: a version other than 1 or 2, a shuffle_window outside 1..kMaxLoaderShuffleWindow
// (the bounds of the option group "order" in LoaderOptionTable). Loader::Create calls it.
[[nodiscard]] Status ValidateOrder(const Order& order);

// One rank's steps of one epoch in an order the caller gives (CallerOrder; docs/ORDER.md §6):
// step k is samples[bounds[k], bounds[k + 1]), in delivery order, one sample or one batch.
// Loader::SetEpochSteps checks it (ValidateEpochSteps): bounds holds steps() + 1 entries rising
// strictly from 0 to samples.size() (no empty step), every index is below the dataset's size; an
// index may repeat (a sampler with replacement). No step at all: bounds {0} or empty, with no
// samples.
struct EpochSteps {
  std::vector<uint64_t> samples;
  std::vector<uint64_t> bounds;
  uint64_t steps() const { return bounds.empty() ? 0 : bounds.size() - 1; }
  // One sample per step.
  static EpochSteps Singles(std::vector<uint64_t> samples);
  // Steps of these samples each.
  static EpochSteps Batches(const std::vector<std::vector<uint64_t>>& batches);
};

// InvalidArgument naming the step, its index and `dataset_path` (an index out of range), or what
// is wrong with the bounds (an empty step; bounds that do not start at 0, fall, or do not end at
// samples.size()).
[[nodiscard]] Status ValidateEpochSteps(const EpochSteps& steps, uint64_t dataset_size,
                                        const std::string& dataset_path);
// xxh3-64 of the steps (their samples and bounds): CallerCursor::steps_digest. Never 0.
uint64_t EpochStepsDigest(const EpochSteps& steps);

}  // namespace libshard
