// What every version of the index `index.lsi` / `index.*.lsi` (FORMAT.md §3) shares: the magic
// and the first header fields, the header flags, and the forms a writer holds samples and shards
// in until an index is written (IndexSample, IndexShard). Bytes only; no system calls.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/sample_record.h"
#include "libshard/status.h"

namespace libshard::format {

inline constexpr char kIndexMagic[8] = {'L', 'S', 'H', 'D', 'I', 'D', 'X', '\0'};
inline constexpr uint32_t kIndexVersion1 = 1;
inline constexpr uint32_t kIndexVersion2 = 2;
// Version 3 (§3.9) is version 2 with a checksum per field; version 4 (§3.10) is version 3 with a
// block table per sample (row-block checksums). format/index.h reads all three and writes 3 and 4.
inline constexpr uint32_t kIndexVersion3 = 3;
inline constexpr uint32_t kIndexVersion4 = 4;
// The version new indexes are written in (3 when a sample lacks what version 4 records, §7).
inline constexpr uint32_t kIndexVersion = kIndexVersion4;
inline constexpr uint64_t kIndexHeaderSize = 128;
inline constexpr uint64_t kIndexChecksumOffset = 120;
inline constexpr uint64_t kMaxShardNameBytes = 255;

// Header field offsets every version shares (§3.1, §3.8.2); the magic is at 0, the checksum at
// kIndexChecksumOffset.
inline constexpr uint64_t kHeaderVersion = 8;
inline constexpr uint64_t kHeaderFlags = 12;
inline constexpr uint64_t kHeaderSampleCount = 16;
inline constexpr uint64_t kHeaderFieldCount = 24;
inline constexpr uint64_t kHeaderShardCount = 28;

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

// A sample as a writer holds it until the index is written.
struct IndexSample {
  SampleRecord record;  // meta_* and source_offset/size are assigned by the encoder
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
  // Index version 4 (§3.10): the sample's block table, as stored (§3.10.2; "" for a sample
  // without row blocks); nullopt when unknown (a sample of a dataset written before row blocks).
  // An index of version 4 is written only when every sample has one (and field checksums).
  std::optional<std::string> block_table;
};

// True for a plain file name: 1..255 bytes, no '/', no NUL, not "." or "..".
bool IsPlainFileName(std::string_view name);

// The version in an index's first bytes (at least 12), after checking the magic; Corruption
// naming `file` otherwise.
Result<uint32_t> PeekIndexVersion(std::span<const std::byte> bytes, const std::string& file);

}  // namespace libshard::format
