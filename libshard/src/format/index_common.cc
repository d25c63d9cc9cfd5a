// What every index version shares (index_common.h, FORMAT.md §3).
#include "format/index_common.h"

#include <cstring>

#include "format/bytes.h"

namespace libshard::format {

namespace {
constexpr const char* kDamaged = "; the index is damaged, re-run libshard pack";
}  // namespace

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxShardNameBytes && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

Result<uint32_t> PeekIndexVersion(std::span<const std::byte> bytes, const std::string& file) {
  if (bytes.size() < kIndexHeaderSize)
    return Status::Corruption(file + ": " + std::to_string(bytes.size()) +
                              " bytes is too short for an index header (128)" + kDamaged);
  if (std::memcmp(bytes.data(), kIndexMagic, sizeof(kIndexMagic)) != 0)
    return Status::Corruption(file + ": offset 0: bad magic (not a libshard index)" +
                              std::string(kDamaged));
  const uint32_t version = GetU32(bytes.data() + kHeaderVersion);
  if (version < kIndexVersion1 || version > kIndexVersion4)
    return Status::Unsupported(file + ": offset 8: index version " + std::to_string(version) +
                               " is not supported (this libshard reads versions 1 to 4); the "
                               "dataset was written by a newer libshard, upgrade libshard");
  return version;
}

}  // namespace libshard::format
