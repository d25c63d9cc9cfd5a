// LoaderState: where a Loader's stream stands, and its one encoding.
//
// A state is the epoch, the position in it, the samples skipped in it, and the cursor of the
// epoch's kind of order (libshard/order.h): each kind its own fields, nothing that means nothing
// for it. A Loader created with `resume` set continues exactly where the saved one stopped, also
// on another world size (docs/ORDER.md §4, §5.4, §6, §7.2 say what each kind's fields mean).
//
// The kind of the state is the kind of the epoch it is inside, which a loader need not share:
// a state of the global order resumed by a node-local loader finishes its epoch in the global
// order, and the reverse (ORDER.md §5.4); a state of the follow epoch continues it in a follow
// loader; a caller's state only resumes a caller's order.
//
// Checkpoints store a state encoded (EncodeLoaderState): JSON text with its own version, read
// back by DecodeLoaderState, which also reads the dicts libshard saved before the encoding had a
// version (docs/ORDER.md §8 specifies both). Python's Loader.state_dict() is that JSON as a dict.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "libshard/batch_options.h"
#include "libshard/order.h"
#include "libshard/status.h"

namespace libshard {

// How the epoch's sequence was cut by length-aware batching (LoaderOptions::bucket_window;
// docs/ORDER.md §2a). window 0: no bucketing, the sequence is the shuffled order itself. A resume
// in the middle of an epoch keeps the epoch's sequence, so that every sample is still delivered
// exactly once: a state with window 0 continues the epoch without bucketing (the loader's
// bucket_window applies from the next epoch); one with window > 0 needs the same bucket_window,
// batch_size, max_tokens and budget (Loader::Create says which differs).
struct EpochBucketing {
  uint64_t window = 0;
  uint32_t batch_size = 0;
  uint64_t max_tokens = 0;
  TokenBudget budget = TokenBudget::kSum;  // resolved: kSum or kPadded
  bool operator==(const EpochBucketing&) const = default;
};

// Order version 3 inside an epoch (docs/ORDER.md §5.4): the epoch's node count, ranks per node and
// the steps every rank had taken when the node-local part of the epoch stopped. With them every
// node's consumed prefix is recomputed, so a resume on the same nodes continues each node exactly,
// and one on other nodes serves the epoch's remaining samples. nodes 0: none recorded (the start
// of an epoch, which needs none).
struct NodeProgress {
  uint32_t nodes = 0;
  uint32_t local_world_size = 0;
  uint64_t steps = 0;
  bool operator==(const NodeProgress&) const = default;
};

// The cursor of each kind of order: what a state records beyond epoch, position and skipped.
// GlobalOrder's epochs (§1-§4): order version 1 or 2. A C++ state made without a version is 1,
// as a state saved before order versions existed.
struct GlobalCursor {
  uint64_t seed = 0;
  uint32_t version = kOrderV1;
  EpochBucketing bucketing;
  bool operator==(const GlobalCursor&) const = default;
};
// NodeLocalOrder's epochs (§5), order version 3.
struct NodeLocalCursor {
  uint64_t seed = 0;
  EpochBucketing bucketing;
  NodeProgress progress;
  bool operator==(const NodeLocalCursor&) const = default;
};
// CallerOrder's epochs (§6): position counts this rank's steps consumed.
struct CallerCursor {
  // The digest of the epoch's steps (EpochStepsDigest), which a resume inside the epoch checks
  // against the steps it is given; 0 before any epoch was given.
  uint64_t steps_digest = 0;
  bool operator==(const CallerCursor&) const = default;
};
// FollowOrder's follow epoch (§7): a resume continues it (at any world size), whether or not the
// dataset is complete by then. Epochs after it are GlobalCursor states.
struct FollowCursor {
  uint64_t seed = 0;
  uint32_t version = kOrderLatest;  // of the epochs after it
  uint64_t window = 1;              // the follow epoch's shuffle window, 1..2^24
  bool operator==(const FollowCursor&) const = default;
};

// Alternatives in OrderKind's order.
using OrderCursor = std::variant<GlobalCursor, NodeLocalCursor, CallerCursor, FollowCursor>;

// What a state's stream was made from beyond its cursor (state version 2, docs/ORDER.md §8):
// the dataset, and the settings that decide the sequence that the cursor does not hold. Each is
// unset in a state decoded from version 1 or from an earlier release (which resumes as it did),
// and in one made in C++ without it; Loader::Create checks each one that is set against the
// dataset and options it is given (InvalidArgument naming what differs, with both values).
// What may change on resume (world size, rank, batching, drop_last, max_len, threads, memory)
// is not recorded.
struct StateOrigin {
  // The dataset's identity digest (libshard/identity.h: of its schema and attributes, so an
  // append of the same schema and attributes keeps it), when its manifest records one.
  std::optional<uint64_t> identity;
  // The dataset's sample count N, of which the epoch's sequence is a permutation (global and
  // node-local orders; ORDER.md §1, §5): a resume inside the epoch needs the same N; one at the
  // start of an epoch (position 0) may have more (an append between epochs).
  std::optional<uint64_t> samples;
  // Whether the order shuffles (every kind but a caller's, which has no order of its own).
  std::optional<bool> shuffle;
  bool operator==(const StateOrigin&) const = default;
};

// Small, plain data; safe to store in a training checkpoint (encoded: EncodeLoaderState).
struct LoaderState {
  uint64_t epoch = 0;
  // Units of the epoch's sequence consumed by all ranks together (samples of the global
  // sequence; CallerCursor: this rank's steps consumed).
  uint64_t position = 0;
  std::vector<uint64_t> skipped;  // samples skipped by OnError::kSkip this epoch
  OrderCursor cursor;
  StateOrigin origin;  // what the stream was made from (unset: not recorded, nothing checked)

  OrderKind kind() const { return static_cast<OrderKind>(cursor.index()); }
  template <typename Cursor>
  const Cursor* get() const {
    return std::get_if<Cursor>(&cursor);
  }
  template <typename Cursor>
  Cursor* get() {
    return std::get_if<Cursor>(&cursor);
  }
  // docs/ORDER.md's order version of the epoch: kOrderCaller, 1 or 2 (global; follow: of the
  // epochs after it), kOrderV3 (node-local).
  uint32_t order_version() const;
  // The permutation's seed (0 for a caller's order, which has none).
  uint64_t seed() const;
  // The epoch's length-aware batching (window 0 for the kinds that have none).
  EpochBucketing bucketing() const;
  bool operator==(const LoaderState&) const = default;
};

// The state at the start of the epoch after `state`'s, in the same kind of order (the follow
// epoch's next epoch is the global order's): what a stream that finished `state`'s epoch resumes
// from. Nothing of the finished epoch is kept (bucketing, node progress, skipped, digest); the
// origin is (after the follow epoch, without its sample count, which that epoch did not fix).
LoaderState StartOfNextEpoch(const LoaderState& state);

// InvalidArgument naming the field ("resume.follow_window", "resume.locality", ...) when the
// state cannot have been saved by a Loader: a version other than 1 or 2 in a global or follow
// cursor, a follow window outside 1..2^24, an order version 3 state inside its epoch without its
// node progress, a bucketing window above 2^24 or with neither batch_size nor max_tokens.
// DecodeLoaderState refuses such a state; Loader::Create checks a state set in C++.
[[nodiscard]] Status ValidateLoaderState(const LoaderState& state);

// The encoding's version: "state_version" of the JSON (docs/ORDER.md §8). Version 2 adds the
// origin (identity, samples, shuffle); DecodeLoaderState reads versions 1 and 2.
inline constexpr uint32_t kLoaderStateVersion = 2;
// The longest encoded state DecodeLoaderState reads (a state holds a few numbers and the samples
// skipped in its epoch).
inline constexpr size_t kMaxLoaderStateBytes = size_t{64} << 20;

// The state as one line of JSON text (docs/ORDER.md §8), the same bytes for equal states.
std::string EncodeLoaderState(const LoaderState& state);
// Reads what EncodeLoaderState wrote, or a state dict saved by an earlier libshard (JSON of the
// dict, no "state_version"). Safe on any bytes: InvalidArgument naming the key for a value of the
// wrong type or out of range, a missing key, a key that the state's kind does not have, a state
// that ValidateLoaderState refuses, text that is not a JSON object, nested deeper than a state
// nests or longer than kMaxLoaderStateBytes; and for a state_version above kLoaderStateVersion
// ("saved by a newer libshard").
Result<LoaderState> DecodeLoaderState(std::string_view text);

}  // namespace libshard
