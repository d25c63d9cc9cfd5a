// libFuzzer target for the binary index (FORMAT.md §3), every version. Versions 2 to 4 (§3.8,
// §3.9, §3.10): Index::ParseHeader, Parse and ParseBlock of every block, every accessor on what
// they accept, every sample's block table (Index::CheckTable; with checksums recomputed, the
// table parser behind it: ParseBlockTable), and a round trip through EncodeIndex (merge, append and upgrade re-encode parsed
// indexes, so whatever the parser accepts must encode to an index it accepts again). Version 1
// (read only, format/legacy/): IndexV1View::Parse, every accessor on what it accepts, and what
// `libshard upgrade` does with it (EncodeIndex, parsed again).
//
// Input: one flag byte, then the index. Flag bit 0 clear: the checksums (§3.6; for version 2 the
// head, lengths and block checksums, §3.8.2) are recomputed so mutations get past them to the
// checks behind them; set: the bytes are parsed as they are.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "format/block_table.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index.h"
#include "format/legacy/index_v1.h"
#include "format/metadata_codec.h"

namespace {

using namespace libshard;

// Fixes the block, lengths and head checksums of a version 2 index whose parts ParseHeader
// located, so that mutations reach the checks behind them.
void ResealV2(std::vector<std::byte>& bytes, const format::IndexLayout& layout) {
  const uint64_t size = bytes.size();
  if (layout.lengths_offset + layout.lengths_size > size) return;
  format::PutU64(bytes.data() + format::kHeaderLengthsChecksum,
                 format::Xxh3(bytes.data() + layout.lengths_offset, layout.lengths_size));
  const uint64_t n = format::GetU64(bytes.data() + format::kHeaderSampleCount);
  const uint64_t b = format::GetU32(bytes.data() + format::kHeaderBlockSamples);
  const uint64_t k = (n + b - 1) / b;
  const uint64_t f = format::GetU32(bytes.data() + format::kHeaderFieldCount);
  const uint64_t s = format::GetU32(bytes.data() + format::kHeaderShardCount);
  const uint64_t d = format::GetU32(bytes.data() + format::kHeaderDimsPerSample);
  const uint64_t dir = format::kIndexHeaderSize + 32 * f + 16 * d + 40 * s;
  // Version 4 (§3.10.1): the last block ends where the tables part starts.
  const uint64_t last_end =
      format::GetU32(bytes.data() + format::kHeaderVersion) >= format::kIndexVersion4
          ? format::GetU64(bytes.data() + format::kHeaderTablesOffset)
          : size;
  for (uint64_t j = 0; j < k; ++j) {
    std::byte* e = bytes.data() + dir + 16 * j;
    const uint64_t begin = format::GetU64(e);
    const uint64_t end = j + 1 < k ? format::GetU64(e + 16) : last_end;
    if (begin <= end && end <= size)
      format::PutU64(e + 8, format::Xxh3(bytes.data() + begin, end - begin));
  }
  format::PutU64(bytes.data() + format::kIndexChecksumOffset,
                 format::Xxh3WithHole({bytes.data(), layout.head_size},
                                      format::kIndexChecksumOffset));
}

// Parses an index this libshard encoded, every block included; traps when any part is refused
// or the sample count differs.
void ParseWholeOrTrap(const std::string& again, uint64_t sample_count) {
  std::vector<std::byte> a(reinterpret_cast<const std::byte*>(again.data()),
                           reinterpret_cast<const std::byte*>(again.data()) + again.size());
  auto l2 = format::Index::ParseHeader({a.data(), format::kIndexHeaderSize}, a.size(), "again");
  if (!l2.ok()) __builtin_trap();
  auto v2 = format::Index::Parse(
      std::vector<std::byte>(a.begin(), a.begin() + l2->head_size),
      std::vector<std::byte>(a.begin() + l2->lengths_offset,
                             a.begin() + l2->lengths_offset + l2->lengths_size),
      a.size(), "again");
  if (!v2.ok() || v2->sample_count() != sample_count) __builtin_trap();
  for (uint64_t b = 0; b < v2->block_count(); ++b) {
    const uint64_t off = v2->block_offset(b), size = v2->block_size(b);
    if (!v2->ParseBlock(b, std::vector<std::byte>(a.begin() + off, a.begin() + off + size)).ok())
      __builtin_trap();
  }
}

int FuzzV2(std::vector<std::byte>& bytes, bool reseal) {
  auto layout = format::Index::ParseHeader({bytes.data(), format::kIndexHeaderSize},
                                             bytes.size(), "fuzz.lsi");
  if (!layout.ok()) return 0;
  if (reseal) ResealV2(bytes, *layout);
  std::vector<std::byte> head(bytes.begin(), bytes.begin() + layout->head_size);
  std::vector<std::byte> lengths(bytes.begin() + layout->lengths_offset,
                                 bytes.begin() + layout->lengths_offset + layout->lengths_size);
  auto v = format::Index::Parse(std::move(head), std::move(lengths), bytes.size(), "fuzz.lsi");
  if (!v.ok()) return 0;
  std::vector<format::IndexSample> samples;
  bool all_blocks = true;
  for (uint64_t b = 0; b < v->block_count(); ++b) {
    const uint64_t off = v->block_offset(b), size = v->block_size(b);
    auto block = v->ParseBlock(b, std::vector<std::byte>(bytes.begin() + off,
                                                         bytes.begin() + off + size));
    if (!block.ok()) {
      all_blocks = false;
      continue;
    }
    for (uint64_t i = block->first(); i < block->first() + block->count(); ++i) {
      samples.push_back(v->Entry(*block, i));
      Metadata m;
      if (!format::DecodeMetadata(v->Metadata(*block, i), &m).ok()) __builtin_trap();
      if (samples.back().dims.size() != v->dims_per_sample()) __builtin_trap();
      if (samples.back().record.length != v->length(i)) __builtin_trap();
      if (!v->has_block_tables()) continue;
      // §3.10: the table's range was checked with its record, so it lies in the file.
      const format::Index::TableRef ref = v->Table(*block, i);
      if (ref.offset + ref.size > bytes.size()) __builtin_trap();
      const std::span<const std::byte> tbytes(bytes.data() + ref.offset, ref.size);
      const format::IndexSample& s = samples.back();
      auto table = v->CheckTable(i, ref, tbytes, s.dims, s.record.flags);
      if (!table.ok() && table.status().code() != StatusCode::kCorruption) __builtin_trap();
      if (reseal) {  // past the table checksum, to the parser behind it
        std::vector<uint16_t> codecs;
        for (const format::FieldCodec& c : v->codecs()) codecs.push_back(c.codec);
        (void)format::ParseBlockTable(tbytes, format::SampleFieldRows(v->schema(), s.dims, codecs),
                                      (s.record.flags & format::kFlagZstd) != 0);
      }
      if (table.ok()) {
        samples.back().block_table = format::EncodeBlockTable(*table);
        if (*samples.back().block_table != std::string(reinterpret_cast<const char*>(tbytes.data()),
                                                       tbytes.size()))
          __builtin_trap();  // the encoding is canonical
      }
    }
  }
  if (!all_blocks) return 0;
  std::vector<format::IndexShard> shards = v->shards();
  const std::string again =
      format::EncodeIndex(v->schema(), shards, samples, v->codecs(), v->block_samples());
  ParseWholeOrTrap(again, v->sample_count());
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1),
                               reinterpret_cast<const std::byte*>(data + size));
  if (bytes.size() >= format::kIndexHeaderSize &&
      format::GetU32(bytes.data() + format::kHeaderVersion) != format::kIndexVersion1)
    return FuzzV2(bytes, (flags & 1) == 0);
  if ((flags & 1) == 0 && bytes.size() >= format::kIndexHeaderSize)
    format::PutU64(bytes.data() + format::kIndexChecksumOffset,
                   format::Xxh3WithHole(bytes, format::kIndexChecksumOffset));
  auto v = format::legacy::IndexV1View::Parse(bytes, "fuzz.lsi");
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
  // What `libshard upgrade` does: re-encode as the current index, which must parse again.
  ParseWholeOrTrap(format::EncodeIndex(v->schema(), v->shards(), samples), v->sample_count());
  return 0;
}
