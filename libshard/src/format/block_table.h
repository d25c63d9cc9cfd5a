// A sample's block table (FORMAT.md §3.10.2): per field, the row blocks of a field stored raw (a
// checksum per block) or the chunks of a field under a codec (the region head's checksum, then
// each chunk's coded size and checksum), so that a reader of rows [a, b) checks every byte it
// serves while reading only the blocks covering them. Bytes only: the encoder, the parser (which
// checks a table against the sample's row geometry before any value of it is used) and the
// arithmetic of blocks; where a codec chunk lies follows from codec/row_blocks.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::format {

// The largest block table a reader accepts (FORMAT.md §5).
inline constexpr uint64_t kMaxBlockTableBytes = uint64_t{1} << 30;
// Raw bytes of rows in a block of the libshard writer (FORMAT.md §3.10.5).
inline constexpr uint64_t kRowBlockBytes = uint64_t{1} << 20;

// One field's blocks (§3.10.2). block_rows 0: none (the field is checked whole).
struct FieldBlocks {
  uint32_t block_rows = 0;
  uint32_t head_checksum = 0;         // a field under a codec: its region head's checksum
  std::vector<uint32_t> checksums;    // per block (per chunk for a field under a codec)
  std::vector<uint32_t> coded_sizes;  // a field under a codec: per chunk, its coded_size
  uint64_t blocks() const { return checksums.size(); }
  bool operator==(const FieldBlocks&) const = default;
};

// Every field's blocks, in schema order.
struct BlockTable {
  std::vector<FieldBlocks> fields;
  // True when no field has blocks (the table is then not written: table_size 0).
  bool empty() const;
  bool operator==(const BlockTable&) const = default;
};

// A field's row geometry (FORMAT.md §4.3.1), what a table is checked against.
struct FieldRows {
  uint64_t rows = 0;       // product of the dims up to and including seq_dim (dim 0 when -1)
  uint64_t row_elems = 0;  // product of the other dims
  uint32_t dtype_size = 0;
  bool coded = false;      // the field is stored under a codec (1..6)
  uint64_t row_bytes() const { return row_elems * dtype_size; }
};

// The row geometry of every field of a sample whose dims are `dims` (which ComputeLayout
// accepted, so no product overflows); `codecs` empty (every field raw) or one per field.
std::vector<FieldRows> SampleFieldRows(const Schema& schema, std::span<const uint64_t> dims,
                                       std::span<const uint16_t> codecs);

// ceil(rows / block_rows); 0 when block_rows is 0.
inline uint64_t BlockCount(uint64_t rows, uint32_t block_rows) {
  return block_rows == 0 ? 0 : (rows + block_rows - 1) / block_rows;
}

// The table's bytes (§3.10.2): u32 words, fields in order; "" when every block_rows is 0.
// Precondition: one FieldBlocks per field, each with block_rows 0 or blocks() = BlockCount and,
// for a coded field, as many coded sizes.
std::string EncodeBlockTable(const BlockTable& table);

// Parses and checks `bytes` (a sample's table, its checksum already checked) against the fields'
// geometry: sizes, block_rows in 1..rows-1 (row_elems >= 1), the word count, and every block_rows 0
// for a whole-sample zstd sample. An empty `bytes` is the table without blocks. Corruption
// saying which field and what is wrong (the caller names the file and the sample).
Result<BlockTable> ParseBlockTable(std::span<const std::byte> bytes,
                                   std::span<const FieldRows> fields, bool whole_sample_zstd);

// The table checksum (§3.10.1): the low 32 bits of the xxh3 of the table's bytes.
uint64_t BlockTableChecksum(std::span<const std::byte> bytes);

}  // namespace libshard::format
