// Row blocks of a stored field (FORMAT.md §3.10): the libshard writer's block size, a field's
// blocks computed from its stored bytes (what the writer and `libshard upgrade` record in a
// sample's block table), and where the head and the chunks of a coded field lie, from the index
// alone, for a reader of some of its rows. The table's bytes are format/block_table.h's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/field_codec.h"
#include "format/block_table.h"
#include "libshard/status.h"

namespace libshard::codec {

// The raw bytes of a block the libshard writer aims at: format::kRowBlockBytes, unless a test
// lowered it (process-wide) to give small samples several blocks.
uint64_t WriterRowBlockBytes();
// Sets WriterRowBlockBytes() for its lifetime (tests; not thread-safe against running writers).
class ScopedWriterRowBlockBytes {
 public:
  explicit ScopedWriterRowBlockBytes(uint64_t bytes);
  ~ScopedWriterRowBlockBytes();
  ScopedWriterRowBlockBytes(const ScopedWriterRowBlockBytes&) = delete;
  ScopedWriterRowBlockBytes& operator=(const ScopedWriterRowBlockBytes&) = delete;

 private:
  uint64_t previous_;
};

// The rows of a block the libshard writer gives a field of `rows` rows of `row_bytes` raw bytes
// each (§3.10.5): max(1, floor(target_bytes / row_bytes)), or 0 when that would make a single
// block (or the rows hold no bytes).
uint32_t WriterBlockRows(uint64_t rows, uint64_t row_bytes,
                         uint64_t target_bytes = WriterRowBlockBytes());

// The blocks of a raw field whose bytes are `tensor` (rows of g.row_bytes() bytes), with
// `block_rows` rows each (0: none): the checksum of each block (§3.10.2).
format::FieldBlocks RawFieldBlocks(std::span<const std::byte> tensor, const format::FieldRows& g,
                                   uint32_t block_rows);

// The blocks of a field stored under codec `id` whose region is `region`: its chunks, with
// block_rows its chunk_rows when it has at least two chunks (0 otherwise), the head's checksum
// and each chunk's coded size and checksum (§3.10.2). Corruption when the region does not parse.
Result<format::FieldBlocks> CodedFieldBlocks(std::span<const std::byte> region, CodecId id,
                                             const FieldGeometry& g);

// Where the parts of a coded field with blocks lie within its region of `region_size` bytes,
// from the index alone (§3.10.2): the head [0, head_size) and chunk c at
// [chunk_offset[c], chunk_offset[c + 1]).
struct CodedPlaces {
  uint64_t head_size = 0;
  std::vector<uint64_t> chunk_offset;  // n + 1 values, the last region_size
};
// Checks that the table's coded sizes leave a head of 32 + 8n bytes (+ row_elems for a codec
// that may carry a channel base table) before the chunks. Corruption otherwise.
Result<CodedPlaces> PlaceCodedBlocks(CodecId id, const FieldGeometry& g, uint64_t region_size,
                                     const format::FieldBlocks& blocks);

}  // namespace libshard::codec
