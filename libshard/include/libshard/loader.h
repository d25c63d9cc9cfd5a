// Loader: streams a Dataset's samples with io_uring + O_DIRECT into one pinned arena and hands
// them out as zero-copy tensor views, shuffled, split across ranks, batched, resumable.
//
// Thread-safety: Next(), SetEpoch() and state() are called by one consumer thread; stats() and
// Stop() may be called from any thread at any time. Samples returned by Next() stay valid for as
// long as any copy of them (or of their memory_owner()) lives, also after the Loader is destroyed;
// their arena memory is reused only after that. Their tensors' names (TensorView::name) live in
// the dataset's schema, and each sample's memory_owner() holds the dataset it was read from (in
// follow mode the loader's own snapshot), so names stay valid as long as the sample too.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libshard/batch_options.h"  // TokenBudget, OversizedSample, BatchingSummary
#include "libshard/collate.h"        // Collate, CollatedBatch
#include "libshard/dataset.h"
#include "libshard/io_options.h"     // IoEngineKind, IoMode
#include "libshard/loader_state.h"   // LoaderState and its encoding
#include "libshard/option_table.h"
#include "libshard/order.h"          // Order, EpochSteps
#include "libshard/sample.h"
#include "libshard/sequence_parallel.h"  // SplitRule
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

// Bounds of LoaderOptions' numeric settings, checked by ValidateLoaderOptions (and so by
// Loader::Create) before any thread starts or memory is reserved. They are far above what any
// use needs; a value past them is a mistake (a unit or a typo), not a configuration.
inline constexpr uint32_t kMaxLoaderWorkerThreads = 256;     // worker_threads: 0 (auto)..256
inline constexpr uint32_t kMaxLoaderQueueDepth = 4096;       // queue_depth: 1..4096
inline constexpr uint64_t kMinLoaderMemoryBudget = 4096;     // memory_budget: 4 KiB..16 TiB
inline constexpr uint64_t kMaxLoaderMemoryBudget = uint64_t{1} << 44;
inline constexpr uint64_t kMaxLoaderReadSize = uint64_t{1} << 30;  // read_size: 0..1 GiB
// (batch_size and bucket_window: libshard/batch_options.h; shuffle_window: libshard/order.h.)

// Sequence-parallel loading (docs/guide/long-context.md, "The loader"; docs/ORDER.md §3a): the
// world is cut into data-parallel groups of `degree` consecutive ranks (group = rank / degree,
// place in the group = rank % degree). Every rank of a group gets the same samples in the same
// order: the steps data-parallel rank `group` of world_size / degree would get, so each sample is
// served exactly once per group across the groups, and resume and elasticity work as without it
// (a state is a state of the data-parallel order). Each rank reads only its own slice of every
// field with a sequence dimension (Field::seq_dim: the fields whose rows the dataset's row blocks
// cut, FORMAT.md §3.10), the rows `rule` gives it for the sample's length (SliceOf), and the
// other fields whole; the arena holds slices, not samples. Sample::sequence_slice() says which
// slice it holds. degree 0 (the default): off. degree 1 is a group of one: every rank gets its
// data-parallel samples as without sequence parallelism, cut and padded by `rule` for a group of
// one (the whole sample; the USP rules pad it by ttt_length, as the trainers do with sp_size 1),
// so a trainer passes its sp_size whatever it is. The speculators rule splits a batch's packed
// row: it goes with collate='speculators-eagle3', whose batch is then the rank's part of the row
// (each sample read only for the rows behind that part).
struct SequenceParallel {
  uint32_t degree = 0;                 // N, ranks per group (0: off); divides world_size
  SplitRule rule = SplitRule::kEven;   // the trainer's split (libshard/sequence_parallel.h)
  uint32_t ttt_length = 0;             // the USP rules' overlap (SplitRequest::ttt_length)
  uint32_t ulysses_size = 0;           // torchspec-usp: Ulysses degree within N (0: N)
  bool enabled() const { return degree >= 1; }
  bool operator==(const SequenceParallel&) const = default;
};
inline constexpr uint32_t kMaxSequenceParallel = 1u << 16;

struct LoaderOptions {
  // Order: which kind of order, with its settings (libshard/order.h; docs/ORDER.md). Shuffled by
  // seed 0 in order version 2 unless set.
  Order order;
  uint64_t epoch = 0;                  // the first epoch
  // The ranks the order is striped over (every kind but CallerOrder, whose steps are the rank's).
  uint32_t rank = 0;
  uint32_t world_size = 1;
  bool drop_last = false;              // false: wrap around so every rank gets the same count
  // Ranks of the world that share each sample, each reading its own slice (SequenceParallel
  // above). world_size must be a multiple of its degree.
  SequenceParallel sequence_parallel;
  // Continues the saved stream (libshard/loader_state.h): its epoch, position and cursor win
  // over `epoch` and the order's seed and version, in this and in every later epoch. What the
  // state records of its origin (StateOrigin: the dataset's identity, its sample count inside an
  // epoch, the shuffle) must match this loader's dataset and order: Create is InvalidArgument
  // naming what differs otherwise. (LoaderOptionsFrom also refuses a seed, order version or
  // shuffle window given together with a state saved with another.)
  std::optional<LoaderState> resume;

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
  // Batch recipes (Collate::kSpecForgeEagle3 ...): the trainer's length setting the recipe
  // truncates, pads or packs to (> 0; 0, the default, with a recipe is InvalidArgument).
  uint64_t recipe_len = 0;
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
// what is read whole; True: also read partial reads whole to check them; False: nothing);
// "resume" takes a state's encoding (EncodeLoaderState); and the group "order" (group "order",
// kGroup): the order as one group {"kind": "shuffled" | "unshuffled" | "node_local" | "caller" |
// "follow", and the kind's settings: "seed", "version", "shuffle", "nodes", "node_rank",
// "shuffle_window"}, or as an integer the order version, and the order's flat spellings of
// earlier releases (group "order" too): "shuffle", "seed", "order" (1 or 2), "locality" ("global"
// or "node"), "nodes", "node_rank", "caller_order", "follow", "shuffle_window". Set one at a time,
// a flat spelling changes the current order (a setting the current kind has not, e.g. nodes of a
// global order, is ignored, as it always was); LoaderOptionsFrom takes them all at once.
const OptionTable<LoaderOptions>& LoaderOptionTable();

// The settings of the option group "order" as given, each unset when not given.
struct OrderSpelling {
  std::optional<std::string> kind;
  std::optional<bool> shuffle;
  std::optional<uint64_t> seed;
  std::optional<uint32_t> version;
  std::optional<uint32_t> nodes;
  std::optional<uint32_t> node_rank;
  std::optional<uint64_t> shuffle_window;
};
// The group's settings (kind, shuffle, seed, version, nodes, node_rank, shuffle_window) with
// their types, bounds, defaults and docs: what `order={...}` takes (Python: the keywords of
// libshard.Order's factories).
const OptionTable<OrderSpelling>& OrderOptionTable();

// Options from every named value a front end was given (Python's keywords, in any order): each
// set through LoaderOptionTable, except the group "order" and its flat spellings, which are made
// into one Order together, so that their sequence does not matter. InvalidArgument naming the
// option for an unknown name or a bad value, a setting given twice (in the group and flat), and
// spellings that ask for two kinds of order (locality="node" with follow=True, a sampler with
// order=Order.node_local(...), ...) or a setting the kind contradicts (order=1 with
// locality="node"); and, with "resume", a seed, order version (a global or follow state in a
// global or follow loader) or shuffle_window (a follow state) given that is not the state's,
// which the state would override (docs/ORDER.md §8).
Result<LoaderOptions> LoaderOptionsFrom(const std::vector<OptionEntry>& given);

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

// Plans epoch options.epoch (the order's seed, shuffle and version, world_size, batching,
// bucketing, max_len of `options`) and sums it up. InvalidArgument as Loader::Create for
// inconsistent options.
// O(N) time (O(N log M) with bucket_window M); memory: the lengths and 8 bytes per batch.
Result<BatchingSummary> SummarizeBatching(const Dataset& dataset, const LoaderOptions& options);

// What each node reads under the node-local order (NodeLocalOrder, docs/ORDER.md §5), every
// epoch: for sizing each node's cache of an s3:// dataset (`libshard info --nodes`).
struct NodeShare {
  uint64_t samples = 0;
  uint64_t stored_bytes = 0;  // the stored bytes of its samples
  uint64_t cached_bytes = 0;  // the cache blocks of `block_bytes` its samples touch
};
// The share of each of `nodes` nodes (the seed and shuffle of options.order, as the loader deals
// them; with options.resume, its seed). `block_bytes`: the cache's block size (4 MiB by default,
// docs/CACHE.md). O(N log N); reads no sample.
Result<std::vector<NodeShare>> SummarizeNodeShares(const Dataset& dataset,
                                                   const LoaderOptions& options, uint32_t nodes,
                                                   uint64_t block_bytes);

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
  // Follow mode (FollowOrder, docs/ORDER.md §7): a loader of the dataset at `path` while it is
  // being written, or before its writer starts (docs/FORMAT.md §6.1); also of a complete one,
  // whose first epoch is then the follow order all the same (every rank agrees whenever it
  // started). options.order is a FollowOrder, or a GlobalOrder that becomes one (its shuffle,
  // seed and version, the default shuffle window); another kind is InvalidArgument.
  // `dataset_options` apply to what it reads. (Create refuses a FollowOrder.)
  static Result<std::unique_ptr<Loader>> Follow(const std::string& path,
                                                const LoaderOptions& options = {},
                                                const DatasetOptions& dataset_options = {});
  virtual ~Loader() = default;  // stops and waits for reads in flight

  // Blocks until the next batch of this rank is ready; nullopt at the end of the epoch (call
  // SetEpoch to go on). Errors name the sample, the shard file and the offset. A batch whose read
  // failed counts as consumed: state() moves past it, so a Next() after the error continues
  // with the following batch, and a state saved then resumes after the failed one.
  virtual Result<std::optional<Batch>> Next() = 0;
  // Starts epoch `epoch` from its beginning (drops what was prefetched). With a CallerOrder:
  // InvalidArgument (SetEpochSteps starts an epoch).
  virtual Status SetEpoch(uint64_t epoch) = 0;
  // CallerOrder only (InvalidArgument otherwise): starts epoch `epoch` in the order of
  // `steps`, this rank's, dropping what was prefetched; Next() returns those steps, then
  // nullopt. Checked first (ValidateEpochSteps): a bad index, an empty step or bad bounds are
  // InvalidArgument and change nothing. When the loader was created with `resume` and this is
  // the first epoch given since, and it is the state's epoch, the epoch continues after the
  // state's position: the steps' digest must equal the state's (InvalidArgument otherwise: the
  // sampler gave another order for that epoch, so the steps left are unknown), and the
  // position must not exceed the steps. Before the first SetEpochSteps, Next() is
  // InvalidArgument and batches_per_epoch() 0.
  virtual Status SetEpochSteps(uint64_t epoch, EpochSteps steps);
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
