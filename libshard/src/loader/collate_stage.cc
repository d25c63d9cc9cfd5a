#include "loader/collate_stage.h"

#include <algorithm>
#include <string>
#include <utility>

#include "loader/item_queue.h"  // kPollMs

namespace libshard {

CollateStage::CollateStage(Collator collator, std::shared_ptr<memory::Arena> arena,
                           const LoaderOptions& options, LoaderDiagnostics* diagnostics,
                           const std::atomic<bool>* stopped)
    : collator_(std::move(collator)),
      arena_(std::move(arena)),
      options_(options),
      diagnostics_(diagnostics),
      stopped_(stopped) {}

void CollateStage::Wake() {
  { std::lock_guard<std::mutex> lock(mu_); }
  released_.notify_all();
}

double CollateStage::HeldMemoryTimeout() const {
  return std::max(1.0, 2 * options_.slow_wait_warning_seconds);
}

Result<std::shared_ptr<std::byte>> CollateStage::AcquireRegion(uint64_t bytes, uint64_t samples) {
  const LoaderClock& clock = diagnostics_->clock();
  if (bytes > arena_->budget()) {
    return Status::ResourceExhausted(
        "a collated batch of " + std::to_string(samples) + " samples needs " +
        std::to_string(bytes) + " bytes (" + Mib(bytes) + ") but the batch memory is " +
        Mib(arena_->budget()) + " (part of memory_budget " + Mib(options_.memory_budget) +
        "); raise memory_budget to at least " + Mib(4 * bytes) +
        ", or lower batch_size / max_tokens / max_len");
  }
  const LoaderClock::TimePoint start = clock.Now();
  LoaderClock::TimePoint since = start;
  uint64_t last_in_use = arena_->in_use();
  bool warned = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (stopped_->load()) return Status::Aborted("the loader was stopped (Loader::Stop)");
    // Regions alternate between the two ends of the batch arena (Arena::Placement): a loop
    // holding the previous batch while the next is assembled always finds room for it when the
    // two fit in the batch memory together.
    LIBSHARD_ASSIGN_OR_RETURN(
        std::shared_ptr<std::byte> region,
        arena_->TryAcquire(bytes, high_end_ ? memory::Arena::Placement::kHighest
                                            : memory::Arena::Placement::kLowest));
    if (region != nullptr) {
      high_end_ = !high_end_;
      const double waited = Seconds(clock.Now() - start);
      if (waited > 0) diagnostics_->AddWait(waited);
      return region;
    }
    clock.WaitFor(released_, lock, std::chrono::milliseconds(kPollMs));
    const uint64_t in_use = arena_->in_use();
    if (in_use != last_in_use) {  // a release (or another acquire): restart the clock
      last_in_use = in_use;
      since = clock.Now();
    }
    const double stuck_for = Seconds(clock.Now() - since);
    if (stuck_for < 1.0) continue;
    // Only the consumer's earlier batches hold batch regions.
    const std::string what =
        "the consumer holds " + std::to_string(arena_->live_slots()) + " collated batches (" +
        Mib(in_use) + ") of the batch memory (" + Mib(arena_->budget()) +
        " of memory_budget), so the next batch (" + std::to_string(samples) + " samples, " +
        Mib(bytes) + ") cannot be assembled";
    if (stuck_for >= HeldMemoryTimeout()) {
      return Status::ResourceExhausted(
          what + ", and nothing was released for " + Fixed(stuck_for, 1) +
          " s; drop references to the tensors of earlier batches before asking for the next (a "
          "`for batch in loader` loop still holds the previous batch then, so the batch memory "
          "must hold two batches), or raise memory_budget");
    }
    if (!warned) {
      warned = true;
      lock.unlock();
      diagnostics_->WarnHeldMemory(what);
      lock.lock();
    }
  }
}

Result<Batch> CollateStage::Assemble(std::optional<Batch> batch) {
  if (!batch) {
    if (!pending_) return Status::Internal("CollateStage: no batch to assemble");
    batch = std::move(pending_);
    pending_.reset();
  }
  LIBSHARD_ASSIGN_OR_RETURN(CollateLayout layout, collator_.Plan(batch->samples));
  Result<std::shared_ptr<std::byte>> region =
      AcquireRegion(layout.total_bytes, batch->samples.size());
  if (!region.ok()) {
    // Memory held by the consumer (not a batch too large): the next call delivers this batch.
    if (region.status().code() == StatusCode::kResourceExhausted &&
        layout.total_bytes <= arena_->budget())
      pending_ = std::move(batch);
    return region.status();
  }
  std::shared_ptr<std::byte> memory = std::move(*region);
  std::byte* data = memory.get();
  Batch out;
  out.collated = collator_.Fill(layout, batch->samples, data, std::move(memory));
  batch.reset();  // the samples' read-arena slots go back to the scheduler now
  return out;
}

}  // namespace libshard
