// StreamingLoader: the Loader implementation (libshard/loader.h).
//
// Pipeline: a scheduler thread walks this rank's plan (loader/order.h) item by item (one item =
// one sample of one batch), takes an arena slot for each, splits its read into `read_size`
// sub-reads and keeps `queue_depth` of them in flight on the IoEngine, never letting the queue
// drain between samples. Completed items that need a checksum or zstd decoding go to worker
// threads; the others become Samples on the scheduler. The consumer (Next()) takes items strictly
// in plan order, which is the reorder stage. Every byte in flight or waiting lives in the arena,
// so the arena budget bounds all queues.
//
// Locking: `mu_` guards the window of items (their shared fields), the worker queue and the
// counters; the engine is used by the scheduler thread only (plus Wake() from anywhere).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io/file.h"
#include "io/io_engine.h"
#include "libshard/loader.h"
#include "loader/order.h"
#include "loader/read_layout.h"
#include "memory/arena.h"
#include "memory/prefaulter.h"

namespace libshard {

class StreamingLoader final : public Loader {
 public:
  static Result<std::unique_ptr<Loader>> Make(std::shared_ptr<const Dataset> dataset,
                                              const LoaderOptions& options);
  ~StreamingLoader() override;

  Result<std::optional<Batch>> Next() override;
  Status SetEpoch(uint64_t epoch) override;
  LoaderState state() const override;
  uint64_t batches_per_epoch() const override;
  LoaderStats stats() const override;
  void Stop() override;
  const LoaderOptions& options() const override { return options_; }

 private:
  using Clock = std::chrono::steady_clock;

  // One sample of one batch on its way to the consumer.
  struct Item {
    uint64_t seq = 0;     // position in this rank's item sequence of the epoch
    uint64_t sample = 0;
    SampleLocation location;
    ReadLayout layout;
    std::shared_ptr<std::byte> read_slot;  // destination of the reads
    std::shared_ptr<std::byte> raw_slot;   // decoded payload (compressed samples only)
    uint64_t slot_bytes = 0;               // arena bytes held by read_slot + raw_slot
    // Scheduler only:
    uint64_t next_sub = 0;     // next sub-read offset within the read
    uint32_t subs_pending = 0;
    uint64_t bytes_read = 0;   // sum over finished sub-reads (short only at EOF)
    Status error;
    // Guarded by mu_:
    bool ready = false;
    std::optional<Sample> result;
  };
  // A sub-read the engine holds (scheduler writes; stats() reads under inflight_mu_).
  struct Inflight {
    Item* item = nullptr;
    uint64_t offset = 0;
    uint64_t length = 0;
    Clock::time_point start;
  };

  StreamingLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options);
  Status Init();
  Status OpenFiles();
  Status StartEpoch(const PlanOptions& plan_options);
  void StopPipeline();

  void SchedulerLoop();
  Status SchedulerStep(bool* idle);
  // Creates the next item of the plan when memory allows; false when blocked or done.
  Result<bool> StartNextItem();
  // `offset`, `length`: the sub-read's place within the item's read.
  void OnSubReadDone(Item* item, const io::ReadCompletion& c, uint64_t offset, uint64_t length);
  void FinishRead(Item* item);
  // Turns a fully read (and verified/decoded) item into its Sample or error; marks it ready.
  void Complete(Item* item, Status status);
  Status VerifyAndDecode(Item* item);
  // Whether `item`'s checksum is checked: verification is on and the read covers the whole
  // stored extent (LoaderOptions::verify_partial_reads).
  bool Verifies(const Item& item) const;
  void WorkerLoop();
  void MaybePrintStats();
  void WarnSlowWait(double waited, uint64_t batch);
  std::string ItemWhere(const Item& item) const;
  Status StuckError(uint64_t batch) const;
  // How long Next() waits for the consumer to release arena memory before ResourceExhausted.
  double HeldMemoryTimeout() const;
  uint64_t DatasetFootprint() const;

  const std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  std::vector<size_t> field_indices_;
  std::vector<uint64_t> lengths_;  // clipped to max_len, for token batching
  std::shared_ptr<memory::Arena> arena_;
  std::vector<io::File> files_;
  bool direct_io_ = false;
  // Faults arena chunks in ahead of their lazy registration with io_uring (created on the
  // engine's first request). Declared before the engine, which calls it, so destroyed after.
  std::unique_ptr<memory::Prefaulter> prefaulter_;
  std::unique_ptr<io::IoEngine> engine_;
  std::string engine_note_;
  std::string io_note_;          // why the first buffered shard is not read with O_DIRECT
  uint64_t buffered_shards_ = 0;
  uint64_t read_size_ = 0;
  uint32_t queue_depth_ = 0;
  std::vector<std::thread> workers_;
  std::thread scheduler_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;   // consumer: an item became ready, or stop
  std::condition_variable work_cv_;    // workers: a task, or shutdown
  std::condition_variable idle_cv_;    // pipeline reset: workers went idle
  std::deque<std::unique_ptr<Item>> window_;  // unconsumed items in plan order
  std::deque<Item*> tasks_;
  uint32_t active_tasks_ = 0;
  bool workers_exit_ = false;
  bool pipeline_stop_ = false;
  std::atomic<bool> stopped_{false};
  Status fatal_;                       // a scheduler failure, returned by Next()
  uint64_t pipeline_bytes_ = 0;        // arena bytes held by window_ items
  bool blocked_on_memory_ = false;     // scheduler could not get a slot (and nothing in flight)
  uint64_t blocked_need_ = 0;
  bool plan_done_ = false;             // every item of the epoch was created

  // The plan; replaced only while the pipeline is stopped.
  std::optional<EpochPlan> plan_;
  LoaderState state_;
  uint64_t next_batch_ = 0;            // consumer: next step of the plan
  // Scheduler cursor.
  uint64_t sched_batch_ = 0;
  std::vector<uint64_t> sched_samples_;
  size_t sched_in_batch_ = 0;
  uint64_t next_seq_ = 0;
  Item* issuing_ = nullptr;            // item whose sub-reads are not all submitted

  mutable std::mutex inflight_mu_;
  std::map<uint64_t, Inflight> inflight_;  // by read id
  uint64_t next_read_id_ = 1;

  // Statistics (guarded by mu_ unless atomic).
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> checksum_failures_{0};
  uint64_t samples_delivered_ = 0;
  uint64_t batches_delivered_ = 0;
  uint64_t bytes_delivered_ = 0;
  uint64_t samples_skipped_ = 0;
  // While Next() waits: the consumer needs the items with seq below this; 0 when not waiting.
  uint64_t wake_before_seq_ = 0;
  uint64_t samples_repeated_ = 0;
  // OnError::kSkip: the first sample of the last batch delivered, repeated in place of a batch
  // that lost every sample. Consumer thread only (under mu_); dropped whenever memory is short.
  std::optional<Sample> stand_in_;
  double wait_seconds_ = 0;
  std::optional<Clock::time_point> first_next_;
  Clock::time_point last_stats_print_;
  double stats_interval_ = 0;
};

}  // namespace libshard
