// FollowLoader: the Loader of follow mode (FollowOrder, Loader::Follow): trains on a
// dataset while its writer still writes it (docs/FORMAT.md §6.1, docs/ORDER.md §7).
//
// The follow epoch runs as a series of StreamingLoaders, each over a snapshot of the followed
// dataset (DatasetFollower::Snapshot) and the steps of the follow order that snapshot decides
// (FollowSteps): when one has served its steps, the next continues at the next step, over a
// newer snapshot. In between, Next() polls the follower (every kFollowPollMs) and, while nothing
// new arrives, logs a warning after slow_wait_warning_seconds naming the dataset, what was
// served and what it waits for, then at doubling intervals. The epoch ends when the stream is
// complete and every step was served. Later epochs are one StreamingLoader over the complete
// dataset (Dataset::Open of the path: one writer's dataset, or the parts' join), as Loader::Create
// makes them. Resume (LoaderOptions::resume) continues the follow epoch from a FollowCursor
// state, else a later epoch of the complete dataset.
//
// Thread-safety as Loader: Next, SetEpoch and state on the consumer's thread; stats, Stop and
// batches_per_epoch from any thread (`mu_` guards what they read).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "libshard/follow.h"
#include "libshard/loader.h"
#include "loader/diagnostics.h"
#include "loader/follow_order.h"
#include "loader/step_factory.h"

namespace libshard {

// How often a waiting follow loader looks for new samples.
inline constexpr int kFollowPollMs = 100;

class FollowLoader final : public Loader {
 public:
  static Result<std::unique_ptr<Loader>> Make(const std::string& path, const LoaderOptions& options,
                                              const DatasetOptions& dataset_options,
                                              DiagnosticsHooks hooks = {});
  ~FollowLoader() override;

  Result<std::optional<Batch>> Next() override;
  Status SetEpoch(uint64_t epoch) override;
  LoaderState state() const override;
  uint64_t batches_per_epoch() const override;
  bool batches_per_epoch_known() const override;
  LoaderStats stats() const override;
  void Stop() override;
  const LoaderOptions& options() const override { return options_; }

 private:
  FollowLoader(std::string path, LoaderOptions options, DatasetOptions dataset_options,
               DiagnosticsHooks hooks);
  Status Init();
  // Starts the follow epoch `epoch` at position `position` with `skipped` (a resume's, or empty).
  void StartFollowEpoch(uint64_t epoch, uint64_t position, std::vector<uint64_t> skipped);
  // The follow epoch's Next.
  Result<std::optional<Batch>> NextFollowed();
  // A StreamingLoader over a new snapshot for the steps it decides from the next one on; false
  // when it decides none yet.
  Result<bool> StartSnapshot();
  // Polls the follower and records its progress; true when new samples arrived.
  Result<bool> Poll();
  // Waits up to kFollowPollMs (of the clock) or until Stop; warns when nothing came for long.
  void WaitForWriter();
  // Opens the complete dataset (waiting for a multi-rank write's join) and starts an ordinary
  // epoch over it with `options` (its resume, when set, says where).
  Status StartCompleteEpoch(LoaderOptions options);
  // Where the follow epoch stands between its StreamingLoaders.
  LoaderState FollowState() const;
  // Replaces the StreamingLoader, adding the counters of the one it replaces to `done_stats_`.
  void ReplaceInner(std::unique_ptr<Loader> next);

  const std::string path_;
  LoaderOptions options_;  // resolved
  const DatasetOptions dataset_options_;
  DiagnosticsHooks hooks_;
  std::shared_ptr<const LoaderClock> clock_;
  LogSink log_;
  std::unique_ptr<DatasetFollower> follower_;
  // The follow order's epochs (the follow epoch's snapshots' steps) and what a resume decided of
  // it (seed, version, shuffle window).
  std::unique_ptr<StepFactory> factory_;

  // The follow epoch (consumer thread only).
  bool following_ = false;           // the current epoch is the follow epoch
  std::optional<uint64_t> follow_epoch_;  // which epoch that is (unknown after a later resume)
  std::optional<FollowSequence> order_;
  uint64_t follow_start_ = 0;        // the follow epoch's start position (a resume's, or 0)
  uint64_t next_step_ = 0;           // the follow epoch's next step (of this rank)
  uint64_t inner_end_ = 0;           // the step after the last one `inner_` serves
  LoaderState carried_;              // the state between StreamingLoaders of the follow epoch
  std::optional<uint64_t> identity_;  // the dataset's recorded identity digest, when known
  bool epoch_over_ = false;          // the follow epoch's last step was served
  std::shared_ptr<Dataset> complete_;  // the complete dataset, once opened
  LoaderClock::TimePoint last_arrival_;
  double next_warning_ = 0;          // seconds without arrivals before the next warning
  double follow_wait_seconds_ = 0;   // time Next() spent waiting for the writer

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable stop_cv_;
  bool stopped_ = false;
  std::unique_ptr<Loader> inner_;
  FollowProgress progress_;
  LoaderStats done_stats_;  // counters of the StreamingLoaders already replaced
};

}  // namespace libshard
