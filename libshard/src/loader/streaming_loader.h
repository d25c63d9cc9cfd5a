// StreamingLoader: the Loader implementation (libshard/loader.h), a composition of
//   - the item queue (loader/item_queue.h): the items between the two halves, and the one lock;
//   - the read scheduler (loader/read_scheduler.h): step cursor, arena slots, engine, workers;
//   - the batch consumer (loader/batch_consumer.h): Next(), waiting, the error policy;
//   - diagnostics (loader/diagnostics.h): stats counters and warnings, on an injectable clock
//     and log sink;
//   - with LoaderOptions::collate, the collate stage (loader/collate_stage.h): each batch copied
//     into one region of a second, batch arena.
// This class validates the options, sizes the arena, wires the parts together and owns the
// epoch (SetEpoch) and the stats snapshot.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libshard/loader.h"
#include "loader/collate_stage.h"
#include "loader/batch_consumer.h"
#include "loader/diagnostics.h"
#include "loader/order.h"
#include "loader/read_scheduler.h"
#include "loader/item_queue.h"
#include "loader/step_factory.h"
#include "memory/arena.h"

namespace libshard {

class StreamingLoader final : public Loader {
 public:
  // `hooks`: the clock and log sink of the diagnostics (tests); defaults when empty.
  static Result<std::unique_ptr<Loader>> Make(std::shared_ptr<const Dataset> dataset,
                                              const LoaderOptions& options,
                                              DiagnosticsHooks hooks = {});
  // A loader whose first epoch is `steps`, made by another loader's StepFactory (follow mode: one
  // snapshot's steps of the follow epoch, loader/follow_loader.h), from where `state` stands,
  // instead of the first epoch of `options` (whose resume is ignored). SetEpoch afterwards plans
  // as usual.
  static Result<std::unique_ptr<StreamingLoader>> MakeWithSteps(
      std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
      std::shared_ptr<const StepSequence> steps, LoaderState state, DiagnosticsHooks hooks = {});
  ~StreamingLoader() override;

  Result<std::optional<Batch>> Next() override;
  Status SetEpoch(uint64_t epoch) override;
  Status SetEpochSteps(uint64_t epoch, EpochSteps steps) override;
  LoaderState state() const override;
  uint64_t batches_per_epoch() const override;
  LoaderStats stats() const override;
  void Stop() override;
  const LoaderOptions& options() const override { return options_; }

 private:
  StreamingLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                  DiagnosticsHooks hooks);
  Status Init();
  // A node-local order over an s3:// dataset whose cache_size is smaller than what this node's
  // share fills in cache blocks: a warning saying how much each epoch fetches again.
  Status WarnIfShareExceedsCache() const;
  // Replaces the epoch's steps with those the factory makes of `start` and starts the scheduler
  // on them (a CallerOrder before its first epoch: none); the pipeline must be stopped.
  Status StartEpoch(const EpochStart& start);
  uint64_t DatasetFootprint() const;
  // Sample `index`'s length as delivered (clipped to max_len), for the padding stats.
  uint64_t SampleLength(uint64_t index) const;
  // With a collate: the bytes the largest batch's region may need, estimated from the index
  // (sample 0's other dimensions, the longest length, the batching options); 0 if unknown.
  uint64_t LargestBatchEstimate(const std::vector<size_t>& fields) const;

  const std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  // The dataset's identity digest when its manifest records one (state()'s origin).
  std::optional<uint64_t> identity_;
  // MakeWithSteps: the first epoch's steps and where the stream stands (else null / unset).
  std::shared_ptr<const StepSequence> given_steps_;
  std::optional<LoaderState> given_state_;
  // Every sample's length clipped to max_len, for token batching and bucketing (else null).
  std::shared_ptr<const std::vector<uint64_t>> lengths_;
  // The order's epochs (loader/step_factory.h).
  std::unique_ptr<StepFactory> factory_;
  // Destroyed in reverse order: the consumer's stand-in and the scheduler go before the arena
  // and the item queue they use.
  LogSink log_;  // the diagnostics' sink, for the one line Init may print
  std::string pin_note_;  // why the arena is not pinned when that was decided at Init, else empty
  LoaderDiagnostics diagnostics_;
  std::shared_ptr<memory::Arena> arena_;
  ItemQueue queue_;
  std::unique_ptr<ReadScheduler> scheduler_;
  std::unique_ptr<BatchConsumer> consumer_;
  // With a collate only: the batch arena (1/4 of memory_budget) and the stage that fills it.
  std::shared_ptr<memory::Arena> batch_arena_;
  std::unique_ptr<CollateStage> collate_;
  // CallerOrder: the resume state not yet applied (the first SetEpochSteps applies or drops
  // it), and whether an epoch was given. Consumer thread only.
  std::optional<LoaderState> pending_resume_;
  bool epoch_given_ = false;
};

}  // namespace libshard
