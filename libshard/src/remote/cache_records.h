// The node-local cache's own small records as bytes (docs/CACHE.md §2 and §4): a shard's state
// file header and the root's usage record. Untrusted input: any process (or a damaged disk) may
// have written them, so every field is bounded by what it can justify. Bytes only, no system
// calls (fuzz/cache_state_fuzz.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "libshard/status.h"

namespace libshard::remote {

// docs/CACHE.md §2: the state file of a shard's cache file.
inline constexpr char kStateMagic[8] = {'L', 'S', 'C', 'A', 'C', 'H', 'E', '1'};
inline constexpr uint64_t kStateHeader = 64;
inline constexpr uint64_t kEntryBytes = 16;
inline constexpr uint64_t kPresent = 0x31544E4553455250ull;  // "PRESENT1"
inline constexpr uint32_t kStateVersion = 2;  // version 1 files are upgraded in place (§2)
inline constexpr uint64_t kMaxCacheBlock = uint64_t{1} << 30;

struct StateHeader {
  uint32_t version = 0;  // 1 or 2
  uint64_t block_size = 0;
  uint64_t size = 0;  // the object's
  uint64_t blocks = 0;
  uint64_t etag_hash = 0;
};

// The header of a state file of `file_size` bytes: magic, version 1 or 2, header size 64, a
// block size that is a multiple of 4096 up to kMaxCacheBlock, blocks = ceil(size / block size),
// the file exactly 64 + 16 x blocks bytes. nullopt otherwise (the caller names the file).
std::optional<StateHeader> ParseStateHeader(std::span<const std::byte> header, uint64_t file_size);
// The 64 bytes of a version 2 header.
void EncodeStateHeader(const StateHeader& h, std::byte out[kStateHeader]);

// docs/CACHE.md §4: ROOT/.usage.
inline constexpr char kUsageMagic[8] = {'L', 'S', 'U', 'S', 'A', 'G', 'E', '1'};
inline constexpr uint64_t kUsageBytes = 64;
inline constexpr const char* kUsageName = ".usage";

struct UsageRecord {
  uint64_t used = 0;         // bytes the cache files allocate (with reserved blocks)
  uint64_t measured_ns = 0;  // CLOCK_REALTIME of the last measure
  uint64_t pending = 0;      // bytes reserved by downloads in flight, not yet written
};

// The record when it can be trusted: its magic, version 1, header size 64, a count at most
// `fs_bytes` (the size of the file system that holds the cache), pending bytes at most that too,
// and the time of the last measure not after `now_ns` (plus a second for clocks that step).
// nullopt: damaged or lying; the caller measures again.
std::optional<UsageRecord> ParseUsage(std::span<const std::byte> record, uint64_t now_ns,
                                      uint64_t fs_bytes);
void EncodeUsage(const UsageRecord& r, std::byte out[kUsageBytes]);

}  // namespace libshard::remote
