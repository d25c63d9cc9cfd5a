// The fixed-size on-disk structs of the index (FORMAT.md §3.8.2, §3.8.3): the 128-byte header,
// the 32-byte field record, the 16-byte dim record and the 40-byte shard record, each with
// EncodeTo/DecodeFrom. Bytes only: DecodeFrom reads the fields as they are (reserved ones
// included); what they must say is checked by the parser (index_parse.cc), which knows the
// counts and the strings.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "format/index.h"

namespace libshard::format {

// Bytes 0-127 of an index (§3.8.2).
struct IndexHeader {
  uint32_t version = 0;
  uint32_t flags = 0;
  uint64_t sample_count = 0;
  uint32_t field_count = 0;
  uint32_t shard_count = 0;
  uint32_t block_samples = 0;
  int32_t length_field = -1;
  uint64_t strings_size = 0;
  uint64_t lengths_checksum = 0;
  uint64_t file_size = 0;
  uint64_t total_raw_bytes = 0;
  uint8_t length_width = 0;
  std::array<uint8_t, kBaseColumns> column_widths{};
  uint8_t reserved83 = 0;  // must be 0
  uint32_t dims_per_sample = 0;
  uint64_t tables_offset = 0;        // version 4 (§3.10.1); 0 before
  uint8_t table_offset_width = 0;    // version 4; 0 before
  uint8_t table_size_width = 0;      // version 4; 0 before
  std::array<uint8_t, kIndexChecksumOffset - kHeaderReserved> reserved{};  // must be 0
  uint64_t checksum = 0;

  // Writes the kIndexHeaderSize bytes at dst, the magic included.
  void EncodeTo(std::byte* dst) const;
  // Reads the kIndexHeaderSize bytes at src; the magic is not looked at (PeekIndexVersion
  // checks it).
  static IndexHeader DecodeFrom(const std::byte* src);
};

// One field record (§3.8.3), kFieldRecordSize bytes, in schema order.
struct FieldRecord {
  uint32_t dtype = 0;
  uint16_t rank = 0;
  uint16_t codec = 0;
  int32_t seq_dim = -1;
  uint16_t name_size = 0;
  uint8_t stored_width = 0;
  uint8_t reserved = 0;  // must be 0
  uint64_t name_offset = 0;
  std::array<uint8_t, 8> codec_params{};

  // Byte offsets within the record, for the parser's messages.
  static constexpr uint64_t kRankAt = 4, kCodecAt = 6, kSeqDimAt = 8, kNameSizeAt = 12,
                            kStoredWidthAt = 14, kReservedAt = 15, kNameOffsetAt = 16,
                            kCodecParamsAt = 24;

  void EncodeTo(std::byte* dst) const;  // kFieldRecordSize bytes at dst
  static FieldRecord DecodeFrom(const std::byte* src);
};

// One dim record (§3.8.3), kDimRecordSize bytes.
struct DimRecord {
  uint8_t kind = 0;  // DimKind
  uint8_t width = 0;
  std::array<uint8_t, 6> reserved{};  // must be 0
  uint64_t value = 0;

  static constexpr uint64_t kWidthAt = 1, kReservedAt = 2, kValueAt = 8;

  void EncodeTo(std::byte* dst) const;  // kDimRecordSize bytes at dst
  static DimRecord DecodeFrom(const std::byte* src);
};

// One shard record (§3.8.3), kShardRecordSize bytes.
struct ShardRecord {
  uint64_t name_offset = 0;
  uint64_t name_size = 0;
  uint64_t file_size = 0;
  uint64_t sample_count = 0;
  uint64_t uid = 0;

  static constexpr uint64_t kFileSizeAt = 16, kSampleCountAt = 24, kUidAt = 32;

  void EncodeTo(std::byte* dst) const;  // kShardRecordSize bytes at dst
  static ShardRecord DecodeFrom(const std::byte* src);
};

}  // namespace libshard::format
