// The binary index `index.lsi` (FORMAT.md §3): encoding for writers, validated zero-copy view for
// readers. Bytes only; no system calls.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::format {

inline constexpr uint32_t kIndexVersion = 1;
inline constexpr uint64_t kIndexHeaderSize = 128;
inline constexpr uint64_t kFieldRecordSize = 32;
inline constexpr uint64_t kShardRecordSize = 32;
inline constexpr uint64_t kSampleRecordSize = 128;
inline constexpr uint64_t kTensorEntrySize = 16;
inline constexpr uint64_t kIndexChecksumOffset = 120;
inline constexpr uint64_t kMaxShardNameBytes = 255;
inline constexpr uint64_t kDimSize = 8;  // one u64 dim (§3.3)

// Header field offsets (§3.1); the magic is at 0, the checksum at kIndexChecksumOffset.
inline constexpr uint64_t kHeaderVersion = 8;
inline constexpr uint64_t kHeaderFlags = 12;
inline constexpr uint64_t kHeaderSampleCount = 16;
inline constexpr uint64_t kHeaderFieldCount = 24;
inline constexpr uint64_t kHeaderShardCount = 28;
inline constexpr uint64_t kHeaderFieldsOffset = 32;
inline constexpr uint64_t kHeaderShardsOffset = 40;
inline constexpr uint64_t kHeaderSamplesOffset = 48;
inline constexpr uint64_t kHeaderTensorsOffset = 56;
inline constexpr uint64_t kHeaderDimsOffset = 64;
inline constexpr uint64_t kHeaderBlobOffset = 72;
inline constexpr uint64_t kHeaderBlobSize = 80;
inline constexpr uint64_t kHeaderFileSize = 88;
inline constexpr uint64_t kHeaderLengthField = 96;
inline constexpr uint64_t kHeaderShardUids = 100;
inline constexpr uint64_t kHeaderReserved = 108;  // ..119

// Field record offsets (§3.2).
inline constexpr uint64_t kFieldDType = 0;
inline constexpr uint64_t kFieldRank = 4;
inline constexpr uint64_t kFieldSeqDim = 8;
inline constexpr uint64_t kFieldReserved = 12;
inline constexpr uint64_t kFieldNameOffset = 16;
inline constexpr uint64_t kFieldNameSize = 24;

// Shard record offsets (§3.5).
inline constexpr uint64_t kShardNameOffset = 0;
inline constexpr uint64_t kShardNameSize = 8;
inline constexpr uint64_t kShardFileSize = 16;
inline constexpr uint64_t kShardSampleCount = 24;

// Sample record offsets (§3.3).
inline constexpr uint64_t kRecordOffset = 0;
inline constexpr uint64_t kRecordStoredSize = 8;
inline constexpr uint64_t kRecordRawSize = 16;
inline constexpr uint64_t kRecordChecksum = 24;
inline constexpr uint64_t kRecordShard = 32;
inline constexpr uint64_t kRecordFlags = 36;
inline constexpr uint64_t kRecordLength = 40;
inline constexpr uint64_t kRecordMetaOffset = 48;
inline constexpr uint64_t kRecordMetaSize = 56;
inline constexpr uint64_t kRecordSourceOffset = 64;
inline constexpr uint64_t kRecordSourceSize = 72;
inline constexpr uint64_t kRecordSourceBytes = 80;
inline constexpr uint64_t kRecordSourceMtimeNs = 88;
inline constexpr uint64_t kRecordSourceHash = 96;
inline constexpr uint64_t kRecordReserved = 104;  // u64[3], to kSampleRecordSize

// Tensor entry offsets (§3.3).
inline constexpr uint64_t kTensorEntryOffset = 0;
inline constexpr uint64_t kTensorEntryNbytes = 8;

inline constexpr uint32_t kFlagZstd = 1u << 0;
inline constexpr uint32_t kFlagByteShuffle = 1u << 1;
inline constexpr uint32_t kKnownSampleFlags = kFlagZstd | kFlagByteShuffle;

// One sample record (§3.3), decoded.
struct SampleRecord {
  uint64_t offset = 0;
  uint64_t stored_size = 0;
  uint64_t raw_size = 0;
  uint64_t checksum = 0;
  uint32_t shard = 0;
  uint32_t flags = 0;
  uint64_t length = 0;
  uint64_t meta_offset = 0;
  uint64_t meta_size = 0;
  uint64_t source_offset = 0;
  uint64_t source_size = 0;
  uint64_t source_bytes = 0;
  int64_t source_mtime_ns = 0;
  uint64_t source_hash = 0;
};

// Encodes `r` into 128 bytes at `out` (reserved bytes zero).
void EncodeSampleRecord(const SampleRecord& r, std::byte* out);
// Decodes 128 bytes; no validation (IndexView::Parse validates).
SampleRecord DecodeSampleRecord(const std::byte* in);

// A sample as a writer holds it until the index is written.
struct IndexSample {
  SampleRecord record;  // meta_* and source_offset/size are assigned by EncodeIndex
  std::vector<uint64_t> dims;            // Schema::DimsPerSample() values
  std::vector<uint64_t> tensor_offsets;  // per field
  std::vector<uint64_t> tensor_sizes;    // per field
  std::string metadata;                  // encoded (§3.4), empty for none
  std::string source_path;
  // Index version 2 (§3.8.4): per field, the stored region's size of a field with a non-raw
  // codec (0 for raw fields); empty when every field is raw.
  std::vector<uint64_t> field_stored_sizes;
  // Index version 3 (§3.9): per field, the field checksum; empty when unknown (a sample of a
  // dataset written before field checksums). An index records them only when every sample has
  // them.
  std::vector<uint64_t> field_checksums;
};

// Index header flags (§3.1).
inline constexpr uint32_t kIndexFlagShardUids = 1u << 0;  // shard uids present (§3.4)
inline constexpr uint32_t kKnownIndexFlags = kIndexFlagShardUids;
// Index version 3 only (§3.9): every record carries a checksum per field.
inline constexpr uint32_t kIndexFlagFieldChecksums = 1u << 1;

struct IndexShard {
  std::string name;  // plain file name, "shard-00000.lss"
  uint64_t file_size = 0;
  uint64_t sample_count = 0;
  // The uid in the shard's header (§4.1); 0 for a shard written before the uid revision.
  uint64_t uid = 0;
};

// Encodes a complete index. Shard sample counts are recomputed from the records. The shard uids
// are recorded (flag kIndexFlagShardUids) when any shard has a non-zero uid. Preconditions
// (the writer's invariants): the schema is valid; every sample has the schema's dims and tensors.
std::string EncodeIndex(const Schema& schema, const std::vector<IndexShard>& shards,
                        const std::vector<IndexSample>& samples);

// True for a plain file name: 1..255 bytes, no '/', no NUL, not "." or "..".
bool IsPlainFileName(std::string_view name);

// A fully validated index over bytes the caller keeps alive (e.g. an mmap). Parse checks
// everything in FORMAT.md §3.7 that the index alone determines; accessors then trust the bytes.
// Thread-safe for concurrent const use.
class IndexParser;

class IndexView {
 public:
  // `file` names the index in messages. Never allocates in proportion to untrusted counts before
  // they are checked against the byte size.
  static Result<IndexView> Parse(std::span<const std::byte> bytes, const std::string& file);

  uint64_t sample_count() const { return sample_count_; }
  const Schema& schema() const { return schema_; }
  const std::vector<IndexShard>& shards() const { return shards_; }
  uint64_t checksum() const { return checksum_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint64_t total_raw_bytes() const { return total_raw_bytes_; }
  uint64_t dims_per_sample() const { return dims_per_sample_; }
  // True when the index records shard uids (§3.1 flags bit 0); then shards()[k].uid must equal the
  // uid in shard k's header (§3.7).
  bool has_shard_uids() const { return has_shard_uids_; }

  // Preconditions: i < sample_count(), f < field count, j < dims_per_sample().
  SampleRecord record(uint64_t i) const;
  uint64_t tensor_offset(uint64_t i, size_t f) const;
  uint64_t tensor_nbytes(uint64_t i, size_t f) const;
  uint64_t dim(uint64_t i, uint64_t j) const;
  // The dims of field f of sample i.
  std::vector<uint64_t> shape(uint64_t i, size_t f) const;
  // Blob bytes; the range was validated by Parse for every range the index references.
  std::span<const std::byte> blob(uint64_t offset, uint64_t size) const;
  std::string_view source_path(uint64_t i) const;
  std::span<const std::byte> metadata_bytes(uint64_t i) const;
  // Everything about sample i, as a writer would hold it (for append and merge).
  IndexSample Entry(uint64_t i) const;

 private:
  friend class IndexParser;  // Parse's implementation, one method per §3.7 check group

  std::span<const std::byte> bytes_;
  Schema schema_;
  std::vector<IndexShard> shards_;
  std::vector<uint64_t> field_dim_start_;  // first dim of field f within a sample's dims
  uint64_t sample_count_ = 0;
  uint64_t dims_per_sample_ = 0;
  uint64_t samples_offset_ = 0;
  uint64_t tensors_offset_ = 0;
  uint64_t dims_offset_ = 0;
  uint64_t blob_offset_ = 0;
  uint64_t checksum_ = 0;
  uint64_t total_raw_bytes_ = 0;
  bool has_shard_uids_ = false;
};

}  // namespace libshard::format
