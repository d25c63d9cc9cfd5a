// ReadScheduler: the producing half of the StreamingLoader. A thread walks this rank's steps
// (ItemQueue::steps) item by item (one item = one sample of one batch), takes an arena slot for
// each, splits its read into `read_size` sub-reads and keeps `queue_depth` of them in flight on
// the IoEngine, never letting the queue drain between samples. Completed items that need a
// checksum or zstd decoding go to worker threads; the others become Samples on the scheduler
// thread. Finished items are marked ready in the queue, where the consumer takes them. Every
// byte in flight or waiting lives in the arena, so the arena budget bounds all queues.
//
// It owns the shard files, the engine, the scheduler thread and the worker threads. Its shared
// state is guarded by ItemQueue::mu; the engine is used by the scheduler thread only (plus Wake()
// from anywhere). read_scheduler.cc sets it up and runs the scheduler thread; read_completion.cc
// completes, checks and decodes the items.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/file.h"
#include "io/io_engine.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "loader/diagnostics.h"
#include "loader/item_queue.h"
#include "memory/arena.h"

namespace libshard {

// The arena bytes (read and decoded slots) of the samples one full queue of reads covers, from
// the dataset's mean sample: `queue_depth` sub-reads of `read_size` cover queue_depth /
// ceil(stored / read_size) samples. 0 for an empty dataset.
uint64_t FullQueueSlotBytes(const Dataset& dataset, uint32_t queue_depth, uint64_t read_size);

// How far the reads of a compressed dataset run ahead of its decoding threads, in arena bytes
// (read and decoded slots). Computed once per loader from the dataset's mean sample.
struct DecodeAheadBounds {
  // Slots of compressed samples whose reads are in flight: 32 MiB per worker, within a quarter
  // of the arena, and at least two mean samples per worker within half of it (a tight
  // memory_budget). A virtual disk completes a queue of reads at once (its completions come in
  // waves), and the reads in flight share its bandwidth, so fewer bytes at once land sooner and
  // as fast. A whole queue of 64 reads of ~3 MB samples held ~300 MiB of slots: more than the
  // backlog below, so each landing wave stopped the reads until the workers had decoded half of
  // it, and reading and decoding took turns (issue 26: auto loaded ~1.0x the raw dataset where
  // samples are ~3 MB; 1.3-1.4x with this bound; docs/performance.md).
  uint64_t reading_bytes = 0;
  // Slots of compressed samples read and waiting for (or in) decoding: the worker backlog. 64
  // MiB per worker within a quarter of the arena (tens of ms of decoding: on a busy host the
  // scheduler thread may wait that long for a core, and a smaller backlog ran dry), and at
  // least two queues of reads (each the smaller of a full queue and the reading bound) within
  // three quarters of the arena, so that a landing queue of reads fits beside one being decoded
  // where the arena is tight.
  uint64_t backlog_bytes = 0;
};
DecodeAheadBounds ComputeDecodeAheadBounds(const Dataset& dataset, uint32_t nworkers,
                                           uint32_t queue_depth, uint64_t read_size,
                                           uint64_t arena_budget);

class ReadScheduler {
 public:
  // Opens the shards (io_mode, or LIBSHARD_IO_MODE under kAuto), creates the engine (engine, or
  // LIBSHARD_ENGINE under kAuto), registers the arena with it and starts the worker threads.
  // `queue`, `arena` and `diagnostics` must outlive the scheduler.
  static Result<std::unique_ptr<ReadScheduler>> Create(
      std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
      std::vector<size_t> field_indices, memory::Arena* arena, ItemQueue* queue,
      LoaderDiagnostics* diagnostics);
  // Stops the scheduler thread and joins every thread; reads in flight are cancelled.
  ~ReadScheduler();
  ReadScheduler(const ReadScheduler&) = delete;
  ReadScheduler& operator=(const ReadScheduler&) = delete;

  // Starts the scheduler thread at the beginning of ItemQueue::steps. The pipeline must be stopped
  // (just created, or after StopPipeline()) and the queue empty.
  void Start();
  // Stops the scheduler thread, cancels the reads in flight, waits until no worker runs and
  // empties the queue (its slots go back to the arena).
  void StopPipeline();
  // Makes the scheduler thread re-check its conditions now (memory was released, Stop()).
  // Any thread.
  void Wake();
  // Requires ItemQueue::mu. ItemQueue::steps grew (the read-ahead's announced order): a
  // scheduler that reached its end goes on.
  void OnStepsAddedLocked();
  // Requires ItemQueue::mu. No item waits for or runs on a worker thread.
  bool WorkersIdle() const { return tasks_.empty() && active_tasks_ == 0; }
  // The I/O part of the stats: reads in flight, engine, O_DIRECT. Any thread.
  void FillStats(LoaderStats* s) const;

 private:
  using Clock = LoaderClock;
  // A sub-read the engine holds (scheduler writes; FillStats reads under inflight_mu_).
  struct Inflight {
    Item* item = nullptr;
    uint64_t offset = 0;
    uint64_t length = 0;
    Clock::TimePoint start;
  };

  ReadScheduler(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                std::vector<size_t> field_indices, memory::Arena* arena, ItemQueue* queue,
                LoaderDiagnostics* diagnostics);
  Status OpenFiles();
  Status CreateEngine();

  void SchedulerLoop();
  Status SchedulerStep();
  // Creates the next item of the steps when memory allows; false when blocked or done.
  Result<bool> StartNextItem();
  // s3:// datasets: announces the reads of the samples after the last item started to the cache
  // filler, in step order, while it has room (read-ahead). Requires queue_->mu.
  void PrefetchAhead(const StepSequence& steps, ShardFiller* filler);
  // What the item of `sample` reads: PlanRead, or with sequence parallelism this rank's slice
  // (`sp` says which) as a row-range read. `sample` is batch[at], its step's samples: a rule
  // that splits the packed row of a batch (speculators) places it after the ones before it.
  Result<ReadLayout> PlanItem(uint64_t sample, const SampleLocation& location,
                              std::span<const uint64_t> batch, size_t at,
                              Sample::SequenceParallelSlice* sp) const;
  // `offset`, `length`: the sub-read's place within the item's read.
  void OnSubReadDone(Item* item, const io::ReadCompletion& c, uint64_t offset, uint64_t length);
  void FinishRead(Item* item);
  // Turns a fully read (and verified/decoded) item into its Sample or error; marks it ready.
  void Complete(Item* item, Status status);
  Status VerifyAndDecode(Item* item);
  // An s3:// dataset's item that failed VerifyAndDecode with `failure` (a Corruption): its
  // cached range fetched again into its slot and checked again (ShardFiller::Heal), or
  // `failure` for a local dataset.
  Status HealItem(Item* item, const Status& failure);
  // Whether `item` is checked: verification is on, and it was read whole (the sample checksum)
  // or field by field (its field checksums, FORMAT.md §3.9).
  bool Verifies(const Item& item) const;
  void WorkerLoop();
  std::string ItemWhere(const Item& item) const;

  const std::shared_ptr<const Dataset> dataset_;
  const LoaderOptions& options_;  // the loader's, which outlives this
  const std::vector<size_t> field_indices_;
  // What a partial read must cover to be checked (the dataset's field checksums decide).
  const PartialCheck partial_check_;
  memory::Arena* const arena_;
  ItemQueue* const queue_;
  LoaderDiagnostics* const diagnostics_;
  uint64_t read_size_ = 0;
  uint32_t queue_depth_ = 0;

  std::vector<io::File> files_;
  bool direct_io_ = false;
  std::string io_note_;          // why the first buffered shard is not read with O_DIRECT
  uint64_t buffered_shards_ = 0;
  std::unique_ptr<io::IoEngine> engine_;
  std::string engine_note_;      // why not io_uring, or what buffer registration did

  std::thread scheduler_;
  std::vector<std::thread> workers_;

  // Guarded by queue_->mu:
  std::condition_variable work_cv_;    // workers: a task, or shutdown
  std::condition_variable idle_cv_;    // pipeline reset: workers went idle
  std::deque<Item*> tasks_;
  uint32_t active_tasks_ = 0;
  // The worker backlog: items of samples stored compressed whose reads are done and that wait
  // for (or are in) decoding, their count and their arena bytes. When decoding is slower than the reads,
  // reading further ahead only parks more read and decoded slots in the arena - a compressed
  // dataset's arena then grew to its whole budget, each new page zeroed by the kernel (a third
  // of the loader's CPU on small datasets) - so the scheduler starts no new item while the
  // backlog holds both backlog_bound_items_ items (work for every worker) and
  // backlog_bound_bytes_ (DecodeAheadBounds above), until the workers have taken half of it.
  // The items already started then land on top of it (at most
  // queue_depth + 1: one sub-read each at least, and the one being issued), so the backlog
  // stays below the bound plus those, as the reads of a raw dataset stay below queue_depth.
  // backlog_peak_ is LoaderStats::worker_backlog_peak.
  uint64_t backlog_items_ = 0;
  uint64_t backlog_bytes_ = 0;
  uint64_t backlog_peak_ = 0;
  uint64_t backlog_bound_items_ = 0;
  uint64_t backlog_bound_bytes_ = 0;
  // Scheduler thread only: the slot bytes of compressed items being read (Item::reading_bytes),
  // and their bound (DecodeAheadBounds::reading_bytes): no new compressed item starts above it.
  uint64_t reading_bytes_ = 0;
  uint64_t reading_bound_bytes_ = 0;
  // Scheduler thread: the item's reads are over (or will never be issued).
  void DoneReading(Item* item) {
    reading_bytes_ -= item->reading_bytes;
    item->reading_bytes = 0;
  }
  bool blocked_on_backlog_ = false;   // the scheduler waits for a worker to take items
  // Requires ItemQueue::mu. Full: the scheduler blocks (blocked_on_backlog_); low: half of it,
  // where a worker unblocks it, so reads resume as a batch at full queue depth rather than one
  // per decoded item (each then waited for the scheduler thread to get a core twice).
  bool BacklogFull() const {
    return backlog_items_ >= backlog_bound_items_ && backlog_bytes_ >= backlog_bound_bytes_;
  }
  bool BacklogLow() const {
    return 2 * backlog_items_ < backlog_bound_items_ || 2 * backlog_bytes_ < backlog_bound_bytes_;
  }
  bool workers_exit_ = false;
  bool pipeline_stop_ = false;
  bool steps_done_ = false;            // every item of the epoch was created
  // Scheduler cursor (guarded by queue_->mu; reset only while the thread is stopped).
  uint64_t sched_batch_ = 0;
  std::vector<uint64_t> sched_samples_;
  size_t sched_in_batch_ = 0;
  // Read-ahead cursor of PrefetchAhead (s3:// only), in the same step order.
  uint64_t pf_batch_ = 0;
  std::vector<uint64_t> pf_samples_;
  size_t pf_in_batch_ = 0;
  uint64_t pf_seq_ = 0;

  // Scheduler thread only.
  Item* issuing_ = nullptr;            // item whose sub-reads are not all submitted
  Item* awaiting_ = nullptr;           // s3://: item waiting for its cache blocks (then issuing_)
  // The last item of the batch the consumer waits for was started: submit and reap before
  // starting more, so the first batch of an epoch does not wait for queue_depth items to be
  // located (each may load an index block, FORMAT.md §3.8.7: a shuffled order touches a
  // different block per sample).
  bool consumer_batch_started_ = false;
  uint64_t next_read_id_ = 1;

  mutable std::mutex inflight_mu_;
  std::map<uint64_t, Inflight> inflight_;  // by read id
};

}  // namespace libshard
