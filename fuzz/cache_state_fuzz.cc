// libFuzzer target for the node-local cache's own records (remote/cache_records.h): a shard's
// state file header and the root's .usage, as a damaged disk or another program may leave them.
// Checks the bounds the parsers promise: entries the file holds, counts the file system holds, no
// measure in the future.
//
// Input: u64 file size, u64 "now", u64 file system bytes, then the record bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "remote/cache_records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard::remote;
  if (size < 24) return 0;
  uint64_t file_size, now, fs_bytes;
  std::memcpy(&file_size, data, 8);
  std::memcpy(&now, data + 8, 8);
  std::memcpy(&fs_bytes, data + 16, 8);
  const std::span<const std::byte> rec(reinterpret_cast<const std::byte*>(data + 24), size - 24);
  if (auto h = ParseStateHeader(rec, file_size)) {
    if (h->block_size == 0 || h->block_size % 4096 != 0 || h->block_size > kMaxCacheBlock)
      __builtin_trap();
    if (file_size != kStateHeader + h->blocks * kEntryBytes) __builtin_trap();
    if (h->blocks * h->block_size < h->size ||
        (h->blocks > 0 && (h->blocks - 1) * h->block_size >= h->size))
      __builtin_trap();
    std::byte again[kStateHeader];
    EncodeStateHeader(*h, again);
    auto h2 = ParseStateHeader({again, kStateHeader}, file_size);
    if (!h2 || h2->blocks != h->blocks || h2->size != h->size) __builtin_trap();
  }
  if (auto u = ParseUsage(rec, now, fs_bytes)) {
    if (u->used > fs_bytes || u->pending > fs_bytes || u->measured_ns > now + 1000000000ull)
      __builtin_trap();
  }
  return 0;
}
