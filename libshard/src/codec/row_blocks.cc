// Row blocks of a stored field (row_blocks.h): FORMAT.md §3.10.2, §3.10.5.
#include "codec/row_blocks.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <string>

#include "format/bytes.h"
#include "format/checksum.h"

namespace libshard::codec {
namespace {
std::atomic<uint64_t> g_row_block_bytes{format::kRowBlockBytes};
}  // namespace

uint64_t WriterRowBlockBytes() { return g_row_block_bytes.load(std::memory_order_relaxed); }

ScopedWriterRowBlockBytes::ScopedWriterRowBlockBytes(uint64_t bytes)
    : previous_(g_row_block_bytes.exchange(std::max<uint64_t>(bytes, 1))) {}
ScopedWriterRowBlockBytes::~ScopedWriterRowBlockBytes() { g_row_block_bytes.store(previous_); }

uint32_t WriterBlockRows(uint64_t rows, uint64_t row_bytes, uint64_t target_bytes) {
  if (row_bytes == 0 || rows < 2) return 0;
  const uint64_t block_rows = std::max<uint64_t>(1, target_bytes / row_bytes);
  if (block_rows >= rows) return 0;  // one block: the field checksum covers it
  return static_cast<uint32_t>(
      std::min<uint64_t>(block_rows, std::numeric_limits<uint32_t>::max()));
}

format::FieldBlocks RawFieldBlocks(std::span<const std::byte> tensor, const format::FieldRows& g,
                                   uint32_t block_rows) {
  format::FieldBlocks out;
  out.block_rows = block_rows;
  if (block_rows == 0) return out;
  const uint64_t row_bytes = g.row_bytes();
  const uint64_t n = format::BlockCount(g.rows, block_rows);
  out.checksums.resize(n);
  for (uint64_t b = 0; b < n; ++b) {
    const uint64_t begin = b * block_rows * row_bytes;
    const uint64_t end = std::min(g.rows, (b + 1) * block_rows) * row_bytes;
    out.checksums[b] =
        static_cast<uint32_t>(format::FieldChecksum(tensor.data() + begin, end - begin));
  }
  return out;
}

Result<format::FieldBlocks> CodedFieldBlocks(std::span<const std::byte> region, CodecId id,
                                             const FieldGeometry& g) {
  LIBSHARD_ASSIGN_OR_RETURN(RegionInfo info, ParseRegion(region, id, g));
  format::FieldBlocks out;
  if (info.chunk_count < 2) return out;
  out.block_rows = info.chunk_rows;
  out.head_checksum =
      static_cast<uint32_t>(format::FieldChecksum(region.data(), info.chunks_offset));
  for (const ChunkPlace& c : ChunkPlaces(region, info, g)) {
    out.coded_sizes.push_back(c.coded_size);
    out.checksums.push_back(
        static_cast<uint32_t>(format::FieldChecksum(region.data() + c.offset, c.size)));
  }
  return out;
}

Result<CodedPlaces> PlaceCodedBlocks(CodecId id, const FieldGeometry& g, uint64_t region_size,
                                     const format::FieldBlocks& blocks) {
  const uint64_t n = blocks.blocks();
  const uint64_t fixed_row = FixedRowBytes(id, g);
  CodedPlaces p;
  p.chunk_offset.resize(n + 1);
  // The chunks' bytes, back from the region's end (every term bounded: rows from the dims, coded
  // sizes u32, n <= rows).
  uint64_t chunks = 0;
  for (uint64_t c = 0; c < n; ++c) {
    const uint64_t rc = std::min<uint64_t>(blocks.block_rows, g.rows - c * blocks.block_rows);
    uint64_t size = 0;
    if (!format::CheckedMul(rc, fixed_row, &size) ||
        !format::CheckedAdd(size, blocks.coded_sizes[c], &size) ||
        !format::CheckedAdd(chunks, size, &chunks))
      return Status::Corruption("block table: chunk sizes overflow");
  }
  const uint64_t table = kRegionHeaderSize + kChunkEntrySize * n;
  if (chunks > region_size)
    return Status::Corruption("block table: the chunks' " + std::to_string(chunks) +
                              " bytes exceed the region's " + std::to_string(region_size));
  p.head_size = region_size - chunks;
  if (p.head_size != table && !(MayHaveChannelBase(id) && p.head_size == table + g.row_elems))
    return Status::Corruption("block table: the chunks' sizes leave a head of " +
                              std::to_string(p.head_size) + " bytes before the chunks; a head of " +
                              std::to_string(n) + " chunks is " + std::to_string(table) +
                              " bytes" +
                              (MayHaveChannelBase(id)
                                   ? " or " + std::to_string(table + g.row_elems) +
                                         " with a channel base table"
                                   : std::string()));
  uint64_t pos = p.head_size;
  for (uint64_t c = 0; c < n; ++c) {
    p.chunk_offset[c] = pos;
    const uint64_t rc = std::min<uint64_t>(blocks.block_rows, g.rows - c * blocks.block_rows);
    pos += rc * fixed_row + blocks.coded_sizes[c];
  }
  p.chunk_offset[n] = pos;
  return p;
}

}  // namespace libshard::codec
