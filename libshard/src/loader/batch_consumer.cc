#include "loader/batch_consumer.h"

#include <algorithm>
#include <string>
#include <utility>

namespace libshard {

BatchConsumer::BatchConsumer(const LoaderOptions& options, ItemQueue* queue,
                             ReadScheduler* scheduler, memory::Arena* arena,
                             LoaderDiagnostics* diagnostics, LoaderState state)
    : options_(options),
      queue_(queue),
      scheduler_(scheduler),
      arena_(arena),
      diagnostics_(diagnostics),
      state_(std::move(state)) {}

LoaderState BatchConsumer::state() const {
  std::lock_guard<std::mutex> lock(queue_->mu);
  return state_;
}

void BatchConsumer::OnNewEpochLocked(uint64_t epoch, uint64_t position,
                                     std::vector<uint64_t> skipped) {
  state_.epoch = epoch;
  state_.position = position;
  state_.skipped = std::move(skipped);
}

double BatchConsumer::HeldMemoryTimeout() const {
  return std::max(1.0, 2 * options_.slow_wait_warning_seconds);
}

Status BatchConsumer::StuckError(uint64_t batch) const {
  return Status::ResourceExhausted(
      "batch " + std::to_string(batch) + " cannot be assembled: its samples need more than the " +
      "loader memory_budget of " + std::to_string(arena_->budget()) + " bytes (" +
      Mib(arena_->budget()) + ") at once (next sample needs " + Mib(queue_->blocked_need) +
      ", " + Mib(queue_->pipeline_bytes) + " already held for this batch); raise memory_budget "
      "or lower batch_size / max_tokens");
}

Result<std::optional<Batch>> BatchConsumer::Next() {
  const Clock& clock = diagnostics_->clock();
  diagnostics_->OnNext(clock.Now());
  ItemQueue& w = *queue_;
  std::unique_lock<std::mutex> lock(w.mu);
  double waited_total = 0;
  while (true) {
    if (w.stopped.load()) return Status::Aborted("the loader was stopped (Loader::Stop)");
    if (w.next_batch >= w.steps->steps()) return std::optional<Batch>();
    const uint64_t batch_index = w.next_batch;
    const uint64_t count = w.steps->StepSize(batch_index);

    // Wait until the batch's items are all ready (they are the front of the queue).
    const Clock::TimePoint wait_start = clock.Now();
    bool warned_slow = false;
    bool warned_held = false;
    bool stuck = false;
    Clock::TimePoint stuck_since;
    uint64_t stuck_in_use = 0;
    uint64_t stuck_seq = 0;
    while (true) {
      if (w.stopped.load()) return Status::Aborted("the loader was stopped (Loader::Stop)");
      if (!w.fatal.ok()) return w.fatal;
      auto batch_ready = [&] {
        bool ready = w.items.size() >= count;
        for (size_t k = 0; ready && k < count; ++k) ready = w.items[k]->ready;
        return ready;
      };
      if (batch_ready()) break;
      w.wake_before_seq = (w.items.empty() ? w.next_seq : w.items.front()->seq) + count;
      clock.WaitFor(w.ready_cv, lock, std::chrono::milliseconds(kPollMs));
      w.wake_before_seq = 0;
      if (batch_ready()) break;
      const double waited = Seconds(clock.Now() - wait_start);
      if (!warned_slow && options_.slow_wait_warning_seconds > 0 &&
          waited >= options_.slow_wait_warning_seconds) {
        warned_slow = true;
        lock.unlock();
        diagnostics_->WarnSlowWait(waited, batch_index);
        lock.lock();
      }
      // Memory: the scheduler cannot get a slot and nothing is in flight or decoding. An item
      // of the queue that is not ready yet is a read that will complete: progress, not stuck.
      bool pending = false;
      for (const auto& it : w.items) {
        if (!it->ready) {
          pending = true;
          break;
        }
      }
      if (w.blocked_on_memory && scheduler_->WorkersIdle() && !pending) {
        if (stand_in_) {
          // The stand-in for failed batches must never be what holds the stream up: let it go
          // (outside the lock: the release wakes the scheduler) and look again.
          std::optional<Sample> release = std::move(stand_in_);
          stand_in_.reset();
          lock.unlock();
          release.reset();
          lock.lock();
          continue;
        }
        const uint64_t in_use = arena_->in_use();
        // Any release, and any item scheduled since, restarts the clock.
        if (!stuck || in_use != stuck_in_use || w.next_seq != stuck_seq) {
          stuck = true;
          stuck_since = clock.Now();
          stuck_in_use = in_use;
          stuck_seq = w.next_seq;
        }
        const double stuck_for = Seconds(clock.Now() - stuck_since);
        const uint64_t held = in_use > w.pipeline_bytes ? in_use - w.pipeline_bytes : 0;
        if (held == 0 && arena_->largest_free() < w.blocked_need && stuck_for > 0.2) {
          // Nobody outside the loader holds memory, so nothing can ever free a slot.
          return StuckError(batch_index);
        }
        if (held > 0 && (stuck_for >= 1.0 || stuck_for >= HeldMemoryTimeout())) {
          const uint64_t slots = arena_->live_slots();
          uint64_t pipeline_slots = 0;
          for (const auto& it : w.items) pipeline_slots += (it->ready ? (it->result ? 1 : 0) : 1);
          const std::string what =
              "the consumer holds about " +
              std::to_string(slots > pipeline_slots ? slots - pipeline_slots : 0) + " samples (" +
              Mib(held) + ") of the " + Mib(arena_->budget()) + " memory_budget, so batch " +
              std::to_string(batch_index) + " cannot be read";
          if (stuck_for >= HeldMemoryTimeout()) {
            return Status::ResourceExhausted(
                what + ", and nothing was released for " + Fixed(stuck_for, 1) +
                " s; drop references to samples of earlier batches before calling Next(), or "
                "raise memory_budget");
          }
          if (!warned_held) {
            warned_held = true;
            diagnostics_->WarnHeldMemory(what);
          }
        }
      } else {
        stuck = false;
      }
    }
    waited_total += Seconds(clock.Now() - wait_start);

    Batch batch;
    batch.samples.reserve(count);
    Status error;
    const bool queue_full = w.items.size() >= kMaxQueuedItems;
    for (size_t k = 0; k < count; ++k) {
      std::unique_ptr<Item> item = std::move(w.items.front());
      w.items.pop_front();
      w.pipeline_bytes -= item->slot_bytes;
      if (item->result) {
        uint64_t bytes = 0;
        for (const TensorView& t : item->result->tensors()) bytes += t.nbytes;
        diagnostics_->AddBytesDelivered(bytes);
        batch.samples.push_back(std::move(*item->result));
      } else if (options_.on_error == OnError::kSkip) {
        state_.skipped.push_back(item->sample);
        diagnostics_->OnSkipped(item->sample, item->error);
      } else if (error.ok()) {
        error = item->error;
      }
    }
    ++w.next_batch;
    state_.position = w.steps->PositionAfter(batch_index);
    if (queue_full) scheduler_->Wake();
    diagnostics_->AddWait(waited_total);
    waited_total = 0;
    if (!error.ok()) return error;
    if (options_.on_error == OnError::kSkip) {
      if (!batch.samples.empty()) {
        stand_in_ = batch.samples.front();
      } else if (stand_in_) {
        // Every sample of the batch was skipped. Deliver a repeat of an earlier sample instead
        // of nothing, so that this rank still yields batches_per_epoch() batches: under DDP a
        // rank one step short leaves the others waiting in a collective for good.
        diagnostics_->OnRepeated(batch_index, stand_in_->index());
        batch.samples.push_back(*stand_in_);
      } else {
        diagnostics_->OnBatchDropped(batch_index);
        continue;
      }
    }
    diagnostics_->OnBatchDelivered(batch.samples.size());
    return std::optional<Batch>(std::move(batch));
  }
}

}  // namespace libshard
