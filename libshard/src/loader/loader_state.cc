// LoaderState (libshard/loader_state.h): its accessors, the next epoch's state and the checks a
// state must pass to be resumed. (Its encoding: loader/state_codec.cc.)
#include <string>

#include "libshard/loader_state.h"

namespace libshard {

uint32_t LoaderState::order_version() const {
  switch (kind()) {
    case OrderKind::kGlobal: return get<GlobalCursor>()->version;
    case OrderKind::kNodeLocal: return kOrderV3;
    case OrderKind::kCaller: return kOrderCaller;
    case OrderKind::kFollow: return get<FollowCursor>()->version;
  }
  return kOrderV1;
}

uint64_t LoaderState::seed() const {
  if (const GlobalCursor* c = get<GlobalCursor>()) return c->seed;
  if (const NodeLocalCursor* c = get<NodeLocalCursor>()) return c->seed;
  if (const FollowCursor* c = get<FollowCursor>()) return c->seed;
  return 0;
}

EpochBucketing LoaderState::bucketing() const {
  if (const GlobalCursor* c = get<GlobalCursor>()) return c->bucketing;
  if (const NodeLocalCursor* c = get<NodeLocalCursor>()) return c->bucketing;
  return {};
}

LoaderState StartOfNextEpoch(const LoaderState& state) {
  LoaderState next;
  next.epoch = state.epoch + 1;
  switch (state.kind()) {
    case OrderKind::kGlobal:
      next.cursor = GlobalCursor{state.seed(), state.order_version(), {}};
      break;
    case OrderKind::kNodeLocal:
      next.cursor = NodeLocalCursor{state.seed(), {}, {}};
      break;
    case OrderKind::kCaller:
      next.cursor = CallerCursor{};
      break;
    case OrderKind::kFollow:  // ORDER.md §7: the epochs after the follow epoch are global
      next.cursor = GlobalCursor{state.seed(), state.order_version(), {}};
      break;
  }
  next.origin = state.origin;
  // The follow epoch's sample count was never fixed (it grew as it was served); the next epoch
  // is over the complete dataset, whose count its loader records.
  if (state.kind() == OrderKind::kFollow) next.origin.samples.reset();
  return next;
}

namespace {

Status Bad(const std::string& field, const std::string& problem) {
  return Status::InvalidArgument("Loader option 'resume." + field + "' " + problem +
                                 "; pass the state a Loader saved (state() or state_dict())");
}

Status CheckBucketing(const EpochBucketing& b) {
  if (b.window == 0) return Status::OK();
  if (b.window > kMaxLoaderBucketWindow)
    return Bad("bucketing", "has window " + std::to_string(b.window) + ", above " +
                                std::to_string(kMaxLoaderBucketWindow));
  if (b.batch_size == 0 && b.max_tokens == 0)
    return Bad("bucketing", "has window " + std::to_string(b.window) +
                                " but neither batch_size nor max_tokens");
  if (b.budget != TokenBudget::kSum && b.budget != TokenBudget::kPadded)
    return Bad("bucketing", "has a budget that is neither 'sum' nor 'padded'");
  return Status::OK();
}

Status CheckVersion(uint32_t version) {
  if (version == kOrderV1 || version == kOrderV2) return Status::OK();
  return Bad("order", "is " + std::to_string(version) +
                          ", not an order version this libshard knows (0 to 3): the state was "
                          "saved by a newer libshard; resume it with that version");
}

}  // namespace

Status ValidateLoaderState(const LoaderState& state) {
  switch (state.kind()) {
    case OrderKind::kGlobal: {
      const GlobalCursor& c = *state.get<GlobalCursor>();
      LIBSHARD_RETURN_IF_ERROR(CheckVersion(c.version));
      return CheckBucketing(c.bucketing);
    }
    case OrderKind::kNodeLocal: {
      const NodeLocalCursor& c = *state.get<NodeLocalCursor>();
      LIBSHARD_RETURN_IF_ERROR(CheckBucketing(c.bucketing));
      const NodeProgress& p = c.progress;
      // ORDER.md §5.4: a state inside its epoch records its nodes, ranks per node and steps;
      // one at the start of an epoch needs none.
      if (state.position > 0 && (p.nodes == 0 || p.local_world_size == 0))
        return Bad("locality", "is missing: an order version 3 state inside an epoch records "
                               "its nodes, ranks per node and steps");
      if ((p.nodes == 0) != (p.local_world_size == 0))
        return Bad("locality", "has " + std::to_string(p.nodes) + " nodes of " +
                                   std::to_string(p.local_world_size) +
                                   " ranks: both are set or neither");
      if (p.nodes == 0 && p.steps != 0)
        return Bad("locality", "has steps without its nodes and ranks per node");
      return Status::OK();
    }
    case OrderKind::kCaller:
      if (state.origin.samples || state.origin.shuffle)
        return Bad(state.origin.samples ? "samples" : "shuffle",
                   "is set in a state of an order the caller gave, which has no order of its own");
      return Status::OK();
    case OrderKind::kFollow: {
      if (state.origin.samples)
        return Bad("samples", "is set in a state of the follow epoch, whose sample count grows "
                              "as it is served");
      const FollowCursor& c = *state.get<FollowCursor>();
      if (c.window < 1 || c.window > kMaxLoaderShuffleWindow)
        return Bad("follow_window", "is " + std::to_string(c.window) + ", outside 1.." +
                                        std::to_string(kMaxLoaderShuffleWindow));
      return CheckVersion(c.version);
    }
  }
  return Status::OK();
}

}  // namespace libshard
