// One sample's record (FORMAT.md §3.3): the fixed 128-byte record of an index of version 1, whose
// first 104 bytes the journal (§6) stores per sample, and the decoded form every index version
// returns. Bytes only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace libshard::format {

inline constexpr uint64_t kSampleRecordSize = 128;

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

// Sample flags (§3.3).
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

  // Encodes this record into kSampleRecordSize bytes at `out` (reserved bytes zero).
  void EncodeTo(std::byte* out) const;
  // Decodes kSampleRecordSize bytes; no validation (the index parser and the journal reader
  // validate).
  static SampleRecord DecodeFrom(const std::byte* in);
};

}  // namespace libshard::format
