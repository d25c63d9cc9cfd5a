// The item queue: the items between the read scheduler (loader/read_scheduler.h), which creates
// them in step order and fills them, and the consumer (loader/batch_consumer.h), which takes them
// from the front strictly in step order, and what the two sides tell each other. Every mutable
// field is guarded by `mu`, the loader's one lock for the pipeline. (Not a "window": that word
// is length-aware batching's, LoaderOptions::bucket_window.)
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "libshard/dataset.h"
#include "libshard/sample.h"
#include "libshard/status.h"
#include "loader/step_sequence.h"
#include "loader/read_layout.h"
#include "remote/shard_filler.h"

namespace libshard {

// Arena slots, offsets and read lengths are multiples of this (FORMAT.md: samples start on
// 4 KiB boundaries).
inline constexpr uint64_t kSlotAlign = 4096;
inline constexpr uint64_t SlotBytes(uint64_t n) {
  return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
}
// Bounds the bookkeeping for tiny samples: the scheduler creates no item of a later batch while
// the queue holds this many.
inline constexpr size_t kMaxQueuedItems = 1 << 16;
// How often the scheduler and the consumer re-check their conditions while waiting.
inline constexpr int kPollMs = 100;

// One sample of one batch on its way to the consumer.
struct Item {
  uint64_t seq = 0;     // position in this rank's item sequence of the epoch
  uint64_t step = 0;    // the step (StepSequence) it belongs to
  uint64_t sample = 0;
  SampleLocation location;
  ReadLayout layout;
  Sample::SequenceParallelSlice sp;      // sequence parallelism: the slice it reads
  std::shared_ptr<std::byte> read_slot;  // destination of the reads
  std::shared_ptr<std::byte> raw_slot;   // decoded payload (compressed samples only)
  uint64_t slot_bytes = 0;               // arena bytes held by read_slot + raw_slot
  // Scheduler thread only:
  uint64_t next_sub = 0;     // next sub-read offset within the read
  uint32_t subs_pending = 0;
  uint64_t bytes_read = 0;   // sum over finished sub-reads (short only at EOF)
  uint64_t reading_bytes = 0;  // slot bytes counted in ReadScheduler::reading_bytes_ until read
  Status error;
  // s3:// datasets: the pins on the cache blocks the reads cover (one per cached range: the
  // extents of a row-range read, else the one read), from before the first sub-read is
  // submitted until the last one completes (FinishRead) or the item is dropped.
  std::vector<std::unique_ptr<ShardFiller::Hold>> cache_holds;
  // Guarded by ItemQueue::mu:
  bool ready = false;
  std::optional<Sample> result;
};

struct ItemQueue {
  mutable std::mutex mu;
  // The consumer waits on it: an item of the batch it waits for became ready, a fatal scheduler
  // error, the scheduler blocked on memory, or Stop().
  std::condition_variable ready_cv;
  std::atomic<bool> stopped{false};  // Loader::Stop() was called; set without `mu`

  std::deque<std::unique_ptr<Item>> items;  // unconsumed items in step order
  // This rank's steps of the epoch; replaced only while the scheduler thread is stopped.
  std::shared_ptr<const StepSequence> steps;
  uint64_t next_batch = 0;       // consumer: next step
  uint64_t next_seq = 0;         // scheduler: seq of the next item it creates
  uint64_t pipeline_bytes = 0;   // arena bytes held by `items`
  // While the consumer waits: it needs the items with seq below this; 0 when not waiting.
  uint64_t wake_before_seq = 0;
  bool blocked_on_memory = false;  // scheduler could not get a slot (and nothing in flight)
  uint64_t blocked_need = 0;       // the slot it could not get, bytes
  Status fatal;                    // a scheduler failure, returned by Next()

  // Requires `mu`. The start of a new epoch over `epoch_steps` (the queue must be empty).
  void Reset(std::shared_ptr<const StepSequence> epoch_steps) {
    steps = std::move(epoch_steps);
    next_batch = 0;
    next_seq = 0;
    blocked_on_memory = false;
    fatal = Status::OK();
  }
  // Requires `mu`. Removes every item and returns them, to be destroyed (releasing their slots)
  // after `mu` is released.
  std::deque<std::unique_ptr<Item>> TakeItems() {
    std::deque<std::unique_ptr<Item>> taken;
    taken.swap(items);
    pipeline_bytes = 0;
    return taken;
  }
};

}  // namespace libshard
