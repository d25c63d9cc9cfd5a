// Checks of whole objects for the node-local cache (cache_verify.h).
#include "remote/cache_verify.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index.h"
#include "format/index_common.h"
#include "format/legacy/index_v1.h"

namespace libshard::remote {

Status CheckIndexBytes(std::span<const std::byte> bytes, uint64_t expected_size,
                       uint64_t expected_xxh3, const std::string& where) {
  if (bytes.size() != expected_size)
    return Status::Corruption(where + ": " + std::to_string(bytes.size()) +
                              " bytes, but manifest.json says " + std::to_string(expected_size));
  const std::span<const std::byte> first =
      bytes.first(std::min<size_t>(bytes.size(), format::kIndexHeaderSize));
  LIBSHARD_ASSIGN_OR_RETURN(uint32_t version, format::PeekIndexVersion(first, where));
  uint64_t checksum = 0;
  if (version == format::kIndexVersion1) {
    LIBSHARD_ASSIGN_OR_RETURN(format::legacy::IndexV1View v1,
                              format::legacy::IndexV1View::Parse(bytes, where));
    checksum = v1.checksum();
  } else {
    LIBSHARD_ASSIGN_OR_RETURN(format::IndexLayout layout,
                              format::Index::ParseHeader(first, bytes.size(), where));
    // ParseHeader bounds both parts by the file.
    const auto part = [&](uint64_t offset, uint64_t size) {
      return std::vector<std::byte>(bytes.begin() + offset, bytes.begin() + offset + size);
    };
    LIBSHARD_ASSIGN_OR_RETURN(format::Index index,
                              format::Index::Parse(part(0, layout.head_size),
                                                   part(layout.lengths_offset, layout.lengths_size),
                                                   bytes.size(), where));
    for (uint64_t b = 0; b < index.block_count(); ++b)
      LIBSHARD_RETURN_IF_ERROR(
          index.ParseBlock(b, part(index.block_offset(b), index.block_size(b))).status());
    checksum = index.checksum();
  }
  if (checksum != expected_xxh3)
    return Status::Corruption(where + ": its checksum is " + format::Hex16(checksum) +
                              ", but manifest.json records " + format::Hex16(expected_xxh3));
  return Status::OK();
}

std::string WithoutLocalAdvice(std::string m) {
  static const char* const kAdvice = "re-run libshard pack";
  for (size_t at = m.find(kAdvice); at != std::string::npos; at = m.find(kAdvice)) {
    // The clause that carries it: from the "; " before it to the next one (or the end).
    size_t from = m.rfind("; ", at);
    if (from == std::string::npos) from = at;
    size_t to = m.find("; ", at);
    if (to == std::string::npos) to = m.size();
    m.erase(from, to - from);
  }
  return m;
}

}  // namespace libshard::remote
