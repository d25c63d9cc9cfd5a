// ReadScheduler (read_scheduler.h): creation, the shard files and the engine, start and stop,
// stats, and the scheduler thread. Completions, checks, decoding and the worker threads are in
// read_completion.cc.
#include "loader/read_scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <utility>

#include "dataset/dataset_access.h"
#include "format/checksum.h"
#include "io/direct_io.h"
#include "loader/read_layout.h"
#include "loader/recipes/batch_recipe.h"
#include "remote/shard_filler.h"
#include "util/env_knobs.h"

namespace libshard {
uint64_t FullQueueSlotBytes(const Dataset& dataset, uint32_t queue_depth, uint64_t read_size) {
  if (dataset.size() == 0 || queue_depth == 0 || read_size == 0) return 0;
  // The index's totals bound these (an arena is at most 2^46 bytes: a larger mean sample can
  // never be read anyway), so the product below cannot overflow.
  constexpr uint64_t kCap = uint64_t{1} << 46;
  const uint64_t stored = std::min(dataset.total_stored_bytes() / dataset.size(), kCap);
  const uint64_t raw = std::min(dataset.total_raw_bytes() / dataset.size(), kCap);
  const uint64_t subs = std::max<uint64_t>(1, (stored + read_size - 1) / read_size);
  const uint64_t items = std::max<uint64_t>(1, queue_depth / subs);
  return items * (SlotBytes(stored + kSlotAlign) + SlotBytes(raw));
}

DecodeAheadBounds ComputeDecodeAheadBounds(const Dataset& dataset, uint32_t nworkers,
                                           uint32_t queue_depth, uint64_t read_size,
                                           uint64_t arena_budget) {
  DecodeAheadBounds b;
  // Where a quarter of the arena holds few samples, still two per worker (within half of it), so
  // a tight budget keeps each worker's next sample in flight.
  const uint64_t sample = FullQueueSlotBytes(dataset, 1, read_size);
  b.reading_bytes = std::max<uint64_t>(
      {std::min<uint64_t>(uint64_t{32 << 20} * nworkers, arena_budget / 4),
       std::min<uint64_t>(uint64_t{2} * nworkers * sample, arena_budget / 2), kSlotAlign});
  const uint64_t queue =
      std::min(FullQueueSlotBytes(dataset, queue_depth, read_size), b.reading_bytes);
  b.backlog_bytes = std::max<uint64_t>(
      {b.reading_bytes, std::min<uint64_t>(uint64_t{64 << 20} * nworkers, arena_budget / 4),
       std::min<uint64_t>(2 * queue, arena_budget / 4 * 3)});
  return b;
}

Result<std::unique_ptr<ReadScheduler>> ReadScheduler::Create(
    std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
    std::vector<size_t> field_indices, memory::Arena* arena, ItemQueue* queue,
    LoaderDiagnostics* diagnostics) {
  std::unique_ptr<ReadScheduler> s(new ReadScheduler(std::move(dataset), options,
                                                     std::move(field_indices), arena, queue,
                                                     diagnostics));
  LIBSHARD_RETURN_IF_ERROR(s->OpenFiles());
  LIBSHARD_RETURN_IF_ERROR(s->CreateEngine());
  const uint32_t nworkers = AutoWorkerThreads(*s->dataset_, options);
  s->backlog_bound_items_ = uint64_t{2} * nworkers;
  const DecodeAheadBounds bounds = ComputeDecodeAheadBounds(
      *s->dataset_, nworkers, s->queue_depth_, s->read_size_, arena->budget());
  s->backlog_bound_bytes_ = bounds.backlog_bytes;
  s->reading_bound_bytes_ = bounds.reading_bytes;
  ReadScheduler* raw = s.get();
  for (uint32_t i = 0; i < nworkers; ++i) s->workers_.emplace_back([raw] { raw->WorkerLoop(); });
  return s;
}

ReadScheduler::ReadScheduler(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                             std::vector<size_t> field_indices, memory::Arena* arena,
                             ItemQueue* queue, LoaderDiagnostics* diagnostics)
    : dataset_(std::move(dataset)),
      options_(options),
      field_indices_(std::move(field_indices)),
      partial_check_(!options.verify_checksums         ? PartialCheck::kNone
                     : dataset_->has_field_checksums() ? PartialCheck::kFields
                                                       : PartialCheck::kWhole),
      arena_(arena),
      queue_(queue),
      diagnostics_(diagnostics) {
  read_size_ = std::max<uint64_t>(kSlotAlign, SlotBytes(options_.read_size));
  queue_depth_ = options_.queue_depth;  // 1..kMaxLoaderQueueDepth: ValidateLoaderOptions
}

ReadScheduler::~ReadScheduler() {
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    pipeline_stop_ = true;
  }
  if (engine_ != nullptr) engine_->Wake();
  if (scheduler_.joinable()) scheduler_.join();
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    workers_exit_ = true;
    tasks_.clear();
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  // Items of the queue point into nothing owned here, and no thread touches them any more.
  engine_.reset();  // before files_ close
}

Status ReadScheduler::OpenFiles() {
  IoMode mode = options_.io_mode;
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  // Where the mode was set, for the error that names it.
  std::string mode_from = "io_mode=direct";
  if (const std::string& env = knobs.io_mode; mode == IoMode::kAuto && !env.empty()) {
    Result<IoMode> parsed = ParseIoMode(env);
    if (!parsed.ok()) return parsed.status().WithContext("LIBSHARD_IO_MODE");
    mode = *parsed;
    mode_from = "LIBSHARD_IO_MODE=direct";
  }
  direct_io_ = !dataset_->shards().empty() && mode != IoMode::kBuffered;
  buffered_shards_ = 0;
  io_note_.clear();
  for (const ShardInfo& shard : dataset_->shards()) {
    // Samples and slots are kSlotAlign aligned; a device that needs more is read buffered.
    Result<io::OpenedFile> opened = io::OpenForReading(shard.path, mode, kSlotAlign);
    if (!opened.ok()) {
      const Status& st = opened.status();
      if (mode != IoMode::kDirect || st.code() != StatusCode::kUnsupported) return st;
      return Status(st.code(),
                    st.message() + " (" + mode_from + "); use " +
                        (mode_from[0] == 'i' ? "io_mode auto or buffered"
                                             : "LIBSHARD_IO_MODE=auto or buffered, or unset it"),
                    st.sys_errno());
    }
    if (!opened->direct) {
      direct_io_ = false;
      // One reason is enough to explain the mode; say how many more shards share it.
      if (io_note_.empty()) io_note_ = opened->fallback;
      ++buffered_shards_;
    }
    files_.push_back(std::move(opened->file));
  }
  return Status::OK();
}

Status ReadScheduler::CreateEngine() {
  IoEngineKind kind = options_.engine;
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  if (const std::string& env = knobs.engine; kind == IoEngineKind::kAuto && !env.empty()) {
    Result<IoEngineKind> parsed = ParseIoEngineKind(env);
    if (!parsed.ok()) return parsed.status().WithContext("LIBSHARD_ENGINE");
    kind = *parsed;
  }
  io::EngineOptions engine_options;
  engine_options.queue_depth = queue_depth_;
  engine_options.threads = std::min<uint32_t>(queue_depth_, 8);
  // A chunk of the arena is registered once the arena has faulted it in (on its prefault
  // thread), so registering never faults on the scheduler thread; reads before that are plain.
  engine_options.register_ready = [arena = arena_](const void* begin) {
    return arena->ChunkReady(begin);
  };
  LIBSHARD_ASSIGN_OR_RETURN(io::CreatedEngine created, io::CreateIoEngine(kind, engine_options));
  engine_ = std::move(created.engine);
  if (!created.uring_error.ok()) {
    engine_note_ = "io_uring unavailable (" + created.uring_error.message() + "); using pread";
  }
  std::vector<int> fds;
  std::vector<std::string> paths;
  for (const io::File& f : files_) {
    fds.push_back(f.fd());
    paths.push_back(f.path());
  }
  LIBSHARD_RETURN_IF_ERROR(engine_->SetFiles(fds, paths));
  const io::BufferRegistration reg = engine_->RegisterBuffer(arena_->base(), arena_->budget());
  using State = io::BufferRegistration::State;
  if (reg.state != State::kRegistered && reg.state != State::kNotUsed) {
    engine_note_ = io::Describe(reg);
  }
  return Status::OK();
}

void ReadScheduler::Start() {
  std::lock_guard<std::mutex> lock(queue_->mu);
  sched_batch_ = 0;
  sched_samples_.clear();
  sched_in_batch_ = 0;
  issuing_ = nullptr;
  awaiting_ = nullptr;
  consumer_batch_started_ = false;
  pf_batch_ = 0;
  pf_samples_.clear();
  pf_in_batch_ = 0;
  pf_seq_ = 0;
  pipeline_stop_ = false;
  steps_done_ = false;
  reading_bytes_ = 0;  // the items of a stopped pipeline were dropped
  if (ShardFiller* filler = internal::DatasetAccess::shard_filler(*dataset_)) {
    filler->ForgetReadAhead();  // a new pass of the plan
  }
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

void ReadScheduler::StopPipeline() {
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    pipeline_stop_ = true;
  }
  engine_->Wake();
  if (scheduler_.joinable()) scheduler_.join();
  std::deque<std::unique_ptr<Item>> items;
  {
    std::unique_lock<std::mutex> lock(queue_->mu);
    tasks_.clear();
    idle_cv_.wait(lock, [this] { return active_tasks_ == 0; });
    backlog_items_ = 0;
    backlog_bytes_ = 0;
    blocked_on_backlog_ = false;
    items = queue_->TakeItems();
  }
  items.clear();  // returns the slots (outside the lock)
}

void ReadScheduler::Wake() { engine_->Wake(); }

void ReadScheduler::OnStepsAddedLocked() {
  steps_done_ = false;
  engine_->Wake();
}

void ReadScheduler::FillStats(LoaderStats* s) const {
  const Clock::TimePoint now = diagnostics_->clock().Now();
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    s->reads_in_flight = inflight_.size();
    for (const auto& [id, r] : inflight_) {
      const double age = Seconds(now - r.start);
      s->oldest_read_age_seconds = std::max(s->oldest_read_age_seconds, age);
      if (s->inflight.size() < 4) {
        const auto& shards = dataset_->shards();
        s->inflight.push_back(InflightRead{
            r.item->location.shard < shards.size() ? shards[r.item->location.shard].path : "?",
            r.offset, r.length, r.item->sample, age});
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    s->worker_backlog_peak = backlog_peak_;
  }
  s->engine = std::string(engine_->name());
  s->direct_io = direct_io_;
  s->engine_status = engine_note_;
  s->io_status = io_note_;
  if (buffered_shards_ > 1) {
    s->io_status += " (and " + std::to_string(buffered_shards_ - 1) + " more shard(s) buffered)";
  }
}

// ---- Scheduler thread ----------------------------------------------------------------------

void ReadScheduler::SchedulerLoop() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      if (pipeline_stop_ || queue_->stopped.load()) break;
    }
    Status st = SchedulerStep();
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->fatal = std::move(st);
      queue_->ready_cv.notify_all();
      break;
    }
    diagnostics_->MaybePrintStats();
  }
  // No read may land in a slot once the pipeline is gone.
  engine_->CancelAll();
  std::lock_guard<std::mutex> lock(inflight_mu_);
  inflight_.clear();
}

Status ReadScheduler::SchedulerStep() {
  // Keep queue_depth sub-reads in flight, starting the next items as soon as the previous one
  // is fully submitted, so the device queue never drains between samples.
  while (engine_->in_flight() < queue_depth_) {
    if (issuing_ == nullptr && awaiting_ != nullptr) {
      // s3://: wait for the item's cache blocks, range by range (a row-range read's extents:
      // only the blocks covering them); block only when nothing else is in flight.
      Item* item = awaiting_;
      ShardFiller* filler = internal::DatasetAccess::shard_filler(*dataset_);
      const uint32_t shard = item->location.shard;
      const size_t ranges = item->layout.ranges();
      Result<bool> ready = true;
      while (item->cache_holds.size() < ranges) {
        const ReadExtent e = item->layout.range(item->cache_holds.size());
        std::unique_ptr<ShardFiller::Hold> hold;
        if (engine_->in_flight() == 0) {
          Status st = filler->Ensure(shard, e.file_offset, e.length, &hold);
          if (!st.ok()) {
            ready = st;
            break;
          }
        } else {
          ready = filler->Request(shard, e.file_offset, e.length, &hold);
          if (!ready.ok()) break;
          if (!*ready) {
            // Queue the missing blocks of the later ranges too (no pin yet), in read order.
            for (size_t k = item->cache_holds.size() + 1; k < ranges; ++k) {
              const ReadExtent later = item->layout.range(k);
              (void)filler->Request(shard, later.file_offset, later.length, nullptr);
            }
            break;
          }
        }
        item->cache_holds.push_back(std::move(hold));
      }
      if (ready.ok() && !*ready) break;  // reap meanwhile
      awaiting_ = nullptr;
      if (!ready.ok() && ShardFiller::NoRoom(ready.status())) {
        // No room in the cache, nothing evictable: the bytes read through, uncached, and
        // checked as any read is (docs/CACHE.md §4).
        item->cache_holds.clear();
        Status through = Status::OK();
        for (size_t k = 0; k < ranges && through.ok(); ++k) {
          const ReadExtent e = item->layout.range(k);
          through = filler->ReadThrough(shard, e.file_offset, e.length,
                                        item->read_slot.get() + e.slot_offset);
        }
        if (through.ok()) {
          item->next_sub = item->layout.read_length;
          item->bytes_read = item->layout.read_length;
          FinishRead(item);
          continue;
        }
        ready = through;
      }
      if (!ready.ok()) {
        DoneReading(item);
        Complete(item, ready.status().WithContext("sample " + std::to_string(item->sample)));
      } else {
        issuing_ = item;
      }
      continue;
    }
    if (issuing_ == nullptr) {
      if (consumer_batch_started_) {  // fully submitted: let its reads go first
        consumer_batch_started_ = false;
        if (engine_->in_flight() > 0) break;
      }
      // A compressed dataset: reads of at most reading_bound_bytes_ of slots at once.
      if (reading_bytes_ >= reading_bound_bytes_) break;
      LIBSHARD_ASSIGN_OR_RETURN(bool started, StartNextItem());
      if (!started) break;
      continue;
    }
    Item* item = issuing_;
    const uint64_t off = item->next_sub;
    // Within one extent of a row-range read (read_layout.h), else from layout.file_offset.
    const ReadLayout::SubRead sub = item->layout.SubReadAt(off, read_size_);
    const uint64_t len = sub.length;
    const uint64_t id = next_read_id_++;
    io::ReadRequest r;
    r.file = item->location.shard;
    r.offset = sub.file_offset;
    r.length = len;
    r.dst = item->read_slot.get() + off;
    r.tag = id;
    LIBSHARD_RETURN_IF_ERROR(engine_->Submit(r));
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      inflight_.emplace(id, Inflight{item, r.offset, len, diagnostics_->clock().Now()});
    }
    item->next_sub += len;
    ++item->subs_pending;
    if (item->next_sub >= item->layout.read_length) issuing_ = nullptr;
  }
  LIBSHARD_RETURN_IF_ERROR(engine_->Flush());

  // Wake once per several completions while many reads are in flight: with small samples a
  // wake-up per read is most of the loader's CPU (the queue stays 7/8 full meanwhile).
  std::vector<io::ReadCompletion> done;
  const uint32_t want = std::clamp<uint32_t>(engine_->in_flight() / 8, 1, 8);
  LIBSHARD_RETURN_IF_ERROR(engine_->Reap(&done, /*wait=*/true, kPollMs, want));
  for (io::ReadCompletion& c : done) {
    Inflight read;
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      auto it = inflight_.find(c.tag);
      if (it == inflight_.end()) continue;
      read = it->second;
      inflight_.erase(it);
    }
    OnSubReadDone(read.item, c, read.item->layout.SlotOffsetOf(read.offset), read.length);
  }
  return Status::OK();
}

Result<bool> ReadScheduler::StartNextItem() {
  std::unique_lock<std::mutex> lock(queue_->mu);
  if (steps_done_) return false;
  // The workers are behind: read nothing more until they take some of the backlog (a worker
  // wakes the scheduler). They always do, so this never stalls the pipeline for good.
  if (blocked_on_backlog_ || BacklogFull()) {
    blocked_on_backlog_ = true;
    return false;
  }
  const StepSequence& steps = *queue_->steps;
  // A step fetched but not started that the caller has passed over since is dropped
  // (StepSequence::NextWanted; the read-ahead's order only).
  if (sched_in_batch_ == 0 && !sched_samples_.empty() &&
      steps.NextWanted(sched_batch_ - 1) != sched_batch_ - 1) {
    sched_samples_.clear();
  }
  while (sched_in_batch_ >= sched_samples_.size()) {
    sched_batch_ = steps.NextWanted(sched_batch_);
    if (sched_batch_ >= steps.steps()) {
      steps_done_ = true;
      return false;
    }
    sched_samples_.clear();
    steps.AppendStepSamples(sched_batch_++, &sched_samples_);
    sched_in_batch_ = 0;
  }
  // The consumer's batch may always be completed; later ones respect the queue cap.
  if (queue_->items.size() >= kMaxQueuedItems && sched_batch_ - 1 > queue_->next_batch) {
    return false;
  }

  const uint64_t sample = sched_samples_[sched_in_batch_];
  auto item = std::make_unique<Item>();
  item->step = sched_batch_ - 1;
  item->sample = sample;
  // Locate, not location: a version 2 index reads the sample's block on first use, and a
  // damaged one is this sample's error (FORMAT.md §3.8.7).
  Result<SampleLocation> located = dataset_->Locate(sample);
  item->location = located.ok() ? *located : SampleLocation{};
  Result<ReadLayout> planned =
      PlanItem(sample, item->location, sched_samples_, sched_in_batch_, &item->sp);
  if (planned.ok()) item->layout = std::move(planned).value();
  const bool compressed = SampleNeedsDecode(item->location.flags);
  const uint64_t read_bytes = item->layout.read_length;
  const uint64_t raw_bytes = item->layout.decoded_bytes;  // compressed, or a row-range read

  Status too_large;  // or any error known before the read
  if (!located.ok()) {
    too_large = located.status();
  } else if (!planned.ok()) {
    too_large = planned.status().WithContext("sample " + std::to_string(sample));
  } else if (read_bytes + raw_bytes > arena_->budget()) {
    const SequenceSlice& sl = item->sp.slice;
    too_large = Status::ResourceExhausted(
        "sample " + std::to_string(sample) + " (" + ItemWhere(*item) + ") needs " +
        std::to_string(read_bytes + raw_bytes) + " bytes (" + Mib(read_bytes + raw_bytes) +
        (compressed ? ", stored + decoded" : "") +
        (item->sp.sp_size > 0
             ? " for the sequence_parallel slice of rank " + std::to_string(item->sp.sp_rank) +
                   " of " + std::to_string(item->sp.sp_size) + ", rows [" +
                   std::to_string(sl.start) + ", " + std::to_string(sl.stop) + ") of " +
                   std::to_string(sl.full_length)
             : std::string(", read whole")) +
        ") but the loader memory_budget is " + std::to_string(arena_->budget()) + " bytes (" +
        Mib(arena_->budget()) + "); raise memory_budget above the largest " +
        (item->sp.sp_size > 0 ? "slice, or raise sequence_parallel"
                              : "sample, or give sequence_parallel=N so that each of N ranks "
                                "reads only its slice of the sample") +
        (item->sp.sp_size > 0 && !dataset_->has_row_blocks()
             ? " (this dataset has no row blocks, so each slice reads its fields whole: "
               "`libshard upgrade` adds them)"
             : ""));
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
      queue_->blocked_on_memory = engine_->in_flight() == 0;
      queue_->blocked_need = std::max(read_bytes, raw_bytes);
      if (queue_->blocked_on_memory) queue_->ready_cv.notify_all();
      return false;
    }
    item->read_slot = std::move(slot).value();
    item->raw_slot = std::move(raw);
    item->slot_bytes = SlotBytes(read_bytes) + SlotBytes(raw_bytes);
    if (compressed) {
      item->reading_bytes = item->slot_bytes;
      reading_bytes_ += item->reading_bytes;
    }
  }
  queue_->blocked_on_memory = false;
  item->seq = queue_->next_seq++;
  ++sched_in_batch_;
  consumer_batch_started_ =
      sched_in_batch_ == sched_samples_.size() && sched_batch_ - 1 == queue_->next_batch;
  Item* raw_item = item.get();
  queue_->pipeline_bytes += item->slot_bytes;
  queue_->items.push_back(std::move(item));
  ShardFiller* const filler = internal::DatasetAccess::shard_filler(*dataset_);  // s3:// datasets only (remote/)
  if (filler != nullptr) PrefetchAhead(steps, filler);
  lock.unlock();
  if (!too_large.ok()) {
    Complete(raw_item, std::move(too_large));
  } else if (filler != nullptr) {
    // The cache blocks the read covers must be present before it is issued (docs/CACHE.md):
    // SchedulerStep issues it then, reaping the reads in flight meanwhile.
    awaiting_ = raw_item;
  } else {
    issuing_ = raw_item;
  }
  return true;
}

Result<ReadLayout> ReadScheduler::PlanItem(uint64_t sample, const SampleLocation& location,
                                           std::span<const uint64_t> batch, size_t at,
                                           Sample::SequenceParallelSlice* sp) const {
  const SequenceParallel& o = options_.sequence_parallel;
  if (!o.enabled())
    return PlanRead(*dataset_, sample, location, field_indices_, options_.max_len,
                    partial_check_);
  // Sequence parallelism: this rank's rows of the sample by the group's rule, from the index's
  // length (clipped to max_len by the rule), read as a row-range read (FORMAT.md §3.10).
  SplitRequest request;
  request.length = dataset_->length(sample);
  request.max_len = options_.max_len;
  request.sp_size = o.degree;
  request.sp_rank = options_.rank % o.degree;
  request.ttt_length = o.ttt_length;
  request.ulysses_size = o.ulysses_size;
  if (SplitRuleInfoOf(o.rule).packed) {
    // The rank's part of the batch's packed row (recipe_len rows, as the recipe packs the
    // batch's samples: option_table.cc checked it has PackedRecipeRows): this sample's stored
    // rows behind it, none when the part holds none of its rows.
    const PackedRecipeRows& packed = *FindBatchRecipe(options_.collate)->packed;
    request.length = options_.recipe_len;
    request.max_len = 0;
    LIBSHARD_ASSIGN_OR_RETURN(SequenceSlice slice, SliceOf(o.rule, request));
    std::vector<uint64_t> stored;
    stored.reserve(at + 1);
    for (size_t j = 0; j <= at; ++j) {  // as the recipe sees them: clipped to max_len
      const uint64_t length = dataset_->length(batch[j]);
      stored.push_back(options_.max_len > 0 ? std::min(length, options_.max_len) : length);
    }
    const std::vector<uint64_t> lengths =
        recipe::PackedLengths(packed, stored, options_.recipe_len);
    const RowRange rows = recipe::PackedStoredRows(packed, lengths, at, slice.start, slice.stop);
    // The slice in the sample's stored rows; chunk and offset stay the part's (T / N, r·T / N).
    slice.full_length = stored[at];
    slice.start = rows.start;
    slice.stop = rows.stop;
    slice.pad_to = slice.batch_pad_to = rows.stop - rows.start;
    sp->sp_size = o.degree;
    sp->sp_rank = request.sp_rank;
    sp->rule = o.rule;
    sp->slice = slice;
    if (location.stored_size == 0)
      return PlanRead(*dataset_, sample, location, field_indices_, 0, partial_check_);
    return PlanSliceRead(*dataset_, sample, location, field_indices_, rows, partial_check_);
  }
  LIBSHARD_ASSIGN_OR_RETURN(const SequenceSlice slice, SliceOf(o.rule, request));
  sp->sp_size = o.degree;
  sp->sp_rank = request.sp_rank;
  sp->rule = o.rule;
  sp->slice = slice;
  if (location.stored_size == 0) return PlanRead(*dataset_, sample, location, field_indices_,
                                                 options_.max_len, partial_check_);
  LIBSHARD_ASSIGN_OR_RETURN(
      ReadLayout layout,
      PlanSliceRead(*dataset_, sample, location, field_indices_,
                    RowRange{slice.start, slice.stop}, partial_check_));
  // An s3:// dataset's cache fills and pins the extents one by one (SchedulerStep, docs/CACHE.md):
  // only the blocks covering them are fetched.
  return layout;
}

void ReadScheduler::PrefetchAhead(const StepSequence& steps, ShardFiller* filler) {
  // Bounded work per call; the filler's queue bounds how far ahead the fetch runs.
  for (int n = 0; n < 256 && filler->Hungry(); ++n) {
    while (pf_in_batch_ >= pf_samples_.size()) {
      pf_batch_ = steps.NextWanted(pf_batch_);
      if (pf_batch_ >= steps.steps()) return;
      pf_samples_.clear();
      steps.AppendStepSamples(pf_batch_++, &pf_samples_);
      pf_in_batch_ = 0;
    }
    const uint64_t sample = pf_samples_[pf_in_batch_++];
    if (pf_seq_++ < queue_->next_seq) continue;  // started already: Ensure fetches it
    Result<SampleLocation> loc = dataset_->Locate(sample);
    if (!loc.ok()) continue;  // its item reports the error
    Sample::SequenceParallelSlice sp;
    const Result<ReadLayout> layout = PlanItem(sample, *loc, pf_samples_, pf_in_batch_ - 1, &sp);
    if (!layout.ok()) continue;  // its item reports the error
    for (size_t k = 0; k < layout->ranges(); ++k) {
      const ReadExtent e = layout->range(k);
      filler->Prefetch(loc->shard, e.file_offset, e.length);
    }
  }
}

}  // namespace libshard
