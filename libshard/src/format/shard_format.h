// Shard file header (FORMAT.md §4.1).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "libshard/status.h"

namespace libshard::format {

inline constexpr uint64_t kShardHeaderSize = 4096;
inline constexpr uint32_t kShardVersion = 1;

// The 4096 header bytes of shard `number`.
std::string EncodeShardHeader(uint32_t number);
// Checks magic, version, reserved bytes and checksum; `file` names the shard in messages.
[[nodiscard]] Status CheckShardHeader(std::span<const std::byte> header, const std::string& file);
// "shard-00042.lss"
std::string ShardFileName(uint32_t number);

}  // namespace libshard::format
