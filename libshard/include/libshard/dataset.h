// Dataset: a packed dataset opened for random access (docs/FORMAT.md).
//
// Open() validates the manifest, the index and the shard sizes. An index of version 1 is checked
// whole at Open; one of version 2 (docs/FORMAT.md §3.8) has its head and lengths checked at Open
// and each block of sample entries when first used, so a rank opens a dataset of millions of
// samples by reading what it needs (see Locate). Thread-safe: all const methods may be called
// concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/caller.h"
#include "libshard/identity.h"
#include "libshard/sample.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard {

struct DatasetOptions {
  bool verify_checksums = true;  // Read() checks each sample's xxh3 before returning it
  // s3:// datasets only (docs/guide/object-storage.md; the cache's format: docs/CACHE.md).
  // The node-local cache directory: "" is $LIBSHARD_CACHE_DIR, else $XDG_CACHE_HOME/libshard,
  // else ~/.cache/libshard. Shared by every process of the node that reads the dataset.
  std::string cache_dir;
  uint64_t cache_size = 0;         // bytes the whole cache directory may hold (every dataset under
                                   // it; docs/CACHE.md §4); 0 (Python None or 0): no bound but
                                   // the free-space floor
  uint32_t fetch_connections = 0;  // parallel range GETs; 0: $LIBSHARD_S3_CONNECTIONS, else 8
  // The front end opening the dataset: errors give its spelling of what to do (caller.h).
  Caller caller = Caller::kCpp;
};

template <typename Options>
class OptionTable;  // libshard/option_table.h
// The DatasetOptions a front end sets by name, decided here once: Python's `cache=` /
// `cache_size=` (libshard.open, Dataset, Loader) and the CLI's `--cache` / `--cache-size`
// (info, verify, bench) read them through this table (cache_size None or 0: no bound).
const OptionTable<DatasetOptions>& DatasetOptionTable();

// Fills the shard files of a dataset whose bytes live in object storage (remote/shard_filler.h).
class ShardFiller;
namespace internal {
class DatasetAccess;  // the loader's access to a Dataset (libshard/src/dataset/dataset_access.h)
struct SlicePlan;     // a row-range read's plan (libshard/src/dataset/slice_plan.h)
}  // namespace internal
namespace remote {
class RemoteDataset;  // an s3:// dataset, over the cached copy of one (libshard/src/remote/)
}  // namespace remote

// How the dataset was made, as its manifest records it (FORMAT.md §2.2 `provenance`; read and
// checked by Open): Dataset::provenance(), Python's Dataset.provenance(). Informational only. A
// sample's own origin is its SourceFileInfo (Dataset::source_file(i)).
struct DatasetProvenance {
  std::string source_root;  // the directory the sources were relative to, as given to the writer
  uint64_t sources = 0;     // samples with a non-empty source path
  std::string created_by;   // free text ("libshard pack <version>")
  std::string created_at;   // UTC, ISO 8601
  Attributes attributes;    // what produced the data (attributes.h); empty when not recorded
  bool identity_recorded = false;  // the manifest records provenance.identity (identity.h)
};

struct ShardInfo {
  std::string path;       // absolute path of the shard file
  uint64_t size = 0;      // bytes, checked at Open
  uint64_t samples = 0;
  // The shard's uid (FORMAT.md §4.1), checked at Open against the index when it records uids; 0
  // for a shard written before uids existed.
  uint64_t uid = 0;
};

// Where sample i lives and how it is stored (FORMAT.md §3.3).
struct SampleLocation {
  uint32_t shard = 0;
  uint32_t flags = 0;        // kSampleFlag*
  uint64_t offset = 0;       // multiple of kSampleAlignment
  uint64_t stored_size = 0;  // bytes to read (padding excluded)
  uint64_t raw_size = 0;     // bytes of the decoded payload
  uint64_t checksum = 0;     // xxh3-64 of the stored bytes
  uint64_t length = 0;       // token length, 0 if the schema has no length field
};

inline constexpr uint32_t kSampleFlagZstd = 1u << 0;
inline constexpr uint32_t kSampleFlagByteShuffle = 1u << 1;
// Set by the reader (never stored) when the sample's fields are stored under field codecs
// (FORMAT.md §4.3): the stored bytes must go through Dataset::Decode, like kSampleFlagZstd.
inline constexpr uint32_t kSampleFlagFieldCodecs = 1u << 16;
// "raw", "zstd", "planes", "fp8", "fp8-entropy", "planes2", "fp8-planes" (FORMAT.md §4.3.1); ""
// for an unknown id.
std::string_view FieldCodecName(uint8_t codec);
// Whether a sample with these flags must be decoded (Dataset::Decode) before use.
inline constexpr bool SampleNeedsDecode(uint32_t flags) {
  return (flags & (kSampleFlagZstd | kSampleFlagFieldCodecs)) != 0;
}

// What Dataset::Read(i, request) reads of a sample.
struct ReadRequest {
  // Rows [start, stop) along seq_dim of every field that has one (sample.h; clipped to each
  // field's length; start > stop is an error); fields without a sequence dimension are read
  // whole. nullopt: every row.
  std::optional<RowRange> rows;
  // The fields to read, by name, in the order given (a name not in the schema is an error);
  // empty: every field, in schema order.
  std::vector<std::string> fields;
};

// Where field f of sample i lies inside the decoded payload.
struct TensorLocation {
  uint64_t offset = 0;  // multiple of kTensorAlignment
  uint64_t nbytes = 0;
  Shape shape;
};

class Dataset {
 public:
  // `dir`: a dataset directory, or an s3://BUCKET/PREFIX URL (read through the node-local cache
  // of DatasetOptions::cache_dir).
  static Result<std::shared_ptr<Dataset>> Open(const std::string& dir,
                                               const DatasetOptions& options = {});
  virtual ~Dataset() = default;

  virtual const std::string& path() const = 0;
  virtual uint64_t size() const = 0;
  virtual const Schema& schema() const = 0;
  virtual const std::vector<ShardInfo>& shards() const = 0;
  virtual uint64_t total_stored_bytes() const = 0;
  virtual uint64_t total_raw_bytes() const = 0;
  virtual const DatasetProvenance& provenance() const = 0;
  // What made the dataset (identity.h): its attributes and schema, and their digest.
  DatasetIdentity identity() const;
  // Per field, its codec id (FORMAT.md §4.3.1; 0 raw); empty when every field is raw.
  virtual std::vector<uint8_t> field_codecs() const { return {}; }
  // The version of the dataset's index (FORMAT.md §3): 3 as written today, 2 (blocks loaded
  // lazily, no field checksums) or 1 (read only); `libshard upgrade` / UpgradeIndex rewrites 1
  // and 2 as 3.
  virtual uint32_t index_version() const { return 1; }
  // Per field, the size of sample i's stored region (FORMAT.md §3.8.4): the tensor's size for a
  // raw field. For a whole-sample zstd sample, the raw tensor sizes.
  virtual Result<std::vector<uint64_t>> field_stored_sizes(uint64_t i) const;

  // Preconditions for the accessors below: i < size(), f < schema().fields.size().
  virtual SampleLocation location(uint64_t i) const = 0;
  // location(i), or the error that keeps it unknown: an index of version 2 reads a sample's
  // block of entries on first use (docs/FORMAT.md §3.8.7), and a block found damaged then (or
  // changed since Open) fails its samples with a Corruption. location() and tensor() return
  // empty values for such a sample; Locate, Read, Verify, Decode, MakeSample, source and metadata
  // return the error. Loaders use Locate.
  virtual Result<SampleLocation> Locate(uint64_t i) const { return location(i); }
  virtual TensorLocation tensor(uint64_t i, size_t f) const = 0;
  virtual uint64_t length(uint64_t i) const = 0;
  // Token lengths of every sample (copied; O(size())).
  virtual std::vector<uint64_t> lengths() const = 0;
  // The file sample i came from (path, size, mtime, content hash); Python's
  // Dataset.source_file(i). provenance() is the dataset's, not a sample's.
  Result<SourceFileInfo> source_file(uint64_t i) const { return source(i); }
  // The former name of source_file(i), and what a Dataset implements.
  virtual Result<SourceFileInfo> source(uint64_t i) const = 0;
  // Sample i's key, source_file(i).path: the Writer's key, or for pack the source file's path
  // relative to the source root; Python's Dataset.key(i), and what MergeOptions::by_key orders
  // by.
  Result<std::string> key(uint64_t i) const;
  virtual Result<Metadata> metadata(uint64_t i) const = 0;

  // Reads sample i with pread into an owned 4 KiB-aligned buffer and returns views over it.
  virtual Result<Sample> Read(uint64_t i) const = 0;
  // Reads what `request` asks of sample i: some fields, and of the fields with a sequence
  // dimension only rows [start, stop) (a sequence-parallel rank's token slice). The tensors are
  // bit for bit those of Read(i) sliced along seq_dim; Sample::rows() and Sample::length() say
  // which rows they are of how many. With row blocks (FORMAT.md §3.10: index version 4) it reads
  // the rows plus less than one block (~1 MiB) at each end of each field, checking every block
  // read, stored raw or under a field codec. A sample stored with whole-sample zstd, and every
  // sample of an index of version 1 to 3, is read field by field (version 3) or whole, and checked
  // so; the dataset says so once on stderr (`libshard upgrade` adds row blocks).
  Result<Sample> Read(uint64_t i, const ReadRequest& request) const;
  // Whether the index records row blocks (FORMAT.md §3.10, index version 4), so that a row-range
  // read costs the rows plus at most a block at each end of each field, checked.
  virtual bool has_row_blocks() const { return false; }
  // Reads only sample i's stored bytes and checks them against the index: the sample checksum,
  // then (has_field_checksums()) every field checksum (FORMAT.md §3.9).
  virtual Status Verify(uint64_t i) const = 0;
  // Whether the index holds a checksum per field of every sample (FORMAT.md §3.9: index version
  // 3, written since field checksums exist, or upgraded with `libshard upgrade`). Readers of some
  // fields, or of a prefix of rows, then check only the fields they serve (VerifyFields);
  // otherwise only the whole sample can be checked.
  virtual bool has_field_checksums() const { return false; }
  // Per field, sample i's field checksum (FORMAT.md §3.9); Unsupported without them.
  virtual Result<std::vector<uint64_t>> field_checksums(uint64_t i) const;
  // Per field, the field checksum of sample i computed from its bytes (FORMAT.md §3.9), after
  // reading the sample whole and checking its sample checksum (Corruption when that fails): what
  // `libshard upgrade` records for a dataset written before field checksums.
  virtual Result<std::vector<uint64_t>> ComputeFieldChecksums(uint64_t i) const = 0;

 private:
  // The loader's plumbing, not part of the API: reached through internal::DatasetAccess (the
  // streaming loader, the tests) and implemented by the library's own datasets; an s3:// dataset
  // forwards it to its cached copy.
  friend class internal::DatasetAccess;
  friend class remote::RemoteDataset;

  // Non-null for an s3:// dataset: the files of shards() are a node-local cache, filled on
  // demand; whoever reads them directly (the loader) calls its Ensure before each read.
  virtual ShardFiller* shard_filler() const { return nullptr; }
  // For loaders: checks the field checksum of every field in `fields` (all when empty) of sample
  // i, a sample without whole-sample zstd (flag kSampleFlagZstd), against stored bytes read:
  // `base` holds the stored bytes [base_offset, base_offset + base_size), which must include each
  // of those fields' stored regions whole. Corruption naming the shard, the sample, the field and
  // its offset on a mismatch; Unsupported without field checksums; InvalidArgument when a
  // region lies outside the buffer or the sample is zstd-compressed.
  virtual Status VerifyFields(uint64_t i, const std::byte* base, uint64_t base_offset,
                              uint64_t base_size, std::span<const size_t> fields) const;
  // Per field, where sample i's stored region lies within its stored bytes (FORMAT.md §3.8.4:
  // the tensor's offset and size for a raw field). For a whole-sample zstd sample, the tensors'
  // places in the decoded payload.
  virtual Status FieldRegions(uint64_t i, std::vector<uint64_t>* offsets,
                              std::vector<uint64_t>* sizes) const = 0;

  // Row-range reads (FORMAT.md §3.10; dataset/slice_plan.h). PlanSlice: which bytes of sample i's
  // stored extent a read of `fields` (all when empty) cut to `rows` reads, and how they are
  // checked (`verify`) and served. FinishSlice: checks the bytes read (extents[k] holds the
  // plan's k-th extent, at an address congruent to its stored offset modulo 64), decodes into
  // `decoded` (plan.decoded_bytes, 64-byte aligned) and returns the Sample, its views over those
  // buffers, kept alive by `memory`. Unsupported by default (a dataset that cannot slice).
  virtual Result<std::shared_ptr<const internal::SlicePlan>> PlanSlice(
      uint64_t i, std::span<const size_t> fields, RowRange rows, bool verify) const;
  virtual Result<Sample> FinishSlice(const internal::SlicePlan& plan,
                                     std::span<std::byte* const> extents, std::byte* decoded,
                                     std::shared_ptr<const void> memory) const;
  // Sample i's block table as the index stores it (FORMAT.md §3.10.2; "" for none), nullopt
  // when the index records none (version 1 to 3): what merge and append copy.
  virtual Result<std::optional<std::string>> BlockTableBytes(uint64_t i) const {
    return std::optional<std::string>();
  }
  // Sample i read whole and its sample checksum checked, then its field checksums and block
  // table computed from its bytes (FORMAT.md §3.9, §3.10.6): what `libshard upgrade` records.
  virtual Status ComputeChecks(uint64_t i, std::vector<uint64_t>* field_checksums,
                               std::string* block_table) const;
  // Whether Read checks what it reads (DatasetOptions::verify_checksums).
  virtual bool checks_reads() const { return true; }
  // Reads `size` bytes at `offset` of sample i's stored extent into `dst` (pread; Read(i,
  // request) reads a plan's extents so). Unsupported by default.
  virtual Status ReadStoredRange(uint64_t i, uint64_t offset, uint64_t size,
                                 std::byte* dst) const;

  // For loaders: decodes `stored` (exactly location(i).stored_size bytes) into `raw` (at least
  // raw_size bytes, 64-byte aligned). A no-op check when the sample is stored uncompressed and
  // `stored.data() == raw.data()`.
  virtual Status Decode(uint64_t i, std::span<const std::byte> stored,
                        std::span<std::byte> raw) const = 0;
  // For loaders: Decode of what a reader of `fields` (all when empty) cut to `max_len` rows of
  // seq_dim (0: all) uses. With field codecs (FORMAT.md §4.3) the other fields are not decoded,
  // and a field whose first max_len tokens are its first max_len rows (dims before seq_dim all 1)
  // decodes only the chunks covering them; the other bytes of `raw` are then unspecified.
  // Otherwise (raw fields, whole-sample zstd) exactly Decode.
  virtual Status DecodeSelected(uint64_t i, std::span<const std::byte> stored,
                                std::span<std::byte> raw, std::span<const size_t> fields,
                                uint64_t max_len) const {
    (void)fields;
    (void)max_len;
    return Decode(i, stored, raw);
  }
  // For loaders: a Sample of views over decoded payload bytes kept alive by `memory`. `base`
  // points at payload byte `base_offset` (0 when the whole payload was read); only the bytes of
  // the fields in `fields` (all fields when empty) need to lie in the buffer. Checks that every
  // selected tensor lies in [base_offset, base_offset + base_size).
  virtual Result<Sample> MakeSample(uint64_t i, const std::byte* base, uint64_t base_offset,
                                    uint64_t base_size, std::shared_ptr<const void> memory,
                                    std::span<const size_t> fields = {}) const = 0;
};

}  // namespace libshard
