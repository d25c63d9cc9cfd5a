#include "loader/streaming_read_ahead.h"

#include <algorithm>
#include <string>
#include <utility>

namespace libshard {

Result<std::unique_ptr<ReadAhead>> ReadAhead::Create(std::shared_ptr<const Dataset> dataset,
                                                     const LoaderOptions& options) {
  return StreamingReadAhead::Make(std::move(dataset), options);
}

Result<std::unique_ptr<ReadAhead>> StreamingReadAhead::Make(std::shared_ptr<const Dataset> dataset,
                                                            const LoaderOptions& options,
                                                            DiagnosticsHooks hooks) {
  if (dataset == nullptr) return Status::InvalidArgument("ReadAhead::Create: dataset is null");
  LIBSHARD_RETURN_IF_ERROR(ValidateReadAheadOptions(options));
  std::unique_ptr<StreamingReadAhead> ra(
      new StreamingReadAhead(std::move(dataset), options, std::move(hooks)));
  LIBSHARD_RETURN_IF_ERROR(ra->Init());
  return std::unique_ptr<ReadAhead>(std::move(ra));
}

StreamingReadAhead::StreamingReadAhead(std::shared_ptr<const Dataset> dataset,
                                       const LoaderOptions& options, DiagnosticsHooks hooks)
    : dataset_(std::move(dataset)), options_(options), diagnostics_(std::move(hooks), 0) {}

StreamingReadAhead::~StreamingReadAhead() {
  Stop();
  if (arena_ != nullptr) arena_->SetReleaseCallback(nullptr);
  scheduler_.reset();  // joins its threads and cancels the reads in flight
  std::deque<std::unique_ptr<Item>> items;
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    items = queue_.TakeItems();
  }
}

Status StreamingReadAhead::Init() {
  memory::ArenaOptions arena_options;
  arena_options.pin = options_.pin_memory == PinMemory::kOn ||
                      (options_.pin_memory == PinMemory::kAuto && memory::CudaDriverPresent());
  // Never more than every sample of the dataset at once (stored and decoded, with the slots'
  // alignment): a small dataset does not reserve, pin and register a budget it cannot fill.
  const uint64_t footprint = (uint64_t{1} << 20) + dataset_->total_stored_bytes() +
                             dataset_->total_raw_bytes() + dataset_->size() * 2 * kSlotAlign;
  LIBSHARD_ASSIGN_OR_RETURN(
      arena_, memory::Arena::Create(std::min(options_.memory_budget, footprint), arena_options));
  LIBSHARD_ASSIGN_OR_RETURN(scheduler_, ReadScheduler::Create(dataset_, options_, {}, arena_.get(),
                                                              &queue_, &diagnostics_));
  arena_->SetReleaseCallback([scheduler = scheduler_.get()] { scheduler->Wake(); });
  steps_ = std::make_shared<AnnouncedSteps>();
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    queue_.Reset(steps_);
  }
  scheduler_->Start();
  return Status::OK();
}

Status StreamingReadAhead::Announce(std::span<const uint64_t> indices) {
  const uint64_t n = dataset_->size();
  for (size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] >= n)
      return Status::InvalidArgument(
          "read-ahead: announced index " + std::to_string(indices[k]) + " (entry " +
          std::to_string(k) + " of " + std::to_string(indices.size()) + ") is out of range: " +
          dataset_->path() + " has " + std::to_string(n) + " samples; nothing was announced");
  }
  std::lock_guard<std::mutex> lock(queue_.mu);
  if (queue_.stopped.load()) return Status::Aborted("the read-ahead was stopped (ReadAhead::Stop)");
  steps_->Append(indices);
  scheduler_->OnStepsAddedLocked();
  return Status::OK();
}

std::deque<std::unique_ptr<Item>>::iterator StreamingReadAhead::FindItem(uint64_t pos) {
  auto it = std::lower_bound(queue_.items.begin(), queue_.items.end(), pos,
                             [](const std::unique_ptr<Item>& item, uint64_t p) {
                               return item->step < p;
                             });
  return it != queue_.items.end() && (*it)->step == pos ? it : queue_.items.end();
}

std::unique_ptr<Item> StreamingReadAhead::RemoveLocked(
    std::deque<std::unique_ptr<Item>>::iterator it) {
  std::unique_ptr<Item> item = std::move(*it);
  const bool was_full = queue_.items.size() >= kMaxQueuedItems;
  queue_.items.erase(it);
  queue_.pipeline_bytes -= item->slot_bytes;
  if (was_full) scheduler_->Wake();
  return item;
}

bool StreamingReadAhead::EvictLocked(bool all, std::vector<std::unique_ptr<Item>>* drop) {
  const uint64_t front = steps_->front();
  const uint64_t limit = front > kReadAheadReorderWindow ? front - kReadAheadReorderWindow : 0;
  bool any = false;
  // Items of passed-over entries lie before the front, at the queue's start.
  for (auto it = queue_.items.begin(); it != queue_.items.end() && (*it)->step < front;) {
    Item& item = **it;
    if (!item.ready || steps_->state(item.step) != AnnouncedSteps::State::kPassed ||
        (!all && item.step >= limit)) {
      ++it;
      continue;
    }
    steps_->Finish(item.step);
    ++evicted_;
    const size_t offset = static_cast<size_t>(it - queue_.items.begin());
    drop->push_back(RemoveLocked(it));
    it = queue_.items.begin() + static_cast<std::ptrdiff_t>(offset);
    any = true;
  }
  steps_->Trim();
  return any;
}

Result<Sample> StreamingReadAhead::Miss(uint64_t index) {
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    ++misses_;
  }
  return dataset_->Read(index);
}

Result<Sample> StreamingReadAhead::Get(uint64_t index) {
  if (index >= dataset_->size())
    return Status::InvalidArgument("sample index " + std::to_string(index) +
                                   " is out of range: dataset " + dataset_->path() + " has " +
                                   std::to_string(dataset_->size()) + " samples");
  const LoaderClock& clock = diagnostics_.clock();
  std::vector<std::unique_ptr<Item>> drop;  // released after the lock
  std::unique_ptr<Item> item;
  {
    std::unique_lock<std::mutex> lock(queue_.mu);
    std::optional<uint64_t> found;
    if (!queue_.stopped.load()) found = steps_->Find(index);
    if (!found) {
      lock.unlock();
      return Miss(index);
    }
    const uint64_t pos = *found;
    steps_->Take(pos, [this](uint64_t q) { return FindItem(q) != queue_.items.end(); });
    queue_.next_batch = steps_->front();
    EvictLocked(/*all=*/queue_.blocked_on_memory, &drop);
    bool waited = false;
    bool give_up = false;
    const LoaderClock::TimePoint start = clock.Now();
    ++waiters_;
    queue_.wake_before_seq = UINT64_MAX;  // any completion may be the one a Get waits for
    while (true) {
      if (queue_.stopped.load() || !queue_.fatal.ok()) {
        give_up = true;
        break;
      }
      auto it = FindItem(pos);
      if (it != queue_.items.end() && (*it)->ready) {
        item = RemoveLocked(it);
        break;
      }
      // The scheduler cannot start the entry: only what the caller keeps, or passed-over
      // entries, hold the memory. Free the latter; if there are none, read it here.
      if (it == queue_.items.end() && queue_.blocked_on_memory && !EvictLocked(true, &drop)) {
        give_up = true;
        break;
      }
      waited = true;
      if (!drop.empty()) {
        lock.unlock();
        drop.clear();
        lock.lock();
        continue;
      }
      clock.WaitFor(queue_.ready_cv, lock, std::chrono::milliseconds(kPollMs));
    }
    if (--waiters_ == 0) queue_.wake_before_seq = 0;
    if (waited) wait_seconds_ += Seconds(clock.Now() - start);
    if (give_up) {
      steps_->GiveUp(pos);
    } else {
      steps_->Finish(pos);
      ++(waited ? waits_ : hits_);
    }
    steps_->Trim();
    if (give_up && !queue_.fatal.ok() && !queue_.stopped.load()) return queue_.fatal;
  }
  drop.clear();
  if (item == nullptr) return Miss(index);
  if (!item->result) {
    // Larger than the whole arena: read it here. Any other failure is the sample's error.
    if (item->error.code() == StatusCode::kResourceExhausted) return Miss(index);
    return item->error;
  }
  Sample sample = std::move(*item->result);
  uint64_t bytes = 0;
  for (const TensorView& t : sample.tensors()) bytes += t.nbytes;
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    bytes_served_ += bytes;
  }
  return sample;
}

ReadAheadStats StreamingReadAhead::stats() const {
  ReadAheadStats s;
  LoaderStats loader;
  diagnostics_.Fill(&loader);
  scheduler_->FillStats(&loader);
  s.bytes_read = loader.bytes_read;
  s.checksum_failures = loader.checksum_failures;
  s.engine = loader.engine;
  s.direct_io = loader.direct_io;
  s.io_status = loader.io_status;
  s.pinned = arena_->pinned();
  s.arena_budget = arena_->budget();
  s.arena_in_use = arena_->in_use();
  s.arena_peak = arena_->peak();
  std::lock_guard<std::mutex> lock(queue_.mu);
  s.announced = steps_->announced();
  s.held = steps_->held();
  s.skipped = steps_->skipped();
  s.hits = hits_;
  s.waits = waits_;
  s.misses = misses_;
  s.evicted = evicted_;
  s.bytes_served = bytes_served_;
  s.wait_seconds = wait_seconds_;
  return s;
}

void StreamingReadAhead::Stop() {
  queue_.stopped.store(true);
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
  }
  queue_.ready_cv.notify_all();
  if (scheduler_ != nullptr) scheduler_->Wake();
}

}  // namespace libshard
