// BatchConsumer: the consuming half of the StreamingLoader. Next() waits until the items of the
// next batch (step) are ready at the front of the queue (loader/item_queue.h), takes them in
// step order (which is the reorder stage), and applies the error policy: OnError::kRaise
// returns a failed sample's error, OnError::kSkip drops it, records it in the state and, for a
// batch that lost every sample, repeats a stand-in sample in its place. While it waits it tells
// apart reads that will complete, a batch that can never fit the arena (an error) and memory the
// consumer itself holds (a warning, then an error), through LoaderDiagnostics.
//
// Thread-safety: Next() and OnNewEpochLocked() are called by the consumer thread, state() from
// any thread; shared fields are guarded by ItemQueue::mu.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "libshard/loader.h"
#include "loader/diagnostics.h"
#include "loader/read_scheduler.h"
#include "loader/item_queue.h"
#include "memory/arena.h"

namespace libshard {

class BatchConsumer {
 public:
  // Every argument must outlive this object. `state` is where the stream stands at creation.
  BatchConsumer(const LoaderOptions& options, ItemQueue* queue, ReadScheduler* scheduler,
                memory::Arena* arena, LoaderDiagnostics* diagnostics, LoaderState state);

  Result<std::optional<Batch>> Next();
  // The state after the last batch returned by Next().
  LoaderState state() const;
  // Requires ItemQueue::mu. The stream restarts in epoch `epoch`, at its beginning or (a resume
  // of a caller-given order) after `position` steps, with the samples skipped before then.
  void OnNewEpochLocked(uint64_t epoch, uint64_t position = 0,
                        std::vector<uint64_t> skipped = {});

 private:
  using Clock = LoaderClock;
  // How long Next() waits for the consumer to release arena memory before ResourceExhausted.
  double HeldMemoryTimeout() const;
  // Requires ItemQueue::mu.
  Status StuckError(uint64_t batch) const;

  const LoaderOptions& options_;
  ItemQueue* const queue_;
  ReadScheduler* const scheduler_;
  memory::Arena* const arena_;
  LoaderDiagnostics* const diagnostics_;

  // Guarded by ItemQueue::mu.
  LoaderState state_;
  // OnError::kSkip: the first sample of the last batch delivered, repeated in place of a batch
  // that lost every sample. Dropped whenever memory is short.
  std::optional<Sample> stand_in_;
};

}  // namespace libshard
