#include "loader/step_factory.h"

#include <algorithm>
#include <string>
#include <utility>

#include "libshard/identity.h"
#include "loader/caller_steps.h"

namespace libshard {

Status CheckResumeFits(const Order& order, const LoaderState& resume) {
  const OrderKind have = order.kind();
  const OrderKind saved = resume.kind();
  if (have == OrderKind::kCaller && saved != OrderKind::kCaller)
    return Status::InvalidArgument(
        "Loader option 'resume' is a state of the loader's own order (order " +
        std::to_string(resume.order_version()) +
        "), but this loader takes its order from the caller (a sampler); resume it with a loader "
        "without a sampler");
  if (have != OrderKind::kCaller && saved == OrderKind::kCaller)
    return Status::InvalidArgument(
        "Loader option 'resume' is a state of an order the caller gave (a sampler or batch "
        "sampler), but this loader has no sampler (its order is " + order.Describe() +
        "); resume it with the same sampler");
  if (have != OrderKind::kFollow && saved == OrderKind::kFollow)
    return Status::InvalidArgument(
        "Loader option 'resume' is a state of the follow epoch of a dataset being written "
        "(follow_window " + std::to_string(resume.get<FollowCursor>()->window) +
        "): resume it with follow=True (Loader::Follow)");
  return Status::OK();
}

Status CheckResumeOrigin(const LoaderState& resume, const std::string& path,
                         std::optional<uint64_t> identity, std::optional<uint64_t> samples,
                         bool shuffle) {
  const StateOrigin& saved = resume.origin;
  const std::string start_over =
      "or drop the state (do not resume it) to start over";
  if (saved.identity && identity && *saved.identity != *identity)
    return Status::InvalidArgument(
        "Loader option 'resume' is a state saved from another dataset: the state's dataset "
        "identity is " + IdentityDigestText(*saved.identity) + ", but " + path + " has identity " +
        IdentityDigestText(*identity) + " (the digest of its schema and attributes, "
        "`libshard info`); resume with the dataset the checkpoint was saved from, " + start_over);
  if (saved.samples && samples && *saved.samples != *samples && resume.position > 0)
    return Status::InvalidArgument(
        "Loader option 'resume' is a state inside epoch " + std::to_string(resume.epoch) +
        " (position " + std::to_string(resume.position) + ") of a dataset of " +
        std::to_string(*saved.samples) + " samples, but " + path + " has " +
        std::to_string(*samples) + " samples: the epoch's order is a permutation of all of them "
        "(docs/ORDER.md §1), so which samples remain is unknown; resume with the dataset as it "
        "was when the state was saved (" + std::to_string(*saved.samples) + " samples), resume a "
        "state saved at the end of an epoch (it starts the next epoch over every sample), " +
        start_over);
  if (saved.shuffle && *saved.shuffle != shuffle) {
    const auto word = [](bool b) { return std::string(b ? "true" : "false"); };
    return Status::InvalidArgument(
        "Loader option 'resume' is a state of an order with shuffle " + word(*saved.shuffle) +
        ", but this loader's shuffle is " + word(shuffle) + ": the state's position counts "
        "samples of its own sequence; create the loader with shuffle=" +
        (*saved.shuffle ? "True" : "False") + " to resume it, " + start_over);
  }
  return Status::OK();
}

Result<std::unique_ptr<StepFactory>> StepFactory::Make(
    const Dataset* dataset, const LoaderOptions& options,
    std::shared_ptr<const std::vector<uint64_t>> lengths, const Environment& environment) {
  const LoaderState* resume = options.resume ? &*options.resume : nullptr;
  if (resume != nullptr) LIBSHARD_RETURN_IF_ERROR(CheckResumeFits(options.order, *resume));
  if (resume != nullptr && dataset != nullptr)
    LIBSHARD_RETURN_IF_ERROR(CheckResumeOrigin(*resume, dataset->path(),
                                               dataset->identity().digest, dataset->size(),
                                               options.order.shuffle()));
  std::unique_ptr<StepFactory> f(new StepFactory());
  f->order_ = ResumedOrder(options.order, resume);
  f->base_ = PlanBase(options);
  f->samples_ = dataset != nullptr ? dataset->size() : 0;
  f->lengths_ = std::move(lengths);
  if (dataset != nullptr && NodeLocality::Needed(options)) {
    LIBSHARD_ASSIGN_OR_RETURN(f->node_locality_,
                              NodeLocality::Make(*dataset, options, environment));
  }
  return f;
}

Result<std::shared_ptr<const StepSequence>> StepFactory::Steps(const EpochStart& start) {
  switch (order_.kind()) {
    case OrderKind::kGlobal:
    case OrderKind::kNodeLocal:
      return PlannedEpoch(start);
    case OrderKind::kCaller:
      return CallerEpoch(start);
    case OrderKind::kFollow: {
      const FollowOrder& f = *order_.get<FollowOrder>();
      const FollowSnapshot& s = start.snapshot;
      return std::shared_ptr<const StepSequence>(std::make_shared<FollowSteps>(
          FollowEpoch(start.epoch, s.start_position), s.first, s.arrived, s.complete,
          FollowCursor{f.seed, f.version, f.shuffle_window}));
    }
  }
  return Status::Internal("StepFactory: an order of no known kind");
}

FollowSequence StepFactory::FollowEpoch(uint64_t epoch, uint64_t start_position) const {
  const FollowOrder* f = order_.get<FollowOrder>();
  FollowPlan plan;
  if (f != nullptr) {
    plan.shuffle = f->shuffle;
    plan.seed = f->seed;
    plan.window = std::max<uint64_t>(f->shuffle_window, 1);
  }
  plan.epoch = epoch;
  plan.rank = base_.rank;
  plan.world_size = base_.world_size;
  plan.batch = std::max<uint64_t>(base_.batch_size, 1);
  plan.drop_last = base_.drop_last;
  plan.start_position = start_position;
  return FollowSequence(plan);
}

Result<std::shared_ptr<const StepSequence>> StepFactory::PlannedEpoch(const EpochStart& start) {
  PlanOptions plan = base_;
  plan.shuffle = order_.shuffle();
  plan.seed = order_.seed();
  if (const GlobalOrder* g = order_.get<GlobalOrder>()) plan.order = g->version;
  plan.epoch = start.epoch;
  const LoaderState* resume = start.resume;
  if (resume != nullptr) {
    plan.start_position = resume->position;
    // A global epoch ends in its own version, also in a node-local loader (§5.4).
    if (const GlobalCursor* g = resume->get<GlobalCursor>()) plan.order = g->version;
    // A resume inside an epoch whose sequence had no bucketing continues without it (§2a).
    if (resume->position > 0 && resume->bucketing().window == 0) plan.bucket_window = 0;
    LIBSHARD_RETURN_IF_ERROR(CheckResumeBucketing(plan, *resume));
  }
  if (node_locality_ != nullptr) {
    LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<const StepSequence> steps,
                              node_locality_->EpochSteps(plan, resume, lengths_));
    if (steps != nullptr) return steps;
  }
  LIBSHARD_ASSIGN_OR_RETURN(EpochPlan made,
                            EpochPlan::MakeSharingLengths(samples_, lengths_, plan));
  return std::shared_ptr<const StepSequence>(std::make_shared<PlannedSteps>(std::move(made)));
}

Result<std::shared_ptr<const StepSequence>> StepFactory::CallerEpoch(
    const EpochStart& start) const {
  const LoaderState* resume = start.resume;
  const CallerCursor* saved = resume != nullptr ? resume->get<CallerCursor>() : nullptr;
  if (start.given == nullptr)  // no epoch given yet: nothing to serve, the state kept
    return std::shared_ptr<const StepSequence>(std::make_shared<CallerSteps>(
        std::make_shared<const EpochSteps>(), 0, saved != nullptr ? saved->steps_digest : 0));
  const EpochSteps& steps = *start.given;
  const uint64_t digest = EpochStepsDigest(steps);
  uint64_t from = 0;
  if (saved != nullptr && resume->epoch == start.epoch && resume->position > 0) {
    if (saved->steps_digest != digest)
      return Status::InvalidArgument(
          "resume: epoch " + std::to_string(start.epoch) + " was saved after " +
          std::to_string(resume->position) + " steps of another order (steps digest " +
          std::to_string(saved->steps_digest) + ", the sampler now gives " +
          std::to_string(digest) + ", " + std::to_string(steps.steps()) +
          " steps); the steps left cannot be known, so resume needs a sampler that gives the "
          "same order for the same epoch (seeded, with set_epoch) and the same dataset and "
          "world size, or start the epoch from its beginning");
    if (resume->position > steps.steps())
      return Status::InvalidArgument("resume: position " + std::to_string(resume->position) +
                                     " is past the " + std::to_string(steps.steps()) +
                                     " steps of epoch " + std::to_string(start.epoch));
    from = resume->position;
  }
  return std::shared_ptr<const StepSequence>(
      std::make_shared<CallerSteps>(start.given, from, digest));
}

Status StepFactory::CheckResumeBucketing(const PlanOptions& plan,
                                         const LoaderState& resume) const {
  if (resume.position == 0 || resume.position >= samples_) return Status::OK();
  // A version 3 state resumed on other nodes or ranks per node ends its epoch without
  // length-aware batching (docs/ORDER.md §5.4).
  if (resume.kind() == OrderKind::kNodeLocal &&
      (node_locality_ == nullptr || !node_locality_->ContinuesOnSameNodes(resume)))
    return Status::OK();
  const EpochBucketing saved = resume.bucketing();
  const EpochBucketing now = BucketingOf(plan);
  if (saved.window == 0 || saved == now) return Status::OK();
  const auto describe = [](const EpochBucketing& b) {
    if (b.window == 0) return std::string("no bucketing");
    return "bucket_window " + std::to_string(b.window) +
           (b.max_tokens > 0 ? ", max_tokens " + std::to_string(b.max_tokens) +
                                   (b.budget == TokenBudget::kPadded ? " (padded)" : " (summed)")
                             : ", batch_size " + std::to_string(b.batch_size));
  };
  return Status::InvalidArgument(
      "resume: the saved epoch " + std::to_string(resume.epoch) +
      " was batched by length with " + describe(saved) + ", this loader asks for " +
      describe(now) + "; the remaining samples of that epoch are defined by its batching, so "
      "resume with the saved settings until the epoch ends, or start the next epoch (position "
      "0) with the new ones");
}

}  // namespace libshard
