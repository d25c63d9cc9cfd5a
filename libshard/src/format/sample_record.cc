// One sample's record (sample_record.h, FORMAT.md §3.3).
#include "format/sample_record.h"

#include <cstring>

#include "format/bytes.h"

namespace libshard::format {

void SampleRecord::EncodeTo(std::byte* p) const {
  std::memset(p, 0, kSampleRecordSize);
  PutU64(p + kRecordOffset, offset);
  PutU64(p + kRecordStoredSize, stored_size);
  PutU64(p + kRecordRawSize, raw_size);
  PutU64(p + kRecordChecksum, checksum);
  PutU32(p + kRecordShard, shard);
  PutU32(p + kRecordFlags, flags);
  PutU64(p + kRecordLength, length);
  PutU64(p + kRecordMetaOffset, meta_offset);
  PutU64(p + kRecordMetaSize, meta_size);
  PutU64(p + kRecordSourceOffset, source_offset);
  PutU64(p + kRecordSourceSize, source_size);
  PutU64(p + kRecordSourceBytes, source_bytes);
  PutI64(p + kRecordSourceMtimeNs, source_mtime_ns);
  PutU64(p + kRecordSourceHash, source_hash);
}

SampleRecord SampleRecord::DecodeFrom(const std::byte* p) {
  SampleRecord r;
  r.offset = GetU64(p + kRecordOffset);
  r.stored_size = GetU64(p + kRecordStoredSize);
  r.raw_size = GetU64(p + kRecordRawSize);
  r.checksum = GetU64(p + kRecordChecksum);
  r.shard = GetU32(p + kRecordShard);
  r.flags = GetU32(p + kRecordFlags);
  r.length = GetU64(p + kRecordLength);
  r.meta_offset = GetU64(p + kRecordMetaOffset);
  r.meta_size = GetU64(p + kRecordMetaSize);
  r.source_offset = GetU64(p + kRecordSourceOffset);
  r.source_size = GetU64(p + kRecordSourceSize);
  r.source_bytes = GetU64(p + kRecordSourceBytes);
  r.source_mtime_ns = GetI64(p + kRecordSourceMtimeNs);
  r.source_hash = GetU64(p + kRecordSourceHash);
  return r;
}

}  // namespace libshard::format
