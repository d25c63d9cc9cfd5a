// The index, versions 2, 3 and 4 (FORMAT.md §3.8, §3.9, §3.10): encoder for writers
// (index_encode.cc), and a parser in steps for readers that never read more than they use: the
// 128-byte header (ParseHeader), then the head and the lengths (Parse; index_parse.cc), then each
// sample block when first used (ParseBlock; index_block.cc), then (version 4) a sample's block
// table when a slice first needs it (CheckTable, with format/block_table.h). Bytes only; the
// caller does the reading (dataset/). Version 1 is read by legacy/index_v1.h.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/block_table.h"
#include "format/index_common.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::format {

inline constexpr uint32_t kDefaultBlockSamples = 4096;
inline constexpr uint32_t kMaxBlockSamples = 65536;
inline constexpr uint64_t kPathRestartInterval = 16;  // §3.8.6
inline constexpr uint64_t kFieldRecordSize = 32;
inline constexpr uint64_t kDimRecordSize = 16;
inline constexpr uint64_t kShardRecordSize = 40;
inline constexpr uint64_t kBlockEntrySize = 16;
inline constexpr size_t kBaseColumns = 10;

// Header offsets (§3.8.2) that differ from version 1.
inline constexpr uint64_t kHeaderBlockSamples = 32;
inline constexpr uint64_t kHeaderLengthField = 36;
inline constexpr uint64_t kHeaderStringsSize = 40;
inline constexpr uint64_t kHeaderLengthsChecksum = 48;
inline constexpr uint64_t kHeaderFileSize = 56;
inline constexpr uint64_t kHeaderTotalRawBytes = 64;
inline constexpr uint64_t kHeaderLengthWidth = 72;
inline constexpr uint64_t kHeaderColumnWidths = 73;  // u8[10]
inline constexpr uint64_t kHeaderReserved83 = 83;
inline constexpr uint64_t kHeaderDimsPerSample = 84;
// Version 4 (§3.10.1); reserved (0) in versions 2 and 3.
inline constexpr uint64_t kHeaderTablesOffset = 88;
inline constexpr uint64_t kHeaderTableOffsetWidth = 96;
inline constexpr uint64_t kHeaderTableSizeWidth = 97;
inline constexpr uint64_t kHeaderReserved = 98;  // ..119

// The base columns of a record, in order (§3.8.6).
enum BaseColumn : size_t {
  kColShard = 0,
  kColOffsetPages,
  kColStoredSize,
  kColChecksum,
  kColFlags,
  kColSourceBytes,
  kColSourceMtime,
  kColSourceHash,
  kColPathEnd,
  kColMetaEnd,
};

// A field's codec (§3.8.3, §4.3); {0, zeros} is raw.
struct FieldCodec {
  uint16_t codec = 0;
  std::array<uint8_t, 8> params{};
  bool operator==(const FieldCodec&) const = default;
};

// Dim kinds (§3.8.3).
enum class DimKind : uint8_t { kConstant = 0, kLength = 1, kColumn = 2 };

// Encodes a complete index of `index_version` 2, 3 or 4 (§3.8, §3.9, §3.10). `codecs` is empty
// (every field raw) or one per field; a sample's `field_stored_sizes` then holds, for each field
// with a non-raw codec, its stored region's size (entries of raw fields are ignored). Version 3
// records the samples' `field_checksums` (header flags bit 1) when every sample has one per
// field. Version 4 is written when every sample also has a `block_table`; otherwise version 3.
// Shard sample counts are recomputed from the records. Preconditions (the writer's
// invariants): the schema is valid; every sample has the schema's dims and a valid layout;
// `block_samples` is a power of two in 1..kMaxBlockSamples.
std::string EncodeIndex(const Schema& schema, const std::vector<IndexShard>& shards,
                          const std::vector<IndexSample>& samples,
                          std::span<const FieldCodec> codecs = {},
                          uint32_t block_samples = kDefaultBlockSamples,
                          uint32_t index_version = kIndexVersion);

// Where the parts of a version 2 index lie, from its header alone (§3.8.1).
struct IndexLayout {
  uint64_t head_size = 0;
  uint64_t lengths_offset = 0;
  uint64_t lengths_size = 0;  // padding included
};

class Index;

// One sample block, read and fully checked (§3.8.7). Immutable; shared by readers.
class IndexBlock {
 public:
  uint64_t first() const { return first_; }
  uint64_t count() const { return count_; }

 private:
  friend class Index;
  std::vector<std::byte> bytes_;
  uint64_t first_ = 0;  // sample index of record 0
  uint64_t count_ = 0;
  uint64_t path_area_ = 0;  // offset of the path area within bytes_
  uint64_t meta_area_ = 0;
};

// A parsed version 2 or 3 head and lengths part (§3.8.7, §3.9). Thread-safe for concurrent
// const use.
class Index {
 public:
  // Checks the 128-byte header against the file's size (§3.8.7, up to the minimal size bound).
  static Result<IndexLayout> ParseHeader(std::span<const std::byte> header, uint64_t file_size,
                                           const std::string& file);
  // Checks the head (`layout.head_size` bytes from offset 0) and the lengths part.
  static Result<Index> Parse(std::vector<std::byte> head, std::vector<std::byte> lengths,
                               uint64_t file_size, const std::string& file);

  uint32_t version() const { return version_; }
  uint64_t sample_count() const { return n_; }
  const Schema& schema() const { return schema_; }
  // Whether every record carries field checksums (§3.9: version 3, header flags bit 1).
  bool has_field_checksums() const { return field_checksums_; }
  // Whether every record points at a block table (§3.10: version 4).
  bool has_block_tables() const { return version_ >= kIndexVersion4; }
  // Version 4: where the tables part starts (§3.10.1).
  uint64_t tables_offset() const { return tables_offset_; }
  const std::vector<IndexShard>& shards() const { return shards_; }
  const std::vector<FieldCodec>& codecs() const { return codecs_; }
  uint64_t checksum() const { return checksum_; }
  uint64_t total_raw_bytes() const { return total_raw_bytes_; }
  bool has_shard_uids() const { return has_shard_uids_; }
  uint64_t dims_per_sample() const { return d_; }
  uint32_t block_samples() const { return block_samples_; }
  uint64_t block_count() const { return blocks_.size() / 2; }
  uint64_t record_width() const { return record_width_; }
  // Bytes of the head and the lengths part (what Open reads).
  uint64_t resident_bytes() const { return head_.size() + lengths_.size(); }

  // Block b's extent in the file and its checksum. Precondition: b < block_count().
  uint64_t block_offset(uint64_t b) const { return blocks_[2 * b]; }
  uint64_t block_size(uint64_t b) const;
  uint64_t block_of(uint64_t i) const { return i / block_samples_; }

  // Precondition: i < sample_count().
  uint64_t length(uint64_t i) const;
  void Lengths(std::vector<uint64_t>* out) const;

  // Checks block b (`bytes` read from block_offset(b), block_size(b) of them): checksum, then
  // every record (§3.8.7). Corruption naming the file, the block and the sample.
  Result<IndexBlock> ParseBlock(uint64_t b, std::vector<std::byte> bytes) const;

  // Sample i of `block` (i in [block.first(), +count())). The record's meta/source ranges are 0.
  SampleRecord Record(const IndexBlock& block, uint64_t i) const;
  void Dims(const IndexBlock& block, uint64_t i, std::vector<uint64_t>* dims) const;
  // Per field: the stored region's size for a non-raw field, 0 for a raw one.
  void FieldStoredSizes(const IndexBlock& block, uint64_t i, std::vector<uint64_t>* out) const;
  // Per field, the field checksum (§3.9). Precondition: has_field_checksums().
  void FieldChecksums(const IndexBlock& block, uint64_t i, std::vector<uint64_t>* out) const;
  // Where sample i's block table lies in the file (§3.10.1; size 0: none) and its checksum, as
  // ParseBlock checked them. Precondition: has_block_tables().
  struct TableRef {
    uint64_t offset = 0;  // within the file
    uint64_t size = 0;
    uint64_t checksum = 0;
  };
  TableRef Table(const IndexBlock& block, uint64_t i) const;
  // Checks sample i's table bytes (`ref.size` of them, read at `ref.offset`) against its checksum
  // and its dims and codecs (§3.10.3), and parses them. Corruption naming the file and the
  // sample.
  Result<BlockTable> CheckTable(uint64_t i, const TableRef& ref, std::span<const std::byte> bytes,
                                std::span<const uint64_t> dims, uint32_t sample_flags) const;
  std::string SourcePath(const IndexBlock& block, uint64_t i) const;
  std::span<const std::byte> Metadata(const IndexBlock& block, uint64_t i) const;
  // Everything about sample i, as a writer holds it (for append, merge and upgrade), but its
  // block table, which is not in the block (the caller reads it: Table()).
  IndexSample Entry(const IndexBlock& block, uint64_t i) const;

 private:
  friend class IndexParser;
  struct DimInfo {
    DimKind kind = DimKind::kConstant;
    uint8_t width = 0;
    uint64_t value = 0;
    uint64_t column = 0;  // offset within the record (kColumn)
  };
  uint64_t Column(const std::byte* record, size_t c) const;
  const std::byte* RecordPtr(const IndexBlock& block, uint64_t i) const;
  // Path-area and metadata-area [begin, end) of record k of `block`.
  void AreaRange(const IndexBlock& block, uint64_t k, size_t end_column, uint64_t* begin,
                 uint64_t* end) const;
  Status CheckRecord(const IndexBlock& block, uint64_t k, std::string* prev_path) const;

  std::string file_;
  std::vector<std::byte> head_;
  std::vector<std::byte> lengths_;
  Schema schema_;
  std::vector<FieldCodec> codecs_;
  std::vector<uint8_t> stored_width_;       // per field
  std::vector<uint64_t> stored_column_;     // per field: offset within the record
  uint64_t checksum_column_ = 0;            // the first field checksum column (§3.9)
  uint64_t table_column_ = 0;               // version 4: table_offset, table_size, checksum
  uint8_t table_offset_width_ = 0;
  uint8_t table_size_width_ = 0;
  uint64_t tables_offset_ = 0;              // version 4: the tables part; else file_size_
  std::vector<IndexShard> shards_;
  std::vector<DimInfo> dims_;
  std::vector<uint64_t> blocks_;  // (offset, checksum) pairs
  std::array<uint8_t, kBaseColumns> width_{};
  std::array<uint64_t, kBaseColumns> column_{};  // offset within the record
  uint64_t n_ = 0;
  uint64_t d_ = 0;
  uint64_t file_size_ = 0;
  uint64_t checksum_ = 0;
  uint64_t total_raw_bytes_ = 0;
  uint64_t record_width_ = 0;
  uint64_t blocks_begin_ = 0;
  uint32_t block_samples_ = kDefaultBlockSamples;
  uint8_t length_width_ = 0;
  uint32_t version_ = kIndexVersion2;
  bool has_shard_uids_ = false;
  bool field_checksums_ = false;
  bool any_codec_ = false;
};

// The stored layout (§3.8.4): region offsets per field and the total size. `sizes` are the raw
// tensor sizes; `stored_sizes` (per field) replace them for non-raw fields. False on overflow.
bool ComputeStoredLayout(std::span<const FieldCodec> codecs, std::span<const uint64_t> sizes,
                         std::span<const uint64_t> stored_sizes, std::vector<uint64_t>* offsets,
                         uint64_t* total);

}  // namespace libshard::format
