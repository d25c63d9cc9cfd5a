#include "format/shard_format.h"

#include <cstdio>
#include <cstring>

#include "format/bytes.h"
#include "format/checksum.h"

namespace libshard::format {

namespace {
constexpr char kShardMagic[8] = {'L', 'S', 'H', 'D', 'S', 'H', 'D', '\0'};
constexpr size_t kChecksumAt = kShardHeaderSize - 8;
}  // namespace

std::string EncodeShardHeader(uint32_t number, uint64_t uid) {
  std::string h(kShardHeaderSize, '\0');
  auto* p = reinterpret_cast<std::byte*>(h.data());
  std::memcpy(p, kShardMagic, 8);
  PutU32(p + 8, kShardVersion);
  PutU32(p + 12, number);
  PutU64(p + kShardUidOffset, uid);
  PutU64(p + kChecksumAt, Xxh3WithHole({p, kShardHeaderSize}, kChecksumAt));
  return h;
}

Status CheckShardHeader(std::span<const std::byte> h, const std::string& file, uint64_t* uid) {
  if (h.size() < kShardHeaderSize)
    return Status::Corruption(file + ": shard header truncated (" + std::to_string(h.size()) +
                              " of 4096 bytes); the shard is damaged, re-run libshard pack");
  if (std::memcmp(h.data(), kShardMagic, 8) != 0)
    return Status::Corruption(file + ": offset 0: bad shard magic (not a libshard shard)");
  const uint32_t shard_version = GetU32(h.data() + 8);
  if (shard_version != kShardVersion)
    return Status::Unsupported(file + ": offset 8: shard version " + std::to_string(shard_version) +
                               " (this libshard reads version 1); upgrade libshard");
  uint64_t stored = GetU64(h.data() + kChecksumAt);
  uint64_t actual = Xxh3WithHole(h.first(kShardHeaderSize), kChecksumAt);
  if (stored != actual)
    return Status::Corruption(file + ": offset 4088: shard header checksum " + Hex16(stored) +
                              " != computed " + Hex16(actual) +
                              "; the shard is damaged, re-run libshard pack");
  for (size_t k = kShardUidOffset + 8; k < kChecksumAt; ++k)
    if (h[k] != std::byte{0})
      return Status::Corruption(file + ": offset " + std::to_string(k) +
                                ": reserved shard header byte is not zero");
  if (uid) *uid = GetU64(h.data() + kShardUidOffset);
  return Status::OK();
}

uint64_t ShardUidFromSeed(uint64_t seed, uint32_t number) {
  // SplitMix64 of seed + (number + 1) * golden gamma: distinct numbers, distinct uids.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t{number} + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z != 0 ? z : 1;
}

std::string ShardFileName(uint32_t number) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05u.lss", number);
  return buf;
}

}  // namespace libshard::format
