// The cache's records as bytes (cache_records.h).
#include "remote/cache_records.h"

#include <cstring>

#include "format/bytes.h"

namespace libshard::remote {

std::optional<StateHeader> ParseStateHeader(std::span<const std::byte> header, uint64_t file_size) {
  if (header.size() < kStateHeader || std::memcmp(header.data(), kStateMagic, 8) != 0)
    return std::nullopt;
  StateHeader h;
  h.version = format::GetU32(header.data() + 8);
  h.block_size = format::GetU64(header.data() + 16);
  h.size = format::GetU64(header.data() + 24);
  h.blocks = format::GetU64(header.data() + 32);
  h.etag_hash = format::GetU64(header.data() + 40);
  if ((h.version != 1 && h.version != kStateVersion) ||
      format::GetU32(header.data() + 12) != kStateHeader || h.block_size == 0 ||
      h.block_size % 4096 != 0 || h.block_size > kMaxCacheBlock)
    return std::nullopt;
  // blocks = ceil(size / block_size), computed without overflow; the file holds its entries.
  if (h.blocks != h.size / h.block_size + (h.size % h.block_size != 0)) return std::nullopt;
  if (h.blocks > (UINT64_MAX - kStateHeader) / kEntryBytes ||
      file_size != kStateHeader + h.blocks * kEntryBytes)
    return std::nullopt;
  return h;
}

void EncodeStateHeader(const StateHeader& h, std::byte out[kStateHeader]) {
  std::memset(out, 0, kStateHeader);
  std::memcpy(out, kStateMagic, 8);
  format::PutU32(out + 8, kStateVersion);
  format::PutU32(out + 12, kStateHeader);
  format::PutU64(out + 16, h.block_size);
  format::PutU64(out + 24, h.size);
  format::PutU64(out + 32, h.blocks);
  format::PutU64(out + 40, h.etag_hash);
}

std::optional<UsageRecord> ParseUsage(std::span<const std::byte> record, uint64_t now_ns,
                                      uint64_t fs_bytes) {
  if (record.size() < kUsageBytes || std::memcmp(record.data(), kUsageMagic, 8) != 0 ||
      format::GetU32(record.data() + 8) != 1 || format::GetU32(record.data() + 12) != kUsageBytes)
    return std::nullopt;
  UsageRecord r;
  r.used = format::GetU64(record.data() + 16);
  r.measured_ns = format::GetU64(record.data() + 24);
  r.pending = format::GetU64(record.data() + 32);
  constexpr uint64_t kClockSlackNs = 1000000000ull;
  if (r.used > fs_bytes || r.pending > fs_bytes || now_ns > UINT64_MAX - kClockSlackNs ||
      r.measured_ns > now_ns + kClockSlackNs)
    return std::nullopt;
  return r;
}

void EncodeUsage(const UsageRecord& r, std::byte out[kUsageBytes]) {
  std::memset(out, 0, kUsageBytes);
  std::memcpy(out, kUsageMagic, 8);
  format::PutU32(out + 8, 1);
  format::PutU32(out + 12, kUsageBytes);
  format::PutU64(out + 16, r.used);
  format::PutU64(out + 24, r.measured_ns);
  format::PutU64(out + 32, r.pending);
}

}  // namespace libshard::remote
