// Writer: builds a dataset directory (docs/FORMAT.md §2) from samples.
//
// Crash safety: shards are written under temporary names (`*.tmp`) and fsynced; the index and
// then the manifest are written last and renamed into place by Finish(). Until the manifest
// exists the directory never opens as a dataset. A journal (`_journal.lsj`, §6) records every
// sample whose bytes are durable, so Resume() continues an interrupted job without redoing it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/caller.h"
#include "libshard/dataset_lock.h"
#include "libshard/sample.h"
#include "libshard/schema.h"
#include "libshard/status.h"
#include "libshard/writer_config.h"

namespace libshard {

// The codec id (FORMAT.md §4.3.1) of each field of `schema` under `policy`; with `store_fp8`,
// bfloat16/float16 fields with a sequence dimension and rank >= 2 (hidden states) get fp8
// (codec 3, lossy) or, with a policy other than kNone, fp8-planes (codec 6: codec 3's codes, the
// exponent bits entropy-coded; codec 4, fp8-entropy, is no longer chosen). All zeros: raw.
std::vector<uint8_t> ChooseFieldCodecs(const Schema& schema, FieldCodecPolicy policy,
                                       bool store_fp8);

// What a Writer takes: the parts of the writer configuration it uses (writer_config.h: how
// samples are stored, the layout, what made the dataset; the parallelism is ParallelWriter's),
// and what only C++ callers give.
struct WriterOptions : EncodingOptions, LayoutOptions, ProvenanceOptions {
  // The dataset's lock (dataset_lock.h), for a caller that must hold `dir` across more than the
  // Writer's lifetime (`libshard pack` inspects OUT before it knows the schema). When null, the
  // Writer takes the lock itself. Either way the Writer holds it until Finish() returns or the
  // Writer is destroyed; a lock for another directory is InvalidArgument.
  std::shared_ptr<const DatasetLock> lock;
  // The front end writing: errors give its spelling of what to do (caller.h).
  Caller caller = Caller::kCpp;
  // Shard uids (FORMAT.md §4.1): 0 draws each new shard's uid at random (getrandom), which is
  // what makes a shard of another write detectable at open. Non-zero derives them from this
  // seed and the shard number instead: reproducible bytes (tests, golden files), but two writes
  // with one seed can no longer be told apart.
  uint64_t shard_uid_seed = 0;
  // Called on the appending thread once a shard is sealed: its samples are final and journaled
  // and its file closed (still named NAME.tmp at `path` until Finish renames it to NAME); Resume
  // calls it for each shard it finds sealed. An s3:// Writer's storage driver uploads the shard
  // from here while the next one is written, before this hook is called. An error fails the
  // Writer like a failed write.
  std::function<Status(const std::string& name, const std::string& path)> on_shard_sealed;

  // The Writer's parts of `config` (its encoding, layout and provenance), the rest default.
  static WriterOptions From(const WriterConfig& config);
};

// A sample encoded for storage (laid out, compressed, checksummed) but not yet placed.
// Produced by Writer::Encode on any thread; consumed in order by Writer::AppendEncoded.
struct EncodedSample {
  std::vector<uint64_t> dims;          // Schema::DimsPerSample() values, fields in schema order
  std::vector<uint64_t> tensor_offsets;  // per field, within the raw payload
  std::vector<uint64_t> tensor_sizes;    // per field
  uint64_t raw_size = 0;               // bytes of the raw payload
  uint32_t flags = 0;                  // FORMAT.md §3.3 sample flags
  uint64_t length = 0;                 // token length (Schema::length_field), 0 if none
  uint64_t checksum = 0;               // xxh3-64 of `stored`
  std::shared_ptr<std::byte[]> stored_buffer;  // 4 KiB aligned, padded to 4 KiB
  uint64_t stored_size = 0;            // meaningful bytes in stored_buffer
  // Per field, the stored region's size of a field with a non-raw codec (0 for raw fields);
  // empty when every field is raw (FORMAT.md §3.8.4).
  std::vector<uint64_t> field_stored_sizes;
  // Per field, the field checksum (FORMAT.md §3.9).
  std::vector<uint64_t> field_checksums;
  // The sample's block table (FORMAT.md §3.10.2: row-block checksums; "" when no field has
  // several blocks).
  std::string block_table;
  Metadata metadata;
  SourceFileInfo source;
};

struct WriteSummary {
  uint64_t samples = 0;
  uint64_t shards = 0;
  uint64_t raw_bytes = 0;     // sum of raw payload sizes
  uint64_t stored_bytes = 0;  // bytes in shard files, padding included
};

class Writer {
 public:
  // One writer at a time per directory: Create, Resume and OpenForAppend take the dataset lock
  // (dataset_lock.h) before they look at `dir`, and fail at once with AlreadyExists naming the
  // holder while another writer (of any process, this one included) holds it.
  //
  // Starts a new dataset in `dir` (created if missing). Fails with AlreadyExists if `dir` holds a
  // dataset or a journal (use Resume or OpenForAppend).
  static Result<std::unique_ptr<Writer>> Create(const std::string& dir, const Schema& schema,
                                                const WriterOptions& options = {});
  // Continues an interrupted Create() from its journal (FORMAT.md §6): samples already journaled
  // are kept and `existing_sources()` lists them, so the caller skips those sources. When the
  // interrupted job had already committed (a manifest exists), this is OpenForAppend. Both check
  // the identity first (CheckWriteIdentity): with allow_identity_change, what `dir` held of
  // another identity is set aside (set_aside()) and a new write of its schema starts.
  static Result<std::unique_ptr<Writer>> Resume(const std::string& dir,
                                                const WriterOptions& options = {});
  // Opens a complete dataset to add samples in new shards; existing shards are never modified.
  // Finish() commits a new index and manifest (FORMAT.md §7); until then the old dataset opens.
  static Result<std::unique_ptr<Writer>> OpenForAppend(const std::string& dir,
                                                       const WriterOptions& options = {});

  virtual ~Writer() = default;  // without Finish(): temporaries stay for Resume, nothing opens

  // Thread-safety: every member may be called from any thread, also at once. Encode runs
  // concurrently; AppendEncoded, Append's append, Finish, Checkpoint, CheckpointIfDue and
  // samples_written are serialised (one at a time, each whole), so samples from several threads
  // are appended in the order their appends take turns, each exactly once; after Finish every
  // append is refused (InvalidArgument) and nothing more reaches the dataset. schema() and
  // existing_sources() do not change after the Writer is made.
  //
  // Validates `sample` against the schema, lays out the payload (FORMAT.md §4.1), compresses per
  // options and checksums. Errors name the source path and the field.
  virtual Result<EncodedSample> Encode(const SampleInput& sample) const = 0;
  // Appends in call order; the sample's index is samples_written() before it (when one thread
  // appends).
  virtual Status AppendEncoded(EncodedSample sample) = 0;
  // Encode + AppendEncoded (the encoding runs outside the append's turn).
  virtual Status Append(const SampleInput& sample) = 0;
  // Writes index then manifest, fsyncs, renames shards into place, removes the journal.
  virtual Result<WriteSummary> Finish() = 0;
  // Makes every sample appended so far durable and journals it (FORMAT.md §6): a crash keeps it
  // and followers of the write see it (§6.1). AppendEncoded does this on its own (see
  // journal_every_bytes, commit_interval_seconds). A no-op when nothing waits, and in append mode
  // (no journal: appended samples become visible at Finish).
  virtual Status Checkpoint() = 0;
  // Checkpoint() when an appended sample has waited commit_interval_seconds; returns the seconds
  // until one will be due (infinity when no sample waits or the interval is 0).
  virtual Result<double> CheckpointIfDue() = 0;

  virtual const Schema& schema() const = 0;
  virtual uint64_t samples_written() const = 0;
  // The source file of every sample already in the dataset (Resume / OpenForAppend), in order.
  virtual const std::vector<SourceFileInfo>& existing_sources() const = 0;
  // Where Resume / OpenForAppend set aside what the directory held of another identity
  // (WriterOptions::allow_identity_change; CheckWriteIdentity); empty when nothing was.
  virtual std::vector<std::string> set_aside() const { return {}; }
};

// The identity check of a write that continues what `dir` holds (docs/guide/writing.md,
// "Identity"; FORMAT.md §2.2, §6), which Resume and OpenForAppend make themselves and front ends
// that choose between them and Create make first (`libshard pack`, libshard.Writer): nothing to
// check when `dir` holds neither a journal nor a manifest; otherwise the attributes recorded there
// (the journal's `_identity.json`, the manifest's provenance.attributes) must agree with
// `options.attributes` (AttributeDifferences, identity.h: each given key recorded with the same
// value; an unfinished write of a libshard before identities records none and agrees with any).
// A difference is InvalidArgument naming each key with both values and what to do; with
// options.allow_identity_change what `dir` holds is set aside instead: every entry but the lock
// file is moved, names kept, into the new directory `DIR.stale-YYYYMMDDThhmmssZ` beside it
// (never reused, never deleted), whose path is returned; `dir` then holds nothing to continue.
// Takes `dir`'s lock for its duration (or uses options.lock). `dir` is local (an object store's
// write passes its staging directory, StorageInfo::work_dir).
Result<std::vector<std::string>> CheckWriteIdentity(const std::string& dir,
                                                    const WriterOptions& options);

}  // namespace libshard
