// The index's fixed-size on-disk structs (index_records.h, FORMAT.md §3.8.2, §3.8.3).
#include "format/index_records.h"

#include <cstring>

#include "format/bytes.h"

namespace libshard::format {

void IndexHeader::EncodeTo(std::byte* p) const {
  std::memcpy(p, kIndexMagic, sizeof(kIndexMagic));
  PutU32(p + kHeaderVersion, version);
  PutU32(p + kHeaderFlags, flags);
  PutU64(p + kHeaderSampleCount, sample_count);
  PutU32(p + kHeaderFieldCount, field_count);
  PutU32(p + kHeaderShardCount, shard_count);
  PutU32(p + kHeaderBlockSamples, block_samples);
  PutI32(p + kHeaderLengthField, length_field);
  PutU64(p + kHeaderStringsSize, strings_size);
  PutU64(p + kHeaderLengthsChecksum, lengths_checksum);
  PutU64(p + kHeaderFileSize, file_size);
  PutU64(p + kHeaderTotalRawBytes, total_raw_bytes);
  p[kHeaderLengthWidth] = std::byte{length_width};
  for (size_t c = 0; c < kBaseColumns; ++c)
    p[kHeaderColumnWidths + c] = std::byte{column_widths[c]};
  p[kHeaderReserved83] = std::byte{reserved83};
  PutU32(p + kHeaderDimsPerSample, dims_per_sample);
  PutU64(p + kHeaderTablesOffset, tables_offset);
  p[kHeaderTableOffsetWidth] = std::byte{table_offset_width};
  p[kHeaderTableSizeWidth] = std::byte{table_size_width};
  for (size_t k = 0; k < reserved.size(); ++k) p[kHeaderReserved + k] = std::byte{reserved[k]};
  PutU64(p + kIndexChecksumOffset, checksum);
}

IndexHeader IndexHeader::DecodeFrom(const std::byte* p) {
  IndexHeader h;
  h.version = GetU32(p + kHeaderVersion);
  h.flags = GetU32(p + kHeaderFlags);
  h.sample_count = GetU64(p + kHeaderSampleCount);
  h.field_count = GetU32(p + kHeaderFieldCount);
  h.shard_count = GetU32(p + kHeaderShardCount);
  h.block_samples = GetU32(p + kHeaderBlockSamples);
  h.length_field = GetI32(p + kHeaderLengthField);
  h.strings_size = GetU64(p + kHeaderStringsSize);
  h.lengths_checksum = GetU64(p + kHeaderLengthsChecksum);
  h.file_size = GetU64(p + kHeaderFileSize);
  h.total_raw_bytes = GetU64(p + kHeaderTotalRawBytes);
  h.length_width = std::to_integer<uint8_t>(p[kHeaderLengthWidth]);
  for (size_t c = 0; c < kBaseColumns; ++c)
    h.column_widths[c] = std::to_integer<uint8_t>(p[kHeaderColumnWidths + c]);
  h.reserved83 = std::to_integer<uint8_t>(p[kHeaderReserved83]);
  h.dims_per_sample = GetU32(p + kHeaderDimsPerSample);
  h.tables_offset = GetU64(p + kHeaderTablesOffset);
  h.table_offset_width = std::to_integer<uint8_t>(p[kHeaderTableOffsetWidth]);
  h.table_size_width = std::to_integer<uint8_t>(p[kHeaderTableSizeWidth]);
  for (size_t k = 0; k < h.reserved.size(); ++k)
    h.reserved[k] = std::to_integer<uint8_t>(p[kHeaderReserved + k]);
  h.checksum = GetU64(p + kIndexChecksumOffset);
  return h;
}

void FieldRecord::EncodeTo(std::byte* p) const {
  PutU32(p, dtype);
  PutU16(p + kRankAt, rank);
  PutU16(p + kCodecAt, codec);
  PutI32(p + kSeqDimAt, seq_dim);
  PutU16(p + kNameSizeAt, name_size);
  p[kStoredWidthAt] = std::byte{stored_width};
  p[kReservedAt] = std::byte{reserved};
  PutU64(p + kNameOffsetAt, name_offset);
  for (size_t k = 0; k < codec_params.size(); ++k)
    p[kCodecParamsAt + k] = std::byte{codec_params[k]};
}

FieldRecord FieldRecord::DecodeFrom(const std::byte* p) {
  FieldRecord r;
  r.dtype = GetU32(p);
  r.rank = GetU16(p + kRankAt);
  r.codec = GetU16(p + kCodecAt);
  r.seq_dim = GetI32(p + kSeqDimAt);
  r.name_size = GetU16(p + kNameSizeAt);
  r.stored_width = std::to_integer<uint8_t>(p[kStoredWidthAt]);
  r.reserved = std::to_integer<uint8_t>(p[kReservedAt]);
  r.name_offset = GetU64(p + kNameOffsetAt);
  for (size_t k = 0; k < r.codec_params.size(); ++k)
    r.codec_params[k] = std::to_integer<uint8_t>(p[kCodecParamsAt + k]);
  return r;
}

void DimRecord::EncodeTo(std::byte* p) const {
  p[0] = std::byte{kind};
  p[kWidthAt] = std::byte{width};
  for (size_t k = 0; k < reserved.size(); ++k) p[kReservedAt + k] = std::byte{reserved[k]};
  PutU64(p + kValueAt, value);
}

DimRecord DimRecord::DecodeFrom(const std::byte* p) {
  DimRecord r;
  r.kind = std::to_integer<uint8_t>(p[0]);
  r.width = std::to_integer<uint8_t>(p[kWidthAt]);
  for (size_t k = 0; k < r.reserved.size(); ++k)
    r.reserved[k] = std::to_integer<uint8_t>(p[kReservedAt + k]);
  r.value = GetU64(p + kValueAt);
  return r;
}

void ShardRecord::EncodeTo(std::byte* p) const {
  PutU64(p, name_offset);
  PutU64(p + 8, name_size);
  PutU64(p + kFileSizeAt, file_size);
  PutU64(p + kSampleCountAt, sample_count);
  PutU64(p + kUidAt, uid);
}

ShardRecord ShardRecord::DecodeFrom(const std::byte* p) {
  ShardRecord r;
  r.name_offset = GetU64(p);
  r.name_size = GetU64(p + 8);
  r.file_size = GetU64(p + kFileSizeAt);
  r.sample_count = GetU64(p + kSampleCountAt);
  r.uid = GetU64(p + kUidAt);
  return r;
}

}  // namespace libshard::format
