// Shard file header (FORMAT.md §4.1).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "libshard/status.h"

namespace libshard::format {

inline constexpr uint64_t kShardHeaderSize = 4096;
inline constexpr uint32_t kShardVersion = 1;

// Header offset of the shard's uid (§4.1).
inline constexpr uint64_t kShardUidOffset = 16;

// The 4096 header bytes of shard `number` whose uid is `uid` (§4.1: random and non-zero for every
// shard written since the shard-uid revision; 0 only reproduces files written before it).
std::string EncodeShardHeader(uint32_t number, uint64_t uid);
// Checks magic, version, reserved bytes and checksum; `file` names the shard in messages. When
// `uid` is not null it receives the header's shard uid (0 for shards written before the uid
// revision).
[[nodiscard]] Status CheckShardHeader(std::span<const std::byte> header, const std::string& file,
                                      uint64_t* uid = nullptr);
// A non-zero shard uid that is a function of (`seed`, `number`), for reproducible output (tests,
// golden files); writers otherwise draw uids at random (internal::RandomNonZeroU64).
uint64_t ShardUidFromSeed(uint64_t seed, uint32_t number);
// "shard-00042.lss"
std::string ShardFileName(uint32_t number);

}  // namespace libshard::format
