// libFuzzer target for the binary index (FORMAT.md §3): IndexView::Parse, every accessor on what
// it accepts, and a round trip through EncodeIndex (merge and append re-encode parsed indexes, so
// whatever Parse accepts must encode to an index that Parse accepts again).
//
// Input: one flag byte, then the index. Flag bit 0 clear: the checksum (§3.6) is recomputed so
// mutations get past it to the checks behind it; set: the bytes are parsed as they are.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index_format.h"
#include "format/metadata_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1),
                               reinterpret_cast<const std::byte*>(data + size));
  if ((flags & 1) == 0 && bytes.size() >= format::kIndexHeaderSize)
    format::PutU64(bytes.data() + format::kIndexChecksumOffset,
                   format::Xxh3WithHole(bytes, format::kIndexChecksumOffset));
  auto v = format::IndexView::Parse(bytes, "fuzz.lsi");
  if (!v.ok()) return 0;

  std::vector<format::IndexSample> samples;
  samples.reserve(v->sample_count());
  for (uint64_t i = 0; i < v->sample_count(); ++i) {
    samples.push_back(v->Entry(i));
    Metadata m;
    if (!format::DecodeMetadata(v->metadata_bytes(i), &m).ok()) __builtin_trap();
    for (size_t f = 0; f < v->schema().fields.size(); ++f) {
      if (v->shape(i, f).size() != v->schema().fields[f].rank) __builtin_trap();
      (void)v->tensor_offset(i, f);
      (void)v->tensor_nbytes(i, f);
    }
    (void)v->source_path(i);
  }
  const std::string again = format::EncodeIndex(v->schema(), v->shards(), samples);
  auto reparsed = format::IndexView::Parse(
      {reinterpret_cast<const std::byte*>(again.data()), again.size()}, "fuzz-again.lsi");
  if (!reparsed.ok() || reparsed->sample_count() != v->sample_count()) __builtin_trap();
  return 0;
}
