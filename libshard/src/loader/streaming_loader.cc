#include "loader/streaming_loader.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "dataset/dataset_access.h"
#include "loader/caller_steps.h"
#include "remote/shard_filler.h"
#include "util/env_knobs.h"

namespace libshard {

Status Loader::SetEpochSteps(uint64_t epoch, EpochSteps steps) {
  (void)epoch;
  (void)steps;
  return Status::Unsupported("Loader::SetEpochSteps is not implemented by this loader");
}

Result<std::unique_ptr<Loader>> Loader::Create(std::shared_ptr<const Dataset> dataset,
                                               const LoaderOptions& options) {
  return StreamingLoader::Make(std::move(dataset), options);
}

Result<std::unique_ptr<Loader>> StreamingLoader::Make(std::shared_ptr<const Dataset> dataset,
                                                      const LoaderOptions& options,
                                                      DiagnosticsHooks hooks) {
  if (dataset == nullptr) return Status::InvalidArgument("Loader::Create: dataset is null");
  LIBSHARD_RETURN_IF_ERROR(ReadEnvKnobs().status());  // a bad LIBSHARD_* variable, named
  if (options.order.kind() == OrderKind::kFollow)
    return Status::InvalidArgument("Loader options: the follow order follows a dataset directory "
                                   "being written: create it with Loader::Follow(path) (Python: "
                                   "libshard.Loader(path, follow=True)), not from a Dataset");
  // Checked before any thread or memory; every "auto" decided here, once (options() shows it).
  LIBSHARD_ASSIGN_OR_RETURN(const LoaderOptions resolved, ResolveLoaderOptions(options));
  std::unique_ptr<StreamingLoader> loader(
      new StreamingLoader(std::move(dataset), resolved, std::move(hooks)));
  LIBSHARD_RETURN_IF_ERROR(loader->Init());
  return std::unique_ptr<Loader>(std::move(loader));
}

Result<std::unique_ptr<StreamingLoader>> StreamingLoader::MakeWithSteps(
    std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
    std::shared_ptr<const StepSequence> steps, LoaderState state, DiagnosticsHooks hooks) {
  if (dataset == nullptr || steps == nullptr)
    return Status::InvalidArgument("StreamingLoader::MakeWithSteps: dataset or steps is null");
  LoaderOptions given = options;
  given.resume.reset();
  LIBSHARD_ASSIGN_OR_RETURN(const LoaderOptions resolved, ResolveLoaderOptions(given));
  std::unique_ptr<StreamingLoader> loader(
      new StreamingLoader(std::move(dataset), resolved, std::move(hooks)));
  loader->given_steps_ = std::move(steps);
  loader->given_state_ = std::move(state);
  LIBSHARD_RETURN_IF_ERROR(loader->Init());
  return loader;
}

namespace {

double StatsInterval(const LoaderOptions& options) {
  // A bad LIBSHARD_STATS fails Loader::Create (ReadEnvKnobs in Make).
  const double env = EnvKnobsOrDefaults().stats_seconds;
  return env >= 0 ? env : options.stats_interval_seconds;
}

}  // namespace

StreamingLoader::StreamingLoader(std::shared_ptr<const Dataset> dataset,
                                 const LoaderOptions& options, DiagnosticsHooks hooks)
    : dataset_(std::move(dataset)),
      options_(options),
      log_(hooks.sink ? hooks.sink : StderrLogSink()),
      diagnostics_(std::move(hooks), StatsInterval(options)) {
  if (dataset_ != nullptr) {
    const DatasetIdentity identity = dataset_->identity();
    if (identity.recorded) identity_ = identity.digest;
  }
}

StreamingLoader::~StreamingLoader() {
  Stop();
  if (arena_ != nullptr) arena_->SetReleaseCallback(nullptr);
  if (batch_arena_ != nullptr) batch_arena_->SetReleaseCallback(nullptr);
  scheduler_.reset();  // joins its threads and cancels the reads in flight
  std::deque<std::unique_ptr<Item>> items;
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    items = queue_.TakeItems();
  }
}

Status StreamingLoader::Init() {
  const Schema& schema = dataset_->schema();
  std::vector<size_t> field_indices;
  for (const std::string& name : options_.fields) {
    std::optional<size_t> f = schema.Find(name);
    if (!f) {
      std::string known;
      for (const Field& fd : schema.fields) known += (known.empty() ? "" : ", ") + fd.name;
      return Status::InvalidArgument("fields: '" + name + "' is not a field of " +
                                     dataset_->path() + " (fields: " + known + ")");
    }
    field_indices.push_back(*f);
  }
  if (options_.sequence_parallel.enabled() && schema.length_field < 0)
    return Status::InvalidArgument(
        "Loader option sequence_parallel: " + dataset_->path() +
        " has no length field, so a sample's sequence length (what the group splits) is "
        "unknown; write the dataset with a length field (Schema::length_field)");
  if (options_.max_tokens > 0 || options_.bucket_window > 0) {
    std::vector<uint64_t> lengths = dataset_->lengths();
    for (uint64_t& l : lengths) l = ClippedLength(l, options_.max_len);
    lengths_ = std::make_shared<const std::vector<uint64_t>>(std::move(lengths));
  }
  LIBSHARD_ASSIGN_OR_RETURN(factory_, StepFactory::Make(dataset_.get(), options_, lengths_,
                                                        ProcessEnvironment()));
  LIBSHARD_RETURN_IF_ERROR(WarnIfShareExceedsCache());

  memory::ArenaOptions arena_options;
  // kAuto without a CUDA driver: no CUDA call at all (not even loading the runtime to learn that
  // it has no driver). Whatever it resolves to, nothing is pinned before a chunk is used.
  switch (options_.pin_memory) {
    case PinMemory::kOn:
      arena_options.pin = true;
      break;
    case PinMemory::kOff:
      pin_note_ = "not requested (pin_memory=off)";
      break;
    case PinMemory::kAuto:
      arena_options.pin = memory::CudaDriverPresent();
      if (!arena_options.pin) pin_note_ = "not pinned: no CUDA driver here (pin_memory=auto)";
      break;
  }
  // With a collate, batches are copied into regions of a second arena carved out of
  // memory_budget (loader/collate_stage.h), pinned like the read arena; reads get the rest.
  uint64_t read_budget = options_.memory_budget;
  if (options_.collate != Collate::kNone) {
    LIBSHARD_ASSIGN_OR_RETURN(
        Collator collator,
        Collator::Make(schema, options_, dataset_->path()));
    // 1/4 of the budget, or up to 1/2 when that is what two of the largest batches need (a
    // `for batch in loader` loop holds the previous batch while the next is assembled).
    const uint64_t largest = std::min(LargestBatchEstimate(field_indices), uint64_t{1} << 60);
    const uint64_t two = 2 * largest;
    const uint64_t batch_budget = SlotBytes(std::max<uint64_t>(
        {options_.memory_budget / 4, std::min(two, options_.memory_budget / 2), kSlotAlign}));
    if (two > batch_budget) {
      log_("libshard: a collated batch may need up to " + Mib(largest) + "; the memory_budget " +
           "of " + Mib(options_.memory_budget) + " leaves " + Mib(batch_budget) +
           " for batches, room for fewer than two, so a loop that holds the previous batch " +
           "while asking for the next will wait for it; raise memory_budget to at least " +
           Mib(4 * largest) + " or lower batch_size / max_tokens / max_len");
    }
    read_budget = std::max<uint64_t>(options_.memory_budget - batch_budget, kSlotAlign);
    LIBSHARD_ASSIGN_OR_RETURN(batch_arena_, memory::Arena::Create(batch_budget, arena_options));
    collate_ = std::make_unique<CollateStage>(std::move(collator), batch_arena_, options_,
                                              &diagnostics_, &queue_.stopped);
    batch_arena_->SetReleaseCallback([stage = collate_.get()] { stage->Wake(); });
  }
  LIBSHARD_ASSIGN_OR_RETURN(
      arena_, memory::Arena::Create(std::min(read_budget, DatasetFootprint()), arena_options));
  LIBSHARD_ASSIGN_OR_RETURN(scheduler_,
                            ReadScheduler::Create(dataset_, options_, std::move(field_indices),
                                                  arena_.get(), &queue_, &diagnostics_));
  arena_->SetReleaseCallback([scheduler = scheduler_.get()] { scheduler->Wake(); });
  diagnostics_.SetSnapshot([this] { return stats(); });

  if (given_steps_ != nullptr) {
    consumer_ = std::make_unique<BatchConsumer>(options_, &queue_, scheduler_.get(), arena_.get(),
                                                &diagnostics_, *given_state_);
    {
      std::lock_guard<std::mutex> lock(queue_.mu);
      queue_.Reset(given_steps_);
    }
    scheduler_->Start();
    return Status::OK();
  }
  // Where the stream stands before its first step: the resumed state's epoch, position and
  // skipped samples, else the first epoch's start. (The cursor comes from the epoch's steps.)
  const LoaderState* resume = options_.resume ? &*options_.resume : nullptr;
  LoaderState state;
  state.epoch = resume != nullptr ? resume->epoch : options_.epoch;
  state.position = resume != nullptr ? resume->position : 0;
  if (resume != nullptr) state.skipped = resume->skipped;
  consumer_ = std::make_unique<BatchConsumer>(options_, &queue_, scheduler_.get(), arena_.get(),
                                              &diagnostics_, std::move(state));
  if (options_.order.kind() == OrderKind::kCaller) {
    // No epoch until SetEpochSteps; until then state() is the resume state, if any.
    if (resume != nullptr) pending_resume_ = *resume;
    LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<const StepSequence> none,
                              factory_->Steps({.epoch = 0, .resume = resume}));
    std::lock_guard<std::mutex> lock(queue_.mu);
    queue_.Reset(std::move(none));
    return Status::OK();
  }
  return StartEpoch({.epoch = consumer_->state().epoch, .resume = resume});
}

Status StreamingLoader::WarnIfShareExceedsCache() const {
  const ShardFiller* filler = internal::DatasetAccess::shard_filler(*dataset_);
  const NodeLocality* node_locality = factory_->node_locality();
  if (filler == nullptr || filler->cache_bound() == 0 || node_locality == nullptr)
    return Status::OK();
  const uint64_t bound = filler->cache_bound();
  const uint64_t block = filler->cache_block_size();
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t share, node_locality->NodeCachedBytes(block));
  if (share <= bound) return Status::OK();
  const Nodes& n = node_locality->nodes();
  const double again = static_cast<double>(share - bound) / static_cast<double>(share);
  char frac[32];
  std::snprintf(frac, sizeof frac, "%.0f%%", 100.0 * again);
  log_("libshard: node " + std::to_string(n.node_rank) + " of " + std::to_string(n.nodes) +
       " reads a share of " + dataset_->path() + " that fills " + Mib(share) + " of cache blocks (" +
       Mib(block) + " each) under locality='node', more than cache_size " + Mib(bound) +
       " (which bounds the whole cache directory): every epoch after the first fetches up to " +
       Mib(share - bound) + " of it again (" + frac + " of the share, once per epoch) instead "
       "of reading it all from the cache; raise cache_size to at least " + Mib(share) +
       " plus the read-ahead, or run on more nodes (libshard info " + dataset_->path() +
       " --nodes " + std::to_string(n.nodes) + " prints each node's share)");
  return Status::OK();
}

Status StreamingLoader::SetEpochSteps(uint64_t epoch, EpochSteps steps) {
  if (options_.order.kind() != OrderKind::kCaller)
    return Status::InvalidArgument(
        "Loader::SetEpochSteps: this loader plans its own order (" + options_.order.Describe() +
        "); create it with a CallerOrder to give each epoch's steps (in Python: sampler= or "
        "batch_sampler=)");
  if (queue_.stopped.load()) return Status::Aborted("the loader was stopped (Loader::Stop)");
  LIBSHARD_RETURN_IF_ERROR(ValidateEpochSteps(steps, dataset_->size(), dataset_->path()));
  // The saved state continues only the first epoch given, when it is its epoch (ORDER.md §6).
  const LoaderState* resume =
      pending_resume_ && pending_resume_->epoch == epoch && pending_resume_->position > 0
          ? &*pending_resume_
          : nullptr;
  // Checked before anything changes.
  LIBSHARD_ASSIGN_OR_RETURN(
      std::shared_ptr<const StepSequence> next,
      factory_->Steps({.epoch = epoch,
                       .resume = resume,
                       .given = std::make_shared<const EpochSteps>(std::move(steps))}));
  const uint64_t start = resume != nullptr ? resume->position : 0;
  std::vector<uint64_t> skipped = resume != nullptr ? resume->skipped : std::vector<uint64_t>();
  pending_resume_.reset();
  scheduler_->StopPipeline();
  if (collate_ != nullptr) collate_->Drop();
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    consumer_->OnNewEpochLocked(epoch, start, std::move(skipped));
    queue_.Reset(std::move(next));
  }
  epoch_given_ = true;
  scheduler_->Start();
  return Status::OK();
}

Status StreamingLoader::StartEpoch(const EpochStart& start) {
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<const StepSequence> steps, factory_->Steps(start));
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    queue_.Reset(std::move(steps));
  }
  scheduler_->Start();
  return Status::OK();
}

uint64_t StreamingLoader::LargestBatchEstimate(const std::vector<size_t>& fields) const {
  const Schema& schema = dataset_->schema();
  if (dataset_->size() == 0) return 0;
  std::vector<size_t> all;
  for (size_t f = 0; f < schema.fields.size(); ++f) all.push_back(f);
  const std::vector<size_t>& selected = fields.empty() ? all : fields;
  // Per position and per sample bytes, from sample 0: every other dimension of a field is the
  // same in all the samples a batch can hold.
  uint64_t row = 0;
  uint64_t fixed = 0;
  for (size_t f : selected) {
    const Field& field = schema.fields[f];
    const Shape shape = dataset_->tensor(0, f).shape;
    uint64_t elements = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (static_cast<int32_t>(d) == field.seq_dim) continue;
      if (__builtin_mul_overflow(elements, shape[d], &elements)) return UINT64_MAX;
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(elements, DTypeSize(field.dtype), &bytes)) return UINT64_MAX;
    const bool seq = field.seq_dim >= 0 && static_cast<size_t>(field.seq_dim) < shape.size();
    uint64_t& sum = seq ? row : fixed;
    if (__builtin_add_overflow(sum, bytes, &sum)) return UINT64_MAX;
  }
  uint64_t longest = 0;
  uint64_t shortest = UINT64_MAX;
  for (uint64_t i = 0; i < dataset_->size(); ++i) {
    // lengths_ (clipped) is there with max_tokens or bucketing; otherwise one pass over the
    // index lengths.
    const uint64_t len = SampleLength(i);
    longest = std::max(longest, len);
    shortest = std::min(shortest, len);
  }
  // Positions of the largest batch, and its samples.
  uint64_t positions = longest;
  uint64_t samples = 1;
  if (options_.max_tokens > 0) {
    positions = std::max(options_.max_tokens, longest);
    samples = options_.max_tokens / std::max<uint64_t>(shortest, 1) + 1;
  } else if (options_.batch_size > 1) {
    samples = options_.batch_size;
    if (__builtin_mul_overflow(positions, samples, &positions)) return UINT64_MAX;
  }
  uint64_t a = 0;
  uint64_t b = 0;
  uint64_t total = 0;
  if (__builtin_mul_overflow(positions, row, &a) || __builtin_mul_overflow(samples, fixed, &b) ||
      __builtin_add_overflow(a, b, &total))
    return UINT64_MAX;
  return total;
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
           dataset_->size() * 2 * kSlotAlign;
  for (uint64_t i = 0; i < dataset_->size(); ++i) {
    const SampleLocation loc = dataset_->location(i);
    total += SlotBytes(loc.stored_size + kSlotAlign);  // alignment skew included
    if (SampleNeedsDecode(loc.flags)) total += SlotBytes(loc.raw_size);
  }
  return total;
}

Result<std::optional<Batch>> StreamingLoader::Next() {
  if (options_.order.kind() == OrderKind::kCaller && !epoch_given_)
    return Status::InvalidArgument(
        "Loader::Next: this loader takes its order from the caller: give the epoch's steps "
        "with SetEpochSteps first");
  std::optional<Batch> batch;
  if (collate_ == nullptr) {
    LIBSHARD_ASSIGN_OR_RETURN(batch, consumer_->Next());
  } else {
    if (!collate_->has_pending()) {
      LIBSHARD_ASSIGN_OR_RETURN(batch, consumer_->Next());
      if (!batch) return batch;
    }
    LIBSHARD_ASSIGN_OR_RETURN(Batch collated, collate_->Assemble(std::move(batch)));
    batch = std::move(collated);
  }
  if (batch.has_value() && (batch->collated.has_value() || batch->samples.size() > 1 ||
                            options_.batch_size > 1 || options_.max_tokens > 0)) {
    uint64_t count = 0;
    uint64_t longest = 0;
    uint64_t tokens = 0;
    const auto add = [&](uint64_t len) {
      ++count;
      longest = std::max(longest, len);
      tokens += len;
    };
    if (batch->collated.has_value()) {
      for (const int64_t len : batch->collated->lengths) add(static_cast<uint64_t>(len));
    } else {
      for (const Sample& sample : batch->samples) add(SampleLength(sample.index()));
    }
    diagnostics_.OnBatchShape(count, longest, tokens);
  }
  return batch;
}

uint64_t StreamingLoader::SampleLength(uint64_t index) const {
  if (lengths_ != nullptr && index < lengths_->size()) return (*lengths_)[index];
  return ClippedLength(dataset_->length(index), options_.max_len);
}

Status StreamingLoader::SetEpoch(uint64_t epoch) {
  if (queue_.stopped.load()) return Status::Aborted("the loader was stopped (Loader::Stop)");
  if (options_.order.kind() == OrderKind::kCaller)
    return Status::InvalidArgument(
        "Loader::SetEpoch: this loader takes its order from the caller: start epoch " +
        std::to_string(epoch) + " with SetEpochSteps and its steps");
  scheduler_->StopPipeline();
  if (collate_ != nullptr) collate_->Drop();
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    consumer_->OnNewEpochLocked(epoch);
  }
  return StartEpoch({.epoch = epoch});
}

LoaderState StreamingLoader::state() const {
  LoaderState state = consumer_->state();
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
    state.cursor = queue_.steps->Cursor(queue_.next_batch);
  }
  // What the stream is made from (state version 2, docs/ORDER.md §8), which a resume checks.
  state.origin = {};
  state.origin.identity = identity_;
  if (state.kind() == OrderKind::kGlobal || state.kind() == OrderKind::kNodeLocal)
    state.origin.samples = dataset_->size();
  if (state.kind() != OrderKind::kCaller) state.origin.shuffle = options_.order.shuffle();
  return state;
}

uint64_t StreamingLoader::batches_per_epoch() const {
  std::lock_guard<std::mutex> lock(queue_.mu);
  return queue_.steps->epoch_steps();
}

void StreamingLoader::Stop() {
  queue_.stopped.store(true);
  {
    std::lock_guard<std::mutex> lock(queue_.mu);
  }
  queue_.ready_cv.notify_all();
  if (scheduler_ != nullptr) scheduler_->Wake();
  if (collate_ != nullptr) collate_->Wake();
}

LoaderStats StreamingLoader::stats() const {
  LoaderStats s;
  diagnostics_.Fill(&s);
  scheduler_->FillStats(&s);
  s.pinned = arena_->pinned();
  s.pin_status = pin_note_.empty() ? arena_->pin_status() : pin_note_;
  s.arena_budget = arena_->budget();
  s.arena_in_use = arena_->in_use();
  s.arena_peak = arena_->peak();
  return s;
}

}  // namespace libshard
