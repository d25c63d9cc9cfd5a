// Loader: streams a Dataset's samples with io_uring + O_DIRECT into one pinned arena and hands
// them out as zero-copy tensor views, shuffled, split across ranks, batched, resumable.
//
// Thread-safety: Next(), SetEpoch() and state() are called by one consumer thread; stats() and
// Stop() may be called from any thread at any time. Samples returned by Next() stay valid for as
// long as any copy of them (or of their memory_owner()) lives, also after the Loader is destroyed;
// their arena memory is reused only after that.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/io_options.h"  // IoEngineKind, IoMode
#include "libshard/option_table.h"
#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard {

enum class OnError : uint32_t {
  kRaise = 0,    // Next() returns the error (sample, file, offset)
  kSkip = 1,     // the sample is skipped, counted in stats and recorded in the state
  // With kSkip a batch that lost some samples is delivered smaller. A batch that lost all of them
  // (with single samples: every skip) is replaced by a repeat of the first sample of the last
  // batch delivered (counted in stats().samples_repeated), so every rank still yields
  // batches_per_epoch() batches and DDP ranks stay in step. Only when no such sample is at hand
  // (before the first delivery after Create or a resume, or after the loader let it go to free
  // memory) is the batch dropped, with a log line. `libshard verify` before a long multi-rank run
  // avoids all of this.
};

// The names users give these settings (Python options, CLI flags, LIBSHARD_ENGINE and
// LIBSHARD_IO_MODE): "auto" | "uring" (or "io_uring") | "pread"; "auto" | "direct" | "buffered";
// "raise" | "skip". Anything else is InvalidArgument listing the accepted names.
Result<IoEngineKind> ParseIoEngineKind(std::string_view name);
Result<IoMode> ParseIoMode(std::string_view name);
// "auto", "on" (or "true"), "off" (or "false").
Result<PinMemory> ParsePinMemory(std::string_view name);
Result<OnError> ParseOnError(std::string_view name);

// How max_tokens bounds a batch (LoaderOptions::token_budget; docs/ORDER.md §2).
enum class TokenBudget : uint32_t {
  kAuto = 0,    // kPadded with Collate::kPad, else kSum
  kSum = 1,     // the batch's summed length stays <= max_tokens (packed, varlen attention)
  kPadded = 2,  // samples x longest length stays <= max_tokens: what a padded batch occupies
};

// A sample longer than max_tokens (after max_len clipping): it cannot share a batch.
enum class OversizedSample : uint32_t {
  kOwnBatch = 0,  // it becomes a batch of its own (the one batch that exceeds the budget)
  kError = 1,     // Loader::Create fails naming the sample, its length and what to change
};

// Batches assembled by the loader (LoaderOptions::collate): one tensor per field in one pinned
// arena region, so a consumer touches one object per step.
//
// Memory: with a collate, 1/4 of memory_budget (up to 1/2 when two of the largest batches,
// estimated from the index at Create, need more; a log line says when even that holds fewer
// than two) becomes a second arena of batch regions, pinned like the read arena, which gets the
// rest. Each batch is copied (once, on the consumer's thread,
// in Next()) from its samples' read slots into one region, and the read slots are released right
// after the copy, so read-ahead and the batches the consumer holds never wait on each other (no
// deadlock). Only the consumer's own batches hold regions: when none is free, Next() waits, logs
// a warning after 1 s and returns ResourceExhausted once nothing was released for
// max(1, 2 x slow_wait_warning_seconds) s; the batch is kept and the next Next() delivers it. A
// batch larger than the whole batch arena is ResourceExhausted at once, naming its size and the
// memory_budget it needs. state(), stats() and on_error behave as without a collate (a batch
// that lost samples to kSkip is collated smaller; single samples are batches of one).
enum class Collate : uint32_t {
  kNone = 0,  // Batch::samples, one zero-copy Sample each
  kPad = 1,   // every field padded at the end of its sequence dimension to the batch's longest
  kPack = 2,  // every field concatenated along its sequence dimension, with cu_seqlens
};

// Names: "sum" | "padded" | "auto"; "none" | "pad" | "pack". Anything else is InvalidArgument.
Result<TokenBudget> ParseTokenBudget(std::string_view name);
Result<Collate> ParseCollate(std::string_view name);
Result<OversizedSample> ParseOversizedSample(std::string_view name);  // "batch" | "error"

// Where a stream stands. Small, plain data; safe to store in a training checkpoint. A Loader
// created with `resume` set continues exactly where the saved one stopped, also on another
// world size (FORMAT-independent; see docs/ORDER.md for the contract).
struct LoaderState {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t position = 0;               // global position: units of the epoch's global sequence
                                       // consumed by all ranks together
  std::vector<uint64_t> skipped;       // samples skipped by OnError::kSkip this epoch
  // The order version the epoch follows (LoaderOptions::order). 1 by default: a state saved
  // before order versions existed has none and resumes onto the version 1 order exactly; a
  // Loader's state() always sets it.
  uint32_t order = 1;
  // How the epoch's sequence was cut by length-aware batching (LoaderOptions::bucket_window;
  // docs/ORDER.md §2a). window 0: no bucketing, the sequence is the shuffled order
  // itself. A resume in the middle of an epoch keeps the epoch's sequence, so that every sample
  // is still delivered exactly once: a state with window 0 continues the epoch without
  // bucketing (the loader's bucket_window applies from the next epoch); one with window > 0
  // needs the same bucket_window, batch_size, max_tokens and budget (Loader::Create says which
  // differs). A state saved before bucketing existed has window 0.
  struct Bucketing {
    uint64_t window = 0;
    uint32_t batch_size = 0;
    uint64_t max_tokens = 0;
    TokenBudget budget = TokenBudget::kSum;  // resolved: kSum or kPadded
    bool operator==(const Bucketing&) const = default;
  };
  Bucketing bucketing;
  // Follow mode (LoaderOptions::follow; docs/ORDER.md §5): the shuffle window of the follow
  // epoch, the first epoch of a dataset being written, which this state is inside; 0: an
  // ordinary epoch. A resume with it continues the follow epoch (at any world size), whether or
  // not the dataset is complete by then.
  uint64_t follow_window = 0;
  bool operator==(const LoaderState&) const = default;
};

// Bounds of LoaderOptions' numeric settings, checked by ValidateLoaderOptions (and so by
// Loader::Create) before any thread starts or memory is reserved. They are far above what any
// use needs; a value past them is a mistake (a unit or a typo), not a configuration.
inline constexpr uint32_t kMaxLoaderWorkerThreads = 256;     // worker_threads: 0 (auto)..256
inline constexpr uint32_t kMaxLoaderQueueDepth = 4096;       // queue_depth: 1..4096
inline constexpr uint64_t kMinLoaderMemoryBudget = 4096;     // memory_budget: 4 KiB..16 TiB
inline constexpr uint64_t kMaxLoaderMemoryBudget = uint64_t{1} << 44;
inline constexpr uint64_t kMaxLoaderReadSize = uint64_t{1} << 30;  // read_size: 0..1 GiB
inline constexpr uint32_t kMaxLoaderBatchSize = uint32_t{1} << 24;  // batch_size: 0..2^24
inline constexpr uint64_t kMaxLoaderBucketWindow = uint64_t{1} << 24;  // bucket_window: 0..2^24
// LoaderOptions::bucket_window's default, "auto": kAutoBucketWindowSize samples with padded
// batches (collate kPad, or consumer_pads) of more than one sample, where padding costs GPU
// work; 0 (off) otherwise. Resolved once, by ResolveLoaderOptions.
inline constexpr uint64_t kAutoBucketWindow = UINT64_MAX;
inline constexpr uint64_t kAutoBucketWindowSize = 4096;
// LoaderOptions::shuffle_window: 1..2^24 samples; 4096 by default.
inline constexpr uint64_t kMaxLoaderShuffleWindow = uint64_t{1} << 24;

struct LoaderOptions {
  // Order.
  bool shuffle = true;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  bool drop_last = false;              // false: wrap around so every rank gets the same count
  std::optional<LoaderState> resume;   // overrides seed/epoch/order; continues the global sequence
  // Order version of a shuffled epoch (docs/ORDER.md §1): 2, the default, evaluates the shuffle
  // per position in O(1) (a rank of a large world starts at once); 1 is the Fisher-Yates order
  // of libshard before versions, O(n) per epoch, to reproduce earlier runs. Unshuffled, both are
  // the dataset order.
  uint32_t order = 2;

  // What to read.
  // Empty: all fields; else only these tensors' bytes. (Front ends spell "all" None; an empty
  // list given through the option table is an error, not "all".)
  std::vector<std::string> fields;
  uint64_t max_len = 0;                // >0: read only the first max_len rows of seq_dim

  // Batching: single samples (batch_size 0 or 1), fixed-size batches, or token-budget batches.
  uint32_t batch_size = 0;
  uint64_t max_tokens = 0;             // >0: token-budget batches, bounded as token_budget says
  TokenBudget token_budget = TokenBudget::kAuto;
  OversizedSample oversized = OversizedSample::kOwnBatch;
  // Length-aware batching (docs/ORDER.md §2a): >0 groups samples of similar length
  // inside consecutive windows of this many samples of the shuffled order, cuts each window
  // into batches (max_tokens or batch_size) and shuffles the window's batches. Exact-once,
  // equal steps per rank and elastic resume hold as without it. 0: batches are consecutive
  // samples of the shuffled order. Needs max_tokens or batch_size > 1. kAutoBucketWindow (the
  // default): on, kAutoBucketWindowSize samples, with padded batches, else off, as the Python
  // Loader's bucket_window="auto" (one rule, ResolveLoaderOptions).
  uint64_t bucket_window = kAutoBucketWindow;

  // Collation (Collate above). Sequence dimensions come from the schema (Field::seq_dim).
  Collate collate = Collate::kNone;
  // kPad: the value of padded positions, cast to each field's dtype as torch's fill_ does
  // (integers truncated toward zero, floats rounded to nearest even); a value a padded field's
  // dtype cannot hold, or a name that is not a field, is InvalidArgument at Create.
  double padding_value = 0;
  std::vector<std::pair<std::string, double>> padding_values;  // kPad: per field, overrides
  // The caller pads the batches itself (collate kNone with a padding collate of its own, such
  // as Python's pad_collate): the "auto" settings (token_budget, bucket_window) resolve as with
  // kPad. Changes nothing else.
  bool consumer_pads = false;

  // Memory and I/O.
  // The arena; every queue is bounded by it. Reserved at once (one mapping) but touched, pinned
  // and registered with io_uring 64 MiB at a time as reads first land there, so any budget
  // starts in the same time and only what the loader uses becomes resident. Capped at what the
  // whole dataset could occupy.
  uint64_t memory_budget = uint64_t{2} << 30;
  uint32_t queue_depth = 64;           // reads in flight
  uint64_t read_size = uint64_t{4} << 20;  // large samples are split into reads of this size
  IoEngineKind engine = IoEngineKind::kAuto;   // env LIBSHARD_ENGINE=uring|pread overrides kAuto
  IoMode io_mode = IoMode::kAuto;              // env LIBSHARD_IO_MODE=direct|buffered overrides
  // cudaHostRegister the arena, each 64 MiB chunk when first used (PinMemory).
  PinMemory pin_memory = PinMemory::kAuto;
  // Threads that verify checksums and decode compressed samples; 1..256, or 0 (the default):
  // one per core (at most kAutoDecodeWorkers) for a dataset stored compressed, whose decoding
  // is most of the loader's work and runs in parallel across samples, else 1 (a checksum
  // costs about 0.045 CPU-s per GB, docs/performance.md). AutoWorkerThreads() says what 0 gives.
  uint32_t worker_threads = 0;
  // Every byte served is checked on the worker threads before it is handed out, so damaged or
  // foreign bytes are never served as tensors (FORMAT.md §3.9): a sample read whole against its
  // sample checksum; a partial read (`fields`, `max_len`) of a dataset with field checksums
  // (index version 3) against the checksum of each field served, which it then reads whole
  // (a `max_len` prefix costs the rest of each served field, never the other fields); without
  // field checksums (an older index: `libshard upgrade` adds them) a partial read reads the
  // whole sample. false checks nothing and reads only the bytes served; turn it off only for
  // data whose integrity is known (e.g. just checked with `libshard verify`). Samples whose shard
  // was replaced by another dataset's are refused at Dataset::Open either way (shard uids,
  // FORMAT.md §4.1).
  bool verify_checksums = true;
  OnError on_error = OnError::kRaise;

  // Observability.
  // One log line when the consumer waits this long. When Next() cannot proceed because the
  // consumer itself holds the arena memory, it warns after 1 s and returns ResourceExhausted
  // once nothing was released for max(1, 2 x this) seconds.
  double slow_wait_warning_seconds = 10.0;
  double stats_interval_seconds = 0;   // >0 (or env LIBSHARD_STATS=seconds): periodic stats lines

  // Follow mode (Loader::Follow; docs/guide/loading.md "Following a dataset being written"):
  // the first epoch serves a dataset's samples while its writer still writes it, as they are
  // committed (FORMAT.md §6.1), each exactly once across ranks, in the follow order of
  // docs/ORDER.md §5; it ends when the writer closes the dataset. Later epochs are ordinary
  // epochs of the complete dataset. While nothing new arrives, Next() waits, with a log line
  // every slow_wait_warning_seconds (doubling) naming the dataset and what it waits for. Needs
  // single samples or batch_size (not max_tokens); bucket_window applies from the next epoch.
  bool follow = false;
  // Follow mode: arrivals are shuffled within windows that grow 1, 2, 4, ... samples up to this
  // many (ORDER.md §5.1): larger mixes more, smaller serves sooner. Ignored without shuffle.
  uint64_t shuffle_window = 4096;
};

struct InflightRead {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t sample = 0;
  double age_seconds = 0;
};

struct LoaderStats {
  uint64_t samples_delivered = 0;
  uint64_t batches_delivered = 0;
  uint64_t bytes_delivered = 0;        // payload bytes handed to the consumer
  uint64_t bytes_read = 0;             // bytes read from storage
  double elapsed_seconds = 0;          // since the first Next()
  double throughput_gbps = 0;          // bytes_read / elapsed, GB/s (1e9)
  double wait_seconds = 0;             // time the consumer spent blocked in Next()
  double wait_share = 0;               // wait_seconds / elapsed_seconds
  uint64_t reads_in_flight = 0;
  double oldest_read_age_seconds = 0;
  std::vector<InflightRead> inflight;  // a few of the oldest reads in flight
  std::string engine;                  // "io_uring" or "pread"
  std::string engine_status;           // why the fallback, or what registration failed; "" if none
  bool direct_io = false;              // every shard is read with O_DIRECT
  std::string io_status;               // why (some) shards are read buffered; "" when all direct
  bool pinned = false;
  std::string pin_status;              // why not pinned, when not
  uint64_t arena_budget = 0;
  uint64_t arena_in_use = 0;
  uint64_t arena_peak = 0;
  // The most arena bytes (read and decoded slots) held at once by compressed samples read and
  // waiting for, or in, decoding on the worker threads. The loader starts no read while that
  // backlog holds two samples per worker and the larger of min(64 MiB per worker, a quarter of
  // the arena) and two queues of reads (each at most what the reads in flight may hold: 32 MiB
  // per worker) within three quarters of the arena, so it stays below that plus the samples
  // already started then (at most queue_depth + 1).
  uint64_t worker_backlog_peak = 0;
  uint64_t checksum_failures = 0;
  uint64_t samples_skipped = 0;
  uint64_t samples_repeated = 0;       // stand-ins for batches that lost every sample (kSkip)
  // Positions of the delivered batches as a padded batch lays them out (samples x longest
  // length, summed over batches) and how many of them are padding (that minus the lengths),
  // from the index lengths (clipped to max_len), whatever the collate. Single samples: none.
  uint64_t batch_positions = 0;
  uint64_t padding_positions = 0;
  double padding_share = 0;            // padding_positions / batch_positions (0 when none)
};

// Upper bound of worker_threads = 0 for a compressed dataset.
inline constexpr uint32_t kAutoDecodeWorkers = 8;

// The worker threads a Loader starts for `dataset` with `options` (resolving worker_threads 0).
uint32_t AutoWorkerThreads(const Dataset& dataset, const LoaderOptions& options);

// The loader's option table (libshard/option_table.h): every LoaderOptions setting with its
// name, type, default, bounds, other spellings and doc. The Python bindings read their dict and
// `libshard info --batches` its key=value text through it; _core.pyi's option types are
// generated from it (scripts/gen_core_pyi.py). Rows beyond the members: "verify" (None: check
// what is read whole; True: also read partial reads whole to check them; False: nothing).
const OptionTable<LoaderOptions>& LoaderOptionTable();

// InvalidArgument naming the option and its accepted range when a numeric setting of `options`
// is out of bounds (the k*Loader* constants above, LoaderOptionTable's bounds), or a duration
// is negative or not a number. Loader::Create calls it first; bindings may call it to fail early.
[[nodiscard]] Status ValidateLoaderOptions(const LoaderOptions& options);

// `options` validated, with every "auto" decided, in the one place it is decided:
//   token_budget kAuto  -> kPadded with padded batches (collate kPad or consumer_pads), else kSum;
//   bucket_window auto  -> kAutoBucketWindowSize with padded batches of more than one sample
//                          (max_tokens, or batch_size > 1), else 0.
// (worker_threads 0 depends on the dataset: AutoWorkerThreads.) Loader::Create and
// SummarizeBatching use it, and Loader::options() returns the resolved options.
Result<LoaderOptions> ResolveLoaderOptions(const LoaderOptions& options);

// A batch the loader assembled (LoaderOptions::collate), in one arena region that `memory`
// keeps alive (like Sample::memory_owner()).
//   kPad:  a field with a sequence dimension d becomes [B, ..., L_max (at d), ...] padded with its
//          padding value; a field whose dim 0 has size 1 in every sample and is not d
//          ([1, L, H]) becomes [B, L_max, H] (concatenated along dim 0); fields without a
//          sequence dimension are stacked along a new dim 0.
//   kPack: a field with sequence dimension d is concatenated along d ([1, sum L, H], [sum L]);
//          others are stacked along a new dim 0. cu_seqlens is filled.
// lengths come from the schema's length field when it is read, else from the first field read
// that has a sequence dimension, else are 1. Every field's tensor starts 64-byte aligned. Samples
// that differ in a dimension other than the sequence one cannot be batched: Next() returns
// InvalidArgument naming the field, the samples and the dataset.
// (The same layouts as the Python pad_collate / pack_collate.)
struct CollatedBatch {
  std::vector<TensorView> tensors;     // one per field read, in schema order
  std::vector<uint64_t> indices;       // dataset index of each sample, in batch order
  std::vector<Metadata> metadata;      // each sample's metadata, in batch order
  std::vector<int64_t> lengths;        // each sample's length before padding / packing
  std::vector<int32_t> cu_seqlens;     // kPack: B + 1 cumulative lengths from 0; else empty
  int64_t max_seqlen = 0;
  std::shared_ptr<const void> memory;
};

// What the loader's batching makes of a dataset in one epoch, from the index lengths alone (no
// sample is read): for choosing max_tokens, the budget and bucket_window before a run
// (`libshard info --batches`). Counts cover every rank's steps, wrap-around repeats included.
struct BatchingSummary {
  uint64_t batches = 0;            // steps of all ranks together
  uint64_t steps_per_rank = 0;
  uint64_t samples = 0;            // samples in those batches
  uint64_t tokens = 0;             // their summed lengths (clipped to max_len)
  uint64_t positions = 0;          // summed batch size x longest length: what padding lays out
  uint64_t padding_positions = 0;  // positions - tokens
  double padding_share = 0;        // padding_positions / positions
  uint64_t largest_positions = 0;  // the largest batch's size x longest length
  uint64_t largest_tokens = 0;     // the largest batch's summed length
  uint64_t oversized_batches = 0;  // single samples longer than max_tokens
};

// Plans epoch options.epoch (seed, shuffle, order, world_size, batching, bucketing, max_len of
// `options`) and sums it up. InvalidArgument as Loader::Create for inconsistent options.
// O(N) time (O(N log M) with bucket_window M); memory: the lengths and 8 bytes per batch.
Result<BatchingSummary> SummarizeBatching(const Dataset& dataset, const LoaderOptions& options);

// Samples of one step. For single-sample mode it holds one sample. With a collate, `samples` is
// empty and `collated` holds the batch.
struct Batch {
  std::vector<Sample> samples;
  std::optional<CollatedBatch> collated;
};

class Loader {
 public:
  static Result<std::unique_ptr<Loader>> Create(std::shared_ptr<const Dataset> dataset,
                                                const LoaderOptions& options = {});
  // Follow mode (LoaderOptions::follow, which this sets): a loader of the dataset at `path`
  // while it is being written, or before its writer starts (docs/FORMAT.md §6.1); also of a
  // complete one, whose first epoch is then the follow order all the same (every rank agrees
  // whenever it started). `dataset_options` apply to what it reads.
  static Result<std::unique_ptr<Loader>> Follow(const std::string& path,
                                                const LoaderOptions& options = {},
                                                const DatasetOptions& dataset_options = {});
  virtual ~Loader() = default;  // stops and waits for reads in flight

  // Blocks until the next batch of this rank is ready; nullopt at the end of the epoch (call
  // SetEpoch to go on). Errors name the sample, the shard file and the offset. A batch whose read
  // failed counts as consumed: state() moves past it, so a Next() after the error continues
  // with the following batch, and a state saved then resumes after the failed one.
  virtual Result<std::optional<Batch>> Next() = 0;
  // Starts epoch `epoch` from its beginning (drops what was prefetched).
  virtual Status SetEpoch(uint64_t epoch) = 0;
  // The state after the last batch returned by Next(): resume from it to continue.
  virtual LoaderState state() const = 0;
  // Batches this rank gets per epoch (follow mode, while the dataset is being written: the
  // batches known so far; batches_per_epoch_known() is then false).
  virtual uint64_t batches_per_epoch() const = 0;
  virtual bool batches_per_epoch_known() const { return true; }
  virtual LoaderStats stats() const = 0;
  // Cancels reads in flight and makes Next() return Aborted; returns promptly. Idempotent.
  virtual void Stop() = 0;
  virtual const LoaderOptions& options() const = 0;
};

}  // namespace libshard
