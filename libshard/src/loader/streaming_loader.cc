#include "loader/streaming_loader.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>

#include "format/checksum.h"

namespace libshard {
namespace {

constexpr uint64_t kAlign = 4096;
constexpr size_t kMaxWindowItems = 1 << 16;  // bounds bookkeeping for tiny samples
constexpr int kPollMs = 100;                 // scheduler and consumer re-check period

std::string Mib(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string EnvOr(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::Create(std::shared_ptr<const Dataset> dataset,
                                               const LoaderOptions& options) {
  return StreamingLoader::Make(std::move(dataset), options);
}

Result<std::unique_ptr<Loader>> StreamingLoader::Make(std::shared_ptr<const Dataset> dataset,
                                                      const LoaderOptions& options) {
  if (dataset == nullptr) return Status::InvalidArgument("Loader::Create: dataset is null");
  std::unique_ptr<StreamingLoader> loader(new StreamingLoader(std::move(dataset), options));
  LIBSHARD_RETURN_IF_ERROR(loader->Init());
  return std::unique_ptr<Loader>(std::move(loader));
}

StreamingLoader::StreamingLoader(std::shared_ptr<const Dataset> dataset,
                                 const LoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options) {}

StreamingLoader::~StreamingLoader() {
  Stop();
  if (scheduler_.joinable()) scheduler_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_exit_ = true;
    tasks_.clear();
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  if (arena_ != nullptr) arena_->SetReleaseCallback(nullptr);
  std::deque<std::unique_ptr<Item>> window;
  {
    std::lock_guard<std::mutex> lock(mu_);
    window.swap(window_);
  }
  window.clear();
  engine_.reset();  // before files_ close
}

Status StreamingLoader::Init() {
  const Schema& schema = dataset_->schema();
  LIBSHARD_RETURN_IF_ERROR(ValidateLoaderOptions(options_));  // before any thread or memory
  for (const std::string& name : options_.fields) {
    std::optional<size_t> f = schema.Find(name);
    if (!f) {
      std::string known;
      for (const Field& fd : schema.fields) known += (known.empty() ? "" : ", ") + fd.name;
      return Status::InvalidArgument("fields: '" + name + "' is not a field of " +
                                     dataset_->path() + " (fields: " + known + ")");
    }
    field_indices_.push_back(*f);
  }
  read_size_ = std::max<uint64_t>(kAlign, (options_.read_size + kAlign - 1) / kAlign * kAlign);
  queue_depth_ = std::min<uint32_t>(options_.queue_depth, 4096);
  if (options_.max_tokens > 0) {
    lengths_ = dataset_->lengths();
    for (uint64_t& l : lengths_) l = ClippedLength(l, options_.max_len);
  }
  stats_interval_ = options_.stats_interval_seconds;
  if (const std::string env = EnvOr("LIBSHARD_STATS"); !env.empty()) {
    stats_interval_ = std::strtod(env.c_str(), nullptr);
  }

  memory::ArenaOptions arena_options;
  arena_options.pin = options_.pin_memory;
  LIBSHARD_ASSIGN_OR_RETURN(
      arena_, memory::Arena::Create(std::min(options_.memory_budget, DatasetFootprint()),
                                    arena_options));
  LIBSHARD_RETURN_IF_ERROR(OpenFiles());

  IoEngineKind kind = options_.engine;
  if (const std::string env = EnvOr("LIBSHARD_ENGINE");
      kind == IoEngineKind::kAuto && !env.empty()) {
    Result<IoEngineKind> parsed = ParseIoEngineKind(env);
    if (!parsed.ok()) return parsed.status().WithContext("LIBSHARD_ENGINE");
    kind = *parsed;
  }
  io::EngineOptions engine_options;
  engine_options.queue_depth = queue_depth_;
  engine_options.threads = std::min<uint32_t>(queue_depth_, 8);
  if (kind != IoEngineKind::kPread) {
    Result<std::unique_ptr<io::IoEngine>> uring =
        io::CreateIoEngine(io::EngineType::kUring, engine_options);
    if (uring.ok()) {
      engine_ = std::move(uring).value();
    } else if (kind == IoEngineKind::kIoUring) {
      return uring.status();
    } else {
      engine_note_ = "io_uring unavailable (" + uring.status().message() + "); using pread";
    }
  }
  if (engine_ == nullptr) {
    LIBSHARD_ASSIGN_OR_RETURN(engine_, io::CreateIoEngine(io::EngineType::kPread, engine_options));
  }
  std::vector<int> fds;
  std::vector<std::string> paths;
  for (const io::File& f : files_) {
    fds.push_back(f.fd());
    paths.push_back(f.path());
  }
  LIBSHARD_RETURN_IF_ERROR(engine_->SetFiles(fds, paths));
  const std::string reg = engine_->RegisterBuffer(arena_->base(), arena_->budget());
  if (engine_->name() == "io_uring" && reg != "registered") engine_note_ = reg;

  arena_->SetReleaseCallback([engine = engine_.get()] { engine->Wake(); });
  const uint32_t nworkers = std::max<uint32_t>(1, options_.worker_threads);
  for (uint32_t i = 0; i < nworkers; ++i) workers_.emplace_back([this] { WorkerLoop(); });

  const PlanOptions plan_options = PlanOptionsFor(options_);
  state_.seed = plan_options.seed;
  state_.epoch = plan_options.epoch;
  state_.position = plan_options.start_position;
  if (options_.resume) state_.skipped = options_.resume->skipped;
  return StartEpoch(plan_options);
}

Status StreamingLoader::OpenFiles() {
  IoMode mode = options_.io_mode;
  if (const std::string env = EnvOr("LIBSHARD_IO_MODE");
      mode == IoMode::kAuto && !env.empty()) {
    Result<IoMode> parsed = ParseIoMode(env);
    if (!parsed.ok()) return parsed.status().WithContext("LIBSHARD_IO_MODE");
    mode = *parsed;
  }
  direct_io_ = !dataset_->shards().empty() && mode != IoMode::kBuffered;
  buffered_shards_ = 0;
  io_note_.clear();
  for (const ShardInfo& shard : dataset_->shards()) {
    io::DirectIoInfo info;
    LIBSHARD_ASSIGN_OR_RETURN(
        io::File file, io::File::OpenForReading(shard.path, mode != IoMode::kBuffered,
                                                mode == IoMode::kDirect, &info));
    // Samples and slots are 4 KiB aligned; a device that needs more is read buffered.
    if (info.direct && (info.offset_align > kAlign || info.memory_align > kAlign)) {
      const std::string needs = shard.path + ": O_DIRECT needs " +
                                std::to_string(info.offset_align) +
                                "-byte alignment, more than the format's 4096";
      if (mode == IoMode::kDirect) {
        return Status::Unsupported(needs + "; use io_mode auto or buffered");
      }
      LIBSHARD_ASSIGN_OR_RETURN(file, io::File::OpenForReading(shard.path, false, false, &info));
      info.reason = needs + "; using buffered reads";
    }
    if (!info.direct) {
      direct_io_ = false;
      // One reason is enough to explain the mode; say how many more shards share it.
      if (io_note_.empty()) io_note_ = info.reason;
      ++buffered_shards_;
    }
    files_.push_back(std::move(file));
  }
  return Status::OK();
}

Status StreamingLoader::StartEpoch(const PlanOptions& plan_options) {
  LIBSHARD_ASSIGN_OR_RETURN(EpochPlan plan,
                            EpochPlan::Make(dataset_->size(), lengths_, plan_options));
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = std::move(plan);
  next_batch_ = 0;
  sched_batch_ = 0;
  sched_samples_.clear();
  sched_in_batch_ = 0;
  next_seq_ = 0;
  issuing_ = nullptr;
  pipeline_stop_ = false;
  plan_done_ = false;
  blocked_on_memory_ = false;
  fatal_ = Status::OK();
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  return Status::OK();
}

void StreamingLoader::StopPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pipeline_stop_ = true;
  }
  engine_->Wake();
  if (scheduler_.joinable()) scheduler_.join();
  std::deque<std::unique_ptr<Item>> window;
  {
    std::unique_lock<std::mutex> lock(mu_);
    tasks_.clear();
    idle_cv_.wait(lock, [this] { return active_tasks_ == 0; });
    window.swap(window_);
    pipeline_bytes_ = 0;
  }
  window.clear();  // returns the slots (outside mu_)
}

// ---- Scheduler thread ----------------------------------------------------------------------

void StreamingLoader::SchedulerLoop() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pipeline_stop_ || stopped_.load()) break;
    }
    bool idle = false;
    Status st = SchedulerStep(&idle);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      fatal_ = std::move(st);
      ready_cv_.notify_all();
      break;
    }
    MaybePrintStats();
  }
  // No read may land in a slot once the pipeline is gone.
  engine_->CancelAll();
  std::lock_guard<std::mutex> lock(inflight_mu_);
  inflight_.clear();
}

Status StreamingLoader::SchedulerStep(bool* idle) {
  // Keep queue_depth sub-reads in flight, starting the next items as soon as the previous one
  // is fully submitted, so the device queue never drains between samples.
  while (engine_->in_flight() < queue_depth_) {
    if (issuing_ == nullptr) {
      LIBSHARD_ASSIGN_OR_RETURN(bool started, StartNextItem());
      if (!started) break;
      continue;
    }
    Item* item = issuing_;
    const uint64_t off = item->next_sub;
    const uint64_t len = std::min(read_size_, item->layout.read_length - off);
    const uint64_t id = next_read_id_++;
    io::ReadRequest r;
    r.file = item->location.shard;
    r.offset = item->layout.file_offset + off;
    r.length = len;
    r.dst = item->read_slot.get() + off;
    r.tag = id;
    LIBSHARD_RETURN_IF_ERROR(engine_->Submit(r));
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      inflight_.emplace(id, Inflight{item, r.offset, len, Clock::now()});
    }
    item->next_sub += len;
    ++item->subs_pending;
    if (item->next_sub >= item->layout.read_length) issuing_ = nullptr;
  }
  LIBSHARD_RETURN_IF_ERROR(engine_->Flush());

  std::vector<io::ReadCompletion> done;
  LIBSHARD_RETURN_IF_ERROR(engine_->Reap(&done, /*wait=*/true, kPollMs));
  *idle = done.empty();
  for (io::ReadCompletion& c : done) {
    Inflight read;
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      auto it = inflight_.find(c.tag);
      if (it == inflight_.end()) continue;
      read = it->second;
      inflight_.erase(it);
    }
    OnSubReadDone(read.item, c, read.offset - read.item->layout.file_offset, read.length);
  }
  return Status::OK();
}

Result<bool> StreamingLoader::StartNextItem() {
  std::unique_lock<std::mutex> lock(mu_);
  if (plan_done_) return false;
  while (sched_in_batch_ >= sched_samples_.size()) {
    if (sched_batch_ >= plan_->batches_for_rank()) {
      plan_done_ = true;
      return false;
    }
    sched_samples_.clear();
    plan_->AppendBatchSamples(sched_batch_++, &sched_samples_);
    sched_in_batch_ = 0;
  }
  // The consumer's batch may always be completed; later ones respect the window cap.
  if (window_.size() >= kMaxWindowItems && sched_batch_ - 1 > next_batch_) return false;

  const uint64_t sample = sched_samples_[sched_in_batch_];
  auto item = std::make_unique<Item>();
  item->sample = sample;
  // Locate, not location: a version 2 index reads the sample's block on first use, and a
  // damaged one is this sample's error (FORMAT.md §3.8.7).
  Result<SampleLocation> located = dataset_->Locate(sample);
  item->location = located.ok() ? *located : SampleLocation{};
  item->layout = PlanRead(*dataset_, sample, item->location, field_indices_, options_.max_len,
                          /*whole=*/options_.verify_checksums && options_.verify_partial_reads);
  const bool compressed = (item->location.flags & kSampleFlagZstd) != 0;
  const uint64_t read_bytes = item->layout.read_length;
  const uint64_t raw_bytes = compressed ? std::max<uint64_t>(item->location.raw_size, 1) : 0;

  Status too_large;  // or any error known before the read
  if (!located.ok()) {
    too_large = located.status();
  } else if (read_bytes + raw_bytes > arena_->budget()) {
    too_large = Status::ResourceExhausted(
        "sample " + std::to_string(sample) + " (" + ItemWhere(*item) + ") needs " +
        std::to_string(read_bytes + raw_bytes) + " bytes (" + Mib(read_bytes + raw_bytes) +
        (compressed ? ", stored + decoded" : "") + ") but the loader memory_budget is " +
        std::to_string(arena_->budget()) + " bytes (" + Mib(arena_->budget()) +
        "); raise memory_budget above the largest sample");
  } else {
    Result<std::shared_ptr<std::byte>> slot = arena_->TryAcquire(read_bytes);
    if (!slot.ok()) return slot.status();
    std::shared_ptr<std::byte> raw;
    if (*slot != nullptr && raw_bytes > 0) {
      Result<std::shared_ptr<std::byte>> r = arena_->TryAcquire(raw_bytes);
      if (!r.ok()) return r.status();
      raw = std::move(r).value();
      if (raw == nullptr) slot->reset();
    }
    if (*slot == nullptr) {
      blocked_on_memory_ = engine_->in_flight() == 0;
      blocked_need_ = std::max(read_bytes, raw_bytes);
      if (blocked_on_memory_) ready_cv_.notify_all();
      return false;
    }
    item->read_slot = std::move(slot).value();
    item->raw_slot = std::move(raw);
    item->slot_bytes = (read_bytes + kAlign - 1) / kAlign * kAlign +
                       (raw_bytes + kAlign - 1) / kAlign * kAlign;
  }
  blocked_on_memory_ = false;
  item->seq = next_seq_++;
  ++sched_in_batch_;
  Item* raw_item = item.get();
  pipeline_bytes_ += item->slot_bytes;
  window_.push_back(std::move(item));
  lock.unlock();
  if (!too_large.ok()) {
    Complete(raw_item, std::move(too_large));
  } else {
    issuing_ = raw_item;
  }
  return true;
}

void StreamingLoader::OnSubReadDone(Item* item, const io::ReadCompletion& c, uint64_t offset,
                                    uint64_t length) {
  --item->subs_pending;
  item->bytes_read += c.bytes;
  bytes_read_.fetch_add(c.bytes, std::memory_order_relaxed);
  if (item->error.ok()) {
    if (!c.status.ok()) {
      item->error = c.status.WithContext("sample " + std::to_string(item->sample));
    } else {
      const uint64_t needed = item->layout.needed;
      const uint64_t required = needed > offset ? std::min(length, needed - offset) : 0;
      if (c.bytes < required) {
        item->error = Status::Corruption(
            ItemWhere(*item) + ": sample " + std::to_string(item->sample) + ": read only " +
            std::to_string(c.bytes) + " of " + std::to_string(required) + " bytes at offset " +
            std::to_string(item->layout.file_offset + offset) +
            " (end of file); the shard is shorter than the index says; restore it or re-run "
            "libshard pack");
      }
    }
  }
  if (item->subs_pending == 0 && item != issuing_) FinishRead(item);
}

void StreamingLoader::FinishRead(Item* item) {
  if (!item->error.ok()) {
    Complete(item, item->error);
    return;
  }
  const bool compressed = (item->location.flags & kSampleFlagZstd) != 0;
  if (Verifies(*item) || compressed) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(item);
    }
    work_cv_.notify_one();
    return;
  }
  Complete(item, Status::OK());
}

bool StreamingLoader::Verifies(const Item& item) const {
  return options_.verify_checksums && item.layout.whole;
}

Status StreamingLoader::VerifyAndDecode(Item* item) {
  const SampleLocation& loc = item->location;
  std::span<const std::byte> stored(item->read_slot.get(), loc.stored_size);
  if (Verifies(*item)) {
    const uint64_t sum = format::Xxh3(stored);
    if (sum != loc.checksum) {
      checksum_failures_.fetch_add(1, std::memory_order_relaxed);
      char buf[160];
      std::snprintf(buf, sizeof buf, "checksum mismatch (xxh3 of the %llu stored bytes is %016llx, "
                    "the index says %016llx)",
                    static_cast<unsigned long long>(loc.stored_size),
                    static_cast<unsigned long long>(sum),
                    static_cast<unsigned long long>(loc.checksum));
      return Status::Corruption(ItemWhere(*item) + ": sample " + std::to_string(item->sample) +
                                ": " + buf + "; the shard is damaged: restore it or re-run "
                                "libshard pack");
    }
  }
  if ((loc.flags & kSampleFlagZstd) != 0) {
    std::span<std::byte> raw(item->raw_slot.get(), loc.raw_size);
    LIBSHARD_RETURN_IF_ERROR(dataset_->Decode(item->sample, stored, raw)
                                 .WithContext(ItemWhere(*item)));
  }
  return Status::OK();
}

void StreamingLoader::Complete(Item* item, Status status) {
  std::optional<Sample> sample;
  if (status.ok()) {
    const SampleLocation& loc = item->location;
    Result<Sample> built = Status::Internal("unset");
    if (item->raw_slot != nullptr) {
      built = BuildSample(*dataset_, item->sample, item->raw_slot.get(), 0, loc.raw_size,
                          item->raw_slot, field_indices_, options_.max_len);
    } else if (item->layout.whole) {
      built = BuildSample(*dataset_, item->sample, item->read_slot.get(), 0, loc.stored_size,
                          item->read_slot, field_indices_, options_.max_len);
    } else {
      built = BuildSample(*dataset_, item->sample, item->read_slot.get() + item->layout.skew,
                          item->layout.payload_begin,
                          item->layout.payload_end - item->layout.payload_begin, item->read_slot,
                          field_indices_, options_.max_len);
    }
    if (built.ok()) {
      sample = std::move(built).value();
    } else {
      status = built.status();
    }
  }
  std::shared_ptr<std::byte> drop;  // the stored bytes of a decoded sample, released unlocked
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (item->raw_slot != nullptr && item->read_slot != nullptr) {
      pipeline_bytes_ -= (item->layout.read_length + kAlign - 1) / kAlign * kAlign;
      item->slot_bytes -= (item->layout.read_length + kAlign - 1) / kAlign * kAlign;
      drop = std::move(item->read_slot);
    }
    if (sample) {
      item->result = std::move(sample);
    } else {
      item->error = std::move(status);
      pipeline_bytes_ -= item->slot_bytes;  // the slots go now, not when the item is popped
      item->slot_bytes = 0;
    }
    item->read_slot.reset();
    item->raw_slot.reset();
    item->ready = true;
    // Only an item of the batch the consumer waits for can end its wait: completions further
    // ahead would wake it for nothing (a futex round trip and a context switch each).
    wake = item->seq < wake_before_seq_;
  }
  if (wake) ready_cv_.notify_all();
}

void StreamingLoader::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return workers_exit_ || !tasks_.empty(); });
    if (tasks_.empty()) return;
    Item* item = tasks_.front();
    tasks_.pop_front();
    ++active_tasks_;
    lock.unlock();
    Status s = VerifyAndDecode(item);
    Complete(item, std::move(s));
    lock.lock();
    --active_tasks_;
    if (active_tasks_ == 0) idle_cv_.notify_all();
  }
}

std::string StreamingLoader::ItemWhere(const Item& item) const {
  const auto& shards = dataset_->shards();
  const std::string file =
      item.location.shard < shards.size() ? shards[item.location.shard].path : "?";
  return file + " offset " + std::to_string(item.location.offset);
}

// Datasets up to this many samples get their exact footprint (below).
constexpr uint64_t kExactFootprintSamples = 65536;

// The arena never needs more than every sample of the dataset at once. Capping the budget
// there keeps small datasets from paying for faulting in and registering (pinning) a
// multi-GiB arena they can never fill: that set-up costs about 0.4 CPU-s per GiB.
uint64_t StreamingLoader::DatasetFootprint() const {
  uint64_t total = uint64_t{1} << 20;
  // A large dataset gets an upper bound from its totals: summing every sample's location would
  // read the whole index (a version 2 index loads its blocks on first use, FORMAT.md §3.8.7),
  // which a rank that reads 1/1024 of the samples should not pay for at start.
  if (dataset_->size() > kExactFootprintSamples)
    return total + dataset_->total_stored_bytes() + dataset_->total_raw_bytes() +
           dataset_->size() * 2 * kAlign;
  for (uint64_t i = 0; i < dataset_->size(); ++i) {
    const SampleLocation loc = dataset_->location(i);
    total += (loc.stored_size + 2 * kAlign - 1) / kAlign * kAlign;  // alignment skew included
    if ((loc.flags & kSampleFlagZstd) != 0) total += (loc.raw_size + kAlign - 1) / kAlign * kAlign;
  }
  return total;
}

// ---- Consumer -------------------------------------------------------------------------------

double StreamingLoader::HeldMemoryTimeout() const {
  return std::max(1.0, 2 * options_.slow_wait_warning_seconds);
}

Status StreamingLoader::StuckError(uint64_t batch) const {
  return Status::ResourceExhausted(
      "batch " + std::to_string(batch) + " cannot be assembled: its samples need more than the " +
      "loader memory_budget of " + std::to_string(arena_->budget()) + " bytes (" +
      Mib(arena_->budget()) + ") at once (next sample needs " + Mib(blocked_need_) + ", " +
      Mib(pipeline_bytes_) + " already held for this batch); raise memory_budget or lower "
      "batch_size / max_tokens");
}

Result<std::optional<Batch>> StreamingLoader::Next() {
  const Clock::time_point start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (!first_next_) {
    first_next_ = start;
    last_stats_print_ = start;
  }
  double waited_total = 0;
  while (true) {
    if (stopped_.load()) return Status::Aborted("the loader was stopped (Loader::Stop)");
    if (next_batch_ >= plan_->batches_for_rank()) return std::optional<Batch>();
    const uint64_t batch_index = next_batch_;
    const uint64_t count = plan_->BatchSamples(batch_index).size();

    // Wait until the batch's items are all ready (they are the front of the window).
    const Clock::time_point wait_start = Clock::now();
    bool warned_slow = false;
    bool warned_held = false;
    bool stuck = false;
    Clock::time_point stuck_since;
    uint64_t stuck_in_use = 0;
    uint64_t stuck_seq = 0;
    while (true) {
      if (stopped_.load()) return Status::Aborted("the loader was stopped (Loader::Stop)");
      if (!fatal_.ok()) return fatal_;
      auto batch_ready = [&] {
        bool ready = window_.size() >= count;
        for (size_t k = 0; ready && k < count; ++k) ready = window_[k]->ready;
        return ready;
      };
      if (batch_ready()) break;
      wake_before_seq_ = (window_.empty() ? next_seq_ : window_.front()->seq) + count;
      ready_cv_.wait_for(lock, std::chrono::milliseconds(kPollMs));
      wake_before_seq_ = 0;
      if (batch_ready()) break;
      const double waited = Seconds(Clock::now() - wait_start);
      if (!warned_slow && options_.slow_wait_warning_seconds > 0 &&
          waited >= options_.slow_wait_warning_seconds) {
        warned_slow = true;
        lock.unlock();
        WarnSlowWait(waited, batch_index);
        lock.lock();
      }
      // Memory: the scheduler cannot get a slot and nothing is in flight or decoding. An item
      // of the window that is not ready yet is a read that will complete: progress, not stuck.
      bool pending = false;
      for (const auto& it : window_) {
        if (!it->ready) {
          pending = true;
          break;
        }
      }
      if (blocked_on_memory_ && tasks_.empty() && active_tasks_ == 0 && !pending) {
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
        if (!stuck || in_use != stuck_in_use || next_seq_ != stuck_seq) {
          stuck = true;
          stuck_since = Clock::now();
          stuck_in_use = in_use;
          stuck_seq = next_seq_;
        }
        const double stuck_for = Seconds(Clock::now() - stuck_since);
        const uint64_t held = in_use > pipeline_bytes_ ? in_use - pipeline_bytes_ : 0;
        if (held == 0 && arena_->largest_free() < blocked_need_ && stuck_for > 0.2) {
          // Nobody outside the loader holds memory, so nothing can ever free a slot.
          return StuckError(batch_index);
        }
        if (held > 0 && (stuck_for >= 1.0 || stuck_for >= HeldMemoryTimeout())) {
          const uint64_t slots = arena_->live_slots();
          uint64_t pipeline_slots = 0;
          for (const auto& it : window_) pipeline_slots += (it->ready ? (it->result ? 1 : 0) : 1);
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
            std::fprintf(stderr,
                         "libshard: loader waiting for memory: %s; drop references to samples "
                         "you no longer need or raise memory_budget\n",
                         what.c_str());
          }
        }
      } else {
        stuck = false;
      }
    }
    waited_total += Seconds(Clock::now() - wait_start);

    Batch batch;
    batch.samples.reserve(count);
    Status error;
    const bool window_full = window_.size() >= kMaxWindowItems;
    for (size_t k = 0; k < count; ++k) {
      std::unique_ptr<Item> item = std::move(window_.front());
      window_.pop_front();
      pipeline_bytes_ -= item->slot_bytes;
      if (item->result) {
        for (const TensorView& t : item->result->tensors()) bytes_delivered_ += t.nbytes;
        batch.samples.push_back(std::move(*item->result));
      } else if (options_.on_error == OnError::kSkip) {
        ++samples_skipped_;
        state_.skipped.push_back(item->sample);
        std::fprintf(stderr, "libshard: skipping sample %llu: %s\n",
                     static_cast<unsigned long long>(item->sample),
                     item->error.ToString().c_str());
      } else if (error.ok()) {
        error = item->error;
      }
    }
    ++next_batch_;
    state_.position = plan_->PositionAfter(batch_index);
    if (window_full) engine_->Wake();
    wait_seconds_ += waited_total;
    waited_total = 0;
    if (!error.ok()) return error;
    if (options_.on_error == OnError::kSkip) {
      if (!batch.samples.empty()) {
        stand_in_ = batch.samples.front();
      } else if (stand_in_) {
        // Every sample of the batch was skipped. Deliver a repeat of an earlier sample instead
        // of nothing, so that this rank still yields batches_per_epoch() batches: under DDP a
        // rank one step short leaves the others waiting in a collective for good.
        ++samples_repeated_;
        std::fprintf(stderr,
                     "libshard: batch %llu lost every sample; sample %llu is repeated in its "
                     "place so this rank keeps its step count\n",
                     static_cast<unsigned long long>(batch_index),
                     static_cast<unsigned long long>(stand_in_->index()));
        batch.samples.push_back(*stand_in_);
      } else {
        std::fprintf(stderr,
                     "libshard: batch %llu lost every sample and no earlier sample can stand in "
                     "for it; this rank delivers one batch fewer this epoch\n",
                     static_cast<unsigned long long>(batch_index));
        continue;
      }
    }
    samples_delivered_ += batch.samples.size();
    ++batches_delivered_;
    return std::optional<Batch>(std::move(batch));
  }
}

Status StreamingLoader::SetEpoch(uint64_t epoch) {
  if (stopped_.load()) return Status::Aborted("the loader was stopped (Loader::Stop)");
  StopPipeline();
  PlanOptions plan_options = PlanOptionsFor(options_);
  plan_options.seed = state_.seed;
  plan_options.epoch = epoch;
  plan_options.start_position = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.epoch = epoch;
    state_.position = 0;
    state_.skipped.clear();
  }
  return StartEpoch(plan_options);
}

LoaderState StreamingLoader::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

uint64_t StreamingLoader::batches_per_epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_->epoch_batches_for_rank();
}

void StreamingLoader::Stop() {
  stopped_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
  }
  ready_cv_.notify_all();
  if (engine_ != nullptr) engine_->Wake();
}

LoaderStats StreamingLoader::stats() const {
  LoaderStats s;
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.samples_delivered = samples_delivered_;
    s.batches_delivered = batches_delivered_;
    s.bytes_delivered = bytes_delivered_;
    s.elapsed_seconds = first_next_ ? Seconds(now - *first_next_) : 0;
    s.wait_seconds = wait_seconds_;
    s.samples_skipped = samples_skipped_;
    s.samples_repeated = samples_repeated_;
  }
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.throughput_gbps = s.elapsed_seconds > 0 ? s.bytes_read / s.elapsed_seconds / 1e9 : 0;
  s.wait_share = s.elapsed_seconds > 0 ? s.wait_seconds / s.elapsed_seconds : 0;
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    s.reads_in_flight = inflight_.size();
    for (const auto& [id, r] : inflight_) {
      const double age = Seconds(now - r.start);
      s.oldest_read_age_seconds = std::max(s.oldest_read_age_seconds, age);
      if (s.inflight.size() < 4) {
        const auto& shards = dataset_->shards();
        s.inflight.push_back(InflightRead{
            r.item->location.shard < shards.size() ? shards[r.item->location.shard].path : "?",
            r.offset, r.length, r.item->sample, age});
      }
    }
  }
  s.engine = std::string(engine_->name());
  s.direct_io = direct_io_;
  s.pinned = arena_->pinned();
  s.pin_status = options_.pin_memory ? arena_->pin_status() : "not requested (pin_memory=false)";
  s.engine_status = engine_note_;
  s.io_status = io_note_;
  if (buffered_shards_ > 1) {
    s.io_status += " (and " + std::to_string(buffered_shards_ - 1) + " more shard(s) buffered)";
  }
  s.arena_budget = arena_->budget();
  s.arena_in_use = arena_->in_use();
  s.arena_peak = arena_->peak();
  s.checksum_failures = checksum_failures_.load(std::memory_order_relaxed);
  return s;
}

void StreamingLoader::WarnSlowWait(double waited, uint64_t batch) {
  const LoaderStats s = stats();
  std::string reads;
  for (const InflightRead& r : s.inflight) {
    reads += (reads.empty() ? "" : "; ") + r.file + " offset " + std::to_string(r.offset) +
             " (" + Mib(r.length) + ", sample " + std::to_string(r.sample) + ", age " +
             Fixed(r.age_seconds, 1) + " s)";
  }
  std::fprintf(stderr,
               "libshard: Next() has waited %.1f s for batch %llu; %llu reads in flight%s%s; "
               "throughput so far %.2f GB/s (%s, %s)\n",
               waited, static_cast<unsigned long long>(batch),
               static_cast<unsigned long long>(s.reads_in_flight), reads.empty() ? "" : ": ",
               reads.c_str(), s.throughput_gbps, s.engine.c_str(),
               s.direct_io ? "O_DIRECT" : "buffered");
}

void StreamingLoader::MaybePrintStats() {
  if (stats_interval_ <= 0) return;
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_next_ || Seconds(now - last_stats_print_) < stats_interval_) return;
    last_stats_print_ = now;
  }
  const LoaderStats s = stats();
  std::fprintf(stderr,
               "libshard: stats: %llu samples, %.2f GB read, %.2f GB/s, consumer waited %.1f s "
               "(%.0f%%), %llu reads in flight (oldest %.2f s), arena %s of %s (peak %s), %s %s, "
               "%s, %llu checksum failures\n",
               static_cast<unsigned long long>(s.samples_delivered), s.bytes_read / 1e9,
               s.throughput_gbps, s.wait_seconds, 100 * s.wait_share,
               static_cast<unsigned long long>(s.reads_in_flight), s.oldest_read_age_seconds,
               Mib(s.arena_in_use).c_str(), Mib(s.arena_budget).c_str(),
               Mib(s.arena_peak).c_str(), s.engine.c_str(), s.direct_io ? "O_DIRECT" : "buffered",
               s.pinned ? "pinned" : "not pinned",
               static_cast<unsigned long long>(s.checksum_failures));
}

}  // namespace libshard
