// libFuzzer target for the small fixed-layout parsers of dataset bytes: per-sample metadata
// (FORMAT.md §3.4) and the shard header (§4.1).
//
// Input: one selector byte, then the bytes. Selector bit 0 clear: metadata; decoding then
// encoding must give the same bytes back (the codec is canonical) for non-empty metadata. Set: shard header; selector
// bit 1 clear recomputes the header checksum (bytes 4088..4095) so mutations reach the checks
// behind it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/metadata_codec.h"
#include "format/shard_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1),
                               reinterpret_cast<const std::byte*>(data + size));
  if ((selector & 1) == 0) {
    Metadata m;
    if (!format::DecodeMetadata(bytes, &m).ok() || m.empty()) return 0;
    std::string again;
    if (!format::EncodeMetadata(m, &again).ok() ||
        again != std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()))
      __builtin_trap();
    return 0;
  }
  if ((selector & 2) == 0 && bytes.size() == format::kShardHeaderSize)
    format::PutU64(bytes.data() + 4088, format::Xxh3WithHole(bytes, 4088));
  (void)format::CheckShardHeader(bytes, "fuzz.lss");
  return 0;
}
