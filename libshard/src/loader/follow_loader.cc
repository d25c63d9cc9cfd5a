#include "loader/follow_loader.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "loader/streaming_loader.h"

namespace libshard {

Result<std::unique_ptr<Loader>> Loader::Follow(const std::string& path,
                                               const LoaderOptions& options,
                                               const DatasetOptions& dataset_options) {
  return FollowLoader::Make(path, options, dataset_options);
}

Result<std::unique_ptr<Loader>> FollowLoader::Make(const std::string& path,
                                                   const LoaderOptions& options,
                                                   const DatasetOptions& dataset_options,
                                                   DiagnosticsHooks hooks) {
  LoaderOptions given = options;
  if (const GlobalOrder* g = options.order.get<GlobalOrder>()) {
    given.order = FollowOrder{g->shuffle, g->seed, kDefaultShuffleWindow, g->version};
  } else if (options.order.kind() != OrderKind::kFollow) {
    return Status::InvalidArgument(
        "Loader option 'order' is " + options.order.Describe() +
        ", which does not apply to follow mode: its first epoch serves the samples as they "
        "arrive (docs/ORDER.md §7); use the follow order (Python: order=Order.follow(...), or "
        "follow=True with shuffle, seed and shuffle_window)");
  }
  LIBSHARD_ASSIGN_OR_RETURN(LoaderOptions resolved, ResolveLoaderOptions(given));
  std::unique_ptr<FollowLoader> loader(
      new FollowLoader(path, std::move(resolved), dataset_options, std::move(hooks)));
  LIBSHARD_RETURN_IF_ERROR(loader->Init());
  return std::unique_ptr<Loader>(std::move(loader));
}

FollowLoader::FollowLoader(std::string path, LoaderOptions options, DatasetOptions dataset_options,
                           DiagnosticsHooks hooks)
    : path_(std::move(path)),
      options_(std::move(options)),
      dataset_options_(std::move(dataset_options)),
      hooks_(std::move(hooks)) {
  clock_ = hooks_.clock ? hooks_.clock : SteadyLoaderClock();
  log_ = hooks_.sink ? hooks_.sink : StderrLogSink();
  hooks_.clock = clock_;
  hooks_.sink = log_;
}

FollowLoader::~FollowLoader() {
  Stop();
  std::unique_ptr<Loader> inner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inner = std::move(inner_);
  }
}

Status FollowLoader::Init() {
  LIBSHARD_ASSIGN_OR_RETURN(factory_,
                            StepFactory::Make(nullptr, options_, nullptr, ProcessEnvironment()));
  LIBSHARD_ASSIGN_OR_RETURN(follower_, DatasetFollower::Open(path_, dataset_options_));
  progress_ = follower_->progress();
  last_arrival_ = clock_->Now();
  next_warning_ = options_.slow_wait_warning_seconds;
  const std::optional<LoaderState>& resume = options_.resume;
  // The identity of the dataset (or of the write in progress, which its commit records); not
  // known before its writer starts.
  if (Result<DatasetIdentity> id = ReadIdentity(path_); id.ok() && id->recorded)
    identity_ = id->digest;
  if (resume)
    LIBSHARD_RETURN_IF_ERROR(CheckResumeOrigin(*resume, path_, identity_, std::nullopt,
                                               options_.order.shuffle()));
  if (resume && resume->kind() != OrderKind::kFollow) {
    // A state of a later epoch: the dataset was complete when it was saved.
    if (!progress_.complete)
      return Status::InvalidArgument(
          "resume: the state is of epoch " + std::to_string(resume->epoch) + ", an ordinary "
          "epoch of the complete dataset, but " + path_ + " is still being written (" +
          progress_.waiting_for + "); resume once its writer closed it, or resume a state of "
          "the follow epoch");
    return StartCompleteEpoch(options_);
  }
  if (resume) {
    StartFollowEpoch(resume->epoch, resume->position, resume->skipped);
  } else {
    StartFollowEpoch(options_.epoch, 0, {});
  }
  return Status::OK();
}

void FollowLoader::StartFollowEpoch(uint64_t epoch, uint64_t position,
                                    std::vector<uint64_t> skipped) {
  order_.emplace(factory_->FollowEpoch(epoch, position));
  following_ = true;
  follow_epoch_ = epoch;
  follow_start_ = position;
  next_step_ = 0;
  epoch_over_ = false;
  const FollowOrder& follow = *factory_->order().get<FollowOrder>();
  carried_ = LoaderState{};
  carried_.epoch = epoch;
  carried_.position = position;
  carried_.skipped = std::move(skipped);
  carried_.cursor = FollowCursor{follow.seed, follow.version, order_->plan().window};
  carried_.origin.identity = identity_;
  carried_.origin.shuffle = follow.shuffle;
  ReplaceInner(nullptr);
}

void FollowLoader::ReplaceInner(std::unique_ptr<Loader> next) {
  std::unique_ptr<Loader> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (inner_ != nullptr) {
      const LoaderStats s = inner_->stats();
      done_stats_.samples_delivered += s.samples_delivered;
      done_stats_.batches_delivered += s.batches_delivered;
      done_stats_.bytes_delivered += s.bytes_delivered;
      done_stats_.bytes_read += s.bytes_read;
      done_stats_.wait_seconds += s.wait_seconds;
      done_stats_.checksum_failures += s.checksum_failures;
      done_stats_.samples_skipped += s.samples_skipped;
      done_stats_.samples_repeated += s.samples_repeated;
      done_stats_.batch_positions += s.batch_positions;
      done_stats_.padding_positions += s.padding_positions;
      done_stats_.arena_peak = std::max(done_stats_.arena_peak, s.arena_peak);
      done_stats_.worker_backlog_peak =
          std::max(done_stats_.worker_backlog_peak, s.worker_backlog_peak);
      done_stats_.elapsed_seconds += s.elapsed_seconds;
    }
    old = std::move(inner_);
    inner_ = std::move(next);
    if (stopped_ && inner_ != nullptr) inner_->Stop();
  }
  old.reset();  // outside the lock: joins its threads
}

LoaderState FollowLoader::FollowState() const { return carried_; }

Result<bool> FollowLoader::Poll() {
  const uint64_t before = progress_.samples;
  const bool was_complete = progress_.complete;
  LIBSHARD_RETURN_IF_ERROR(follower_->Poll());
  FollowProgress now = follower_->progress();
  const bool news = now.samples != before || now.complete != was_complete;
  {
    std::lock_guard<std::mutex> lock(mu_);
    progress_ = std::move(now);
  }
  if (news) {
    last_arrival_ = clock_->Now();
    next_warning_ = options_.slow_wait_warning_seconds;
  }
  return news;
}

Result<bool> FollowLoader::StartSnapshot() {
  const uint64_t arrived = progress_.samples;
  const bool complete = progress_.complete;
  if (order_->KnownSteps(arrived, complete) <= next_step_) return false;
  // A shard renamed between the snapshot and its loader opening it (the writer's commit, or a
  // resume undoing one) is found under its new name by the next snapshot.
  Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Result<std::shared_ptr<Dataset>> snapshot = follower_->Snapshot();
    if (!snapshot.ok()) return snapshot.status();
    LIBSHARD_ASSIGN_OR_RETURN(
        std::shared_ptr<const StepSequence> steps,
        factory_->Steps({.epoch = *follow_epoch_,
                         .snapshot = {follow_start_, next_step_, arrived, complete}}));
    LoaderOptions inner_options = options_;
    inner_options.order = factory_->order().get<FollowOrder>()->later();
    inner_options.resume.reset();
    inner_options.bucket_window = 0;  // ORDER.md §7.2: from the next epoch on
    inner_options.max_tokens = 0;
    Result<std::unique_ptr<StreamingLoader>> inner = StreamingLoader::MakeWithSteps(
        std::move(snapshot).value(), inner_options, std::move(steps), carried_, hooks_);
    if (inner.ok()) {
      inner_end_ = order_->KnownSteps(arrived, complete);
      ReplaceInner(std::move(inner).value());
      return true;
    }
    last = inner.status();
    if (last.code() != StatusCode::kNotFound) return last;
  }
  return last;
}

void FollowLoader::WaitForWriter() {
  const auto start = clock_->Now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!stopped_) clock_->WaitFor(stop_cv_, lock, std::chrono::milliseconds(kFollowPollMs));
  }
  follow_wait_seconds_ += Seconds(clock_->Now() - start);
  const double idle = Seconds(clock_->Now() - last_arrival_);
  if (options_.slow_wait_warning_seconds <= 0 || idle < next_warning_) return;
  next_warning_ = std::min(2 * next_warning_, std::max(600.0, next_warning_));
  const uint64_t served = carried_.position;
  log_("libshard: follow mode: waiting for new samples of " + path_ + ": nothing new committed "
       "for " + Fixed(idle, 0) + " s; " + std::to_string(progress_.samples) + " samples "
       "committed so far, this epoch at position " + std::to_string(served) + " (step " +
       std::to_string(next_step_) + " of this rank); waiting for " + progress_.waiting_for +
       ". If the writer stopped or died, start it again on the same directory (libshard.Writer "
       "or `libshard pack --resume` continue from its journal) and this loader goes on where it "
       "is; if it is only slow, this wait ends when it commits (its commit_interval) - raise "
       "slow_wait_warning_seconds to hear less of it");
}

Result<std::optional<Batch>> FollowLoader::NextFollowed() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return Status::Aborted("the loader was stopped (Loader::Stop)");
    }
    Loader* inner = inner_.get();  // replaced only on this thread
    if (inner != nullptr) {
      Result<std::optional<Batch>> r = inner->Next();
      carried_ = inner->state();  // FollowSteps' states: the follow epoch's cursor
      if (!r.ok() || r->has_value()) return r;
      ReplaceInner(nullptr);  // its steps are served
      next_step_ = inner_end_;
    }
    if (epoch_over_) return std::optional<Batch>();
    if (progress_.complete && next_step_ >= order_->KnownSteps(progress_.samples, true)) {
      epoch_over_ = true;
      carried_.position = progress_.samples;  // ORDER.md §4: N after the epoch's last step
      return std::optional<Batch>();
    }
    LIBSHARD_ASSIGN_OR_RETURN(const bool started, StartSnapshot());
    if (started) continue;
    LIBSHARD_ASSIGN_OR_RETURN(const bool news, Poll());
    if (!news) WaitForWriter();
  }
}

Result<std::optional<Batch>> FollowLoader::Next() {
  if (following_) return NextFollowed();
  Loader* inner = inner_.get();
  if (inner == nullptr) return Status::Aborted("the loader was stopped (Loader::Stop)");
  return inner->Next();
}

Status FollowLoader::StartCompleteEpoch(LoaderOptions options) {
  while (complete_ == nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return Status::Aborted("the loader was stopped (Loader::Stop)");
    }
    Result<std::shared_ptr<Dataset>> ds = Dataset::Open(path_, dataset_options_);
    if (ds.ok()) {
      complete_ = std::move(ds).value();
      if (complete_->size() != progress_.samples)
        log_("libshard: follow mode: " + path_ + " has " + std::to_string(complete_->size()) +
             " samples, the write followed " + std::to_string(progress_.samples) +
             " (it was added to after it was complete); later epochs read all of them");
      break;
    }
    // A multi-rank write: its last rank joins the parts right after it finished its own.
    if (ds.status().code() != StatusCode::kNotFound || progress_.writers <= 1)
      return ds.status().WithContext("follow mode: opening the complete dataset");
    const double waited = Seconds(clock_->Now() - last_arrival_);
    if (options_.slow_wait_warning_seconds > 0 && waited >= next_warning_) {
      next_warning_ = std::min(2 * next_warning_, std::max(600.0, next_warning_));
      log_("libshard: follow mode: every part of " + path_ + " is finished but they are not "
           "joined yet (" + Fixed(waited, 0) + " s); the last rank's Writer.close() joins them, "
           "or run `libshard merge --by-key " + path_ + " " + path_ + "/parts/rank-*`");
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!stopped_) clock_->WaitFor(stop_cv_, lock, std::chrono::milliseconds(kFollowPollMs));
  }
  // The epochs after the follow epoch: the global order of the complete dataset.
  options.order = factory_->order().get<FollowOrder>()->later();
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<Loader> inner,
                            StreamingLoader::Make(complete_, options, hooks_));
  following_ = false;
  ReplaceInner(std::move(inner));
  return Status::OK();
}

Status FollowLoader::SetEpoch(uint64_t epoch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status::Aborted("the loader was stopped (Loader::Stop)");
  }
  if (follow_epoch_ && epoch == *follow_epoch_) {
    StartFollowEpoch(epoch, 0, {});
    return Status::OK();
  }
  if (!progress_.complete) {
    LIBSHARD_ASSIGN_OR_RETURN(const bool news, Poll());
    (void)news;
  }
  if (!progress_.complete)
    return Status::InvalidArgument(
        "SetEpoch(" + std::to_string(epoch) + "): " + path_ + " is still being written (" +
        progress_.waiting_for + "); epochs after the follow epoch are shuffles of the complete "
        "dataset: finish the follow epoch first (it ends when the writer closes the dataset)");
  if (!following_ && inner_ != nullptr) return inner_->SetEpoch(epoch);
  LoaderOptions options = options_;
  options.resume.reset();  // the resumed seed and version are the factory's order's
  options.epoch = epoch;
  return StartCompleteEpoch(std::move(options));
}

LoaderState FollowLoader::state() const {
  if (following_) return carried_;
  if (inner_ == nullptr) return carried_;
  return inner_->state();
}

uint64_t FollowLoader::batches_per_epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!following_ && inner_ != nullptr) return inner_->batches_per_epoch();
  if (progress_.complete) return order_->EpochSteps(progress_.samples);
  const FollowPlan& plan = order_->plan();
  FollowPlan from0 = plan;
  from0.start_position = 0;
  return FollowSequence(from0).KnownSteps(progress_.samples, false);
}

bool FollowLoader::batches_per_epoch_known() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !following_ || progress_.complete;
}

LoaderStats FollowLoader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  LoaderStats s = inner_ != nullptr ? inner_->stats() : LoaderStats{};
  const LoaderStats& d = done_stats_;
  s.samples_delivered += d.samples_delivered;
  s.batches_delivered += d.batches_delivered;
  s.bytes_delivered += d.bytes_delivered;
  s.bytes_read += d.bytes_read;
  s.wait_seconds += d.wait_seconds + follow_wait_seconds_;
  s.checksum_failures += d.checksum_failures;
  s.samples_skipped += d.samples_skipped;
  s.samples_repeated += d.samples_repeated;
  s.batch_positions += d.batch_positions;
  s.padding_positions += d.padding_positions;
  s.arena_peak = std::max(s.arena_peak, d.arena_peak);
  s.worker_backlog_peak = std::max(s.worker_backlog_peak, d.worker_backlog_peak);
  s.elapsed_seconds += d.elapsed_seconds + follow_wait_seconds_;
  s.throughput_gbps = s.elapsed_seconds > 0 ? s.bytes_read / s.elapsed_seconds / 1e9 : 0;
  s.wait_share = s.elapsed_seconds > 0 ? std::min(1.0, s.wait_seconds / s.elapsed_seconds) : 0;
  s.padding_share =
      s.batch_positions > 0 ? static_cast<double>(s.padding_positions) / s.batch_positions : 0;
  return s;
}

void FollowLoader::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  if (inner_ != nullptr) inner_->Stop();
  stop_cv_.notify_all();
}

}  // namespace libshard
