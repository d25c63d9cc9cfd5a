// The index of version 1 (FORMAT.md §3.1-§3.7), the fixed-record layout of datasets written before
// the compact index: a validated zero-copy view for readers (Dataset::Open, `libshard upgrade`).
// Bytes only; no system calls.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/index_common.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::format::legacy {

inline constexpr uint64_t kV1FieldRecordSize = 32;
inline constexpr uint64_t kV1ShardRecordSize = 32;
inline constexpr uint64_t kV1TensorEntrySize = 16;
inline constexpr uint64_t kV1DimSize = 8;  // one u64 dim (§3.3)

// Header field offsets of version 1 (§3.1) beyond those every version shares (index_common.h).
inline constexpr uint64_t kV1HeaderFieldsOffset = 32;
inline constexpr uint64_t kV1HeaderShardsOffset = 40;
inline constexpr uint64_t kV1HeaderSamplesOffset = 48;
inline constexpr uint64_t kV1HeaderTensorsOffset = 56;
inline constexpr uint64_t kV1HeaderDimsOffset = 64;
inline constexpr uint64_t kV1HeaderBlobOffset = 72;
inline constexpr uint64_t kV1HeaderBlobSize = 80;
inline constexpr uint64_t kV1HeaderFileSize = 88;
inline constexpr uint64_t kV1HeaderLengthField = 96;
inline constexpr uint64_t kV1HeaderShardUids = 100;
inline constexpr uint64_t kV1HeaderReserved = 108;  // ..119

// Field record offsets (§3.2).
inline constexpr uint64_t kV1FieldDType = 0;
inline constexpr uint64_t kV1FieldRank = 4;
inline constexpr uint64_t kV1FieldSeqDim = 8;
inline constexpr uint64_t kV1FieldReserved = 12;
inline constexpr uint64_t kV1FieldNameOffset = 16;
inline constexpr uint64_t kV1FieldNameSize = 24;

// Shard record offsets (§3.5).
inline constexpr uint64_t kV1ShardNameOffset = 0;
inline constexpr uint64_t kV1ShardNameSize = 8;
inline constexpr uint64_t kV1ShardFileSize = 16;
inline constexpr uint64_t kV1ShardSampleCount = 24;

// Tensor entry offsets (§3.3).
inline constexpr uint64_t kV1TensorEntryOffset = 0;
inline constexpr uint64_t kV1TensorEntryNbytes = 8;

// A fully validated index over bytes the caller keeps alive (e.g. an mmap). Parse checks
// everything in FORMAT.md §3.7 that the index alone determines; accessors then trust the bytes.
// Thread-safe for concurrent const use.
class IndexV1Parser;

class IndexV1View {
 public:
  // `file` names the index in messages. Never allocates in proportion to untrusted counts before
  // they are checked against the byte size.
  static Result<IndexV1View> Parse(std::span<const std::byte> bytes, const std::string& file);

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
  friend class IndexV1Parser;  // Parse's implementation, one method per §3.7 check group

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

}  // namespace libshard::format::legacy
