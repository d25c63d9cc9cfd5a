// ReadAhead: a Dataset's samples by index (random access), read ahead in an order the caller
// announces, so that asking for them in that order is served from memory already read.
//
// The reads go through the Loader's engine: io_uring (or a pread pool) and O_DIRECT into one
// arena of memory_budget bytes, every byte checked on worker threads before it is served
// (verify_checksums), samples returned as zero-copy views of the arena that stay valid for as
// long as any copy of them lives (their memory is reused only after that, also after the
// ReadAhead is destroyed). One per process: a DataLoader worker makes its own (Python:
// libshard.Dataset.prefetch, libshard.ReadAheadSampler; docs/guide/loading.md).
//
// The rule (docs/guide/loading.md, "Reading ahead for a map-style dataset"):
//   - Announce(indices) appends to the announced order (repeats allowed). The engine reads the
//     announced entries in that order, as far ahead as memory_budget allows.
//   - Get(i) takes the earliest announced entry of sample i that is still held (an entry is
//     held from its announcement until it is taken or dropped) and returns its sample: at once
//     when its read is complete (a hit), else when it completes (a wait). Taking an entry
//     passes over the held entries announced before it that were not taken: those not yet read
//     are dropped unread (skipped); those read, or being read, stay available to a late Get
//     (requests from several threads arrive a little out of order) until the caller has taken
//     an entry kReadAheadReorderWindow positions after them, or until the engine needs their
//     memory for an entry still wanted (then they are dropped: evicted).
//   - Get(i) of a sample with no held entry (never announced, dropped, or taken already) reads
//     it synchronously with Dataset::Read (a miss), as does a Get whose entry cannot be read
//     ahead (its memory is held by samples the caller keeps, or it is larger than the arena).
//     So an announced entry never asked for never blocks anything: it is passed over by the
//     next entry taken, and nothing ever waits on memory it holds.
//   - A read that fails (a checksum mismatch, an I/O error) is the error of the Get that takes
//     its entry, naming the sample, the shard file and the offset.
// Thread-safety: every method may be called from any thread, concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/option_table.h"
#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard {

// Entries passed over that stay available to a late Get: until an entry this many positions
// after them is taken.
inline constexpr uint64_t kReadAheadReorderWindow = 64;
// ReadAhead's default memory_budget, per process (a DataLoader worker has one each).
inline constexpr uint64_t kReadAheadDefaultBudget = uint64_t{512} << 20;

struct ReadAheadStats {
  uint64_t announced = 0;  // entries announced
  uint64_t hits = 0;       // Gets served from an entry whose read was complete
  uint64_t waits = 0;      // Gets served from an entry whose read was still running
  uint64_t misses = 0;     // Gets read synchronously (no held entry, or none could be read)
  uint64_t skipped = 0;    // entries passed over before their read started: never read
  uint64_t evicted = 0;    // entries read but dropped before any Get took them
  uint64_t held = 0;       // entries announced and not yet taken or dropped
  uint64_t ready = 0;      // held entries whose read is complete and checked
  uint64_t bytes_read = 0;        // by the engine (misses not included)
  uint64_t bytes_served = 0;      // tensor bytes of the samples served from entries
  uint64_t checksum_failures = 0;
  double wait_seconds = 0;        // time Gets spent waiting for reads
  std::string engine;             // "io_uring" or "pread"
  bool direct_io = false;
  std::string io_status;          // why some shards are read buffered; "" when all direct
  bool pinned = false;
  uint64_t arena_budget = 0;
  uint64_t arena_in_use = 0;
  uint64_t arena_peak = 0;
};

// The read-ahead's settings are the Loader's I/O, memory and checking ones: memory_budget
// (default kReadAheadDefaultBudget), queue_depth, read_size, engine, io_mode, pin_memory
// (default kOff: samples served to Python are copied by a collate or sent to another process),
// worker_threads, verify_checksums, slow_wait_warning_seconds. It reads whole samples and has
// no order, batching or collation of its own: Create refuses fields, max_len, batch_size,
// max_tokens, bucket_window > 0, collate, an order other than GlobalOrder, resume and on_error
// kSkip (InvalidArgument naming them).
LoaderOptions DefaultReadAheadOptions();
// The rows of LoaderOptionTable() that apply (their names and checks; the defaults above), for
// the Python bindings: an unknown name, or one of the Loader's other options, is
// InvalidArgument naming it.
const OptionTable<LoaderOptions>& ReadAheadOptionTable();
// ValidateLoaderOptions, and InvalidArgument naming any setting that does not apply (above).
[[nodiscard]] Status ValidateReadAheadOptions(const LoaderOptions& options);

class ReadAhead {
 public:
  static Result<std::unique_ptr<ReadAhead>> Create(
      std::shared_ptr<const Dataset> dataset,
      const LoaderOptions& options = DefaultReadAheadOptions());
  virtual ~ReadAhead() = default;  // stops and waits for reads in flight

  // Appends `indices` to the announced order. InvalidArgument naming the first index not below
  // the dataset's size (nothing is appended then); Aborted after Stop().
  virtual Status Announce(std::span<const uint64_t> indices) = 0;
  // Sample `index` (< the dataset's size, else InvalidArgument), by the rule above.
  virtual Result<Sample> Get(uint64_t index) = 0;
  virtual ReadAheadStats stats() const = 0;
  // Cancels reads in flight; Get then reads synchronously and Announce returns Aborted.
  // Idempotent; returns promptly.
  virtual void Stop() = 0;
};

}  // namespace libshard
