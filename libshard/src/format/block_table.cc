// A sample's block table (block_table.h): FORMAT.md §3.10.2.
#include "format/block_table.h"

#include <algorithm>

#include "format/bytes.h"
#include "format/checksum.h"
#include "libshard/dtype.h"

namespace libshard::format {

bool BlockTable::empty() const {
  return std::all_of(fields.begin(), fields.end(),
                     [](const FieldBlocks& f) { return f.block_rows == 0; });
}

std::vector<FieldRows> SampleFieldRows(const Schema& schema, std::span<const uint64_t> dims,
                                       std::span<const uint16_t> codecs) {
  std::vector<FieldRows> out(schema.fields.size());
  size_t j = 0;
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const Field& field = schema.fields[f];
    FieldRows& r = out[f];
    r.rows = 1;
    r.row_elems = 1;
    r.dtype_size = static_cast<uint32_t>(DTypeSize(field.dtype));
    r.coded = f < codecs.size() && codecs[f] != 0;
    const size_t split = field.rank == 0 ? 0 : static_cast<size_t>(std::max(field.seq_dim, 0)) + 1;
    for (size_t d = 0; d < field.rank; ++d) (d < split ? r.rows : r.row_elems) *= dims[j + d];
    j += field.rank;
  }
  return out;
}

std::string EncodeBlockTable(const BlockTable& table) {
  if (table.empty()) return {};
  std::string out;
  ByteWriter w(&out);
  for (const FieldBlocks& f : table.fields) {
    w.U32(f.block_rows);
    if (f.block_rows == 0) continue;
    if (f.coded_sizes.empty()) {
      for (uint32_t c : f.checksums) w.U32(c);
    } else {
      w.U32(f.head_checksum);
      for (size_t c = 0; c < f.checksums.size(); ++c) {
        w.U32(f.coded_sizes[c]);
        w.U32(f.checksums[c]);
      }
    }
  }
  return out;
}

Result<BlockTable> ParseBlockTable(std::span<const std::byte> bytes,
                                   std::span<const FieldRows> fields, bool whole_sample_zstd) {
  BlockTable t;
  t.fields.resize(fields.size());
  if (bytes.empty()) return t;
  if (bytes.size() % 4 != 0 || bytes.size() > kMaxBlockTableBytes)
    return Status::Corruption("block table of " + std::to_string(bytes.size()) +
                              " bytes is not a whole number of words within the limit");
  if (whole_sample_zstd)
    return Status::Corruption("a sample stored with whole-sample zstd has a block table");
  ByteReader r(bytes.data(), bytes.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    const FieldRows& g = fields[f];
    FieldBlocks& out = t.fields[f];
    const std::string which = "block table: field " + std::to_string(f) + ": ";
    if (!r.U32(&out.block_rows))
      return Status::Corruption(which + "the table ends before its block_rows");
    if (out.block_rows == 0) continue;
    if (out.block_rows >= g.rows || g.row_elems == 0)
      return Status::Corruption(which + "block_rows " + std::to_string(out.block_rows) +
                                " does not split its " + std::to_string(g.rows) + " rows of " +
                                std::to_string(g.row_elems) + " elements into blocks");
    const uint64_t n = BlockCount(g.rows, out.block_rows);
    // The words left bound n before anything is allocated (n >= 2 here).
    const uint64_t words = g.coded ? 1 + 2 * n : n;
    if (words > r.remaining() / 4)
      return Status::Corruption(which + std::to_string(n) + " blocks need " +
                                std::to_string(words) + " words; the table holds " +
                                std::to_string(r.remaining() / 4) + " more");
    out.checksums.resize(n);
    if (g.coded) {
      out.coded_sizes.resize(n);
      (void)r.U32(&out.head_checksum);
      for (uint64_t c = 0; c < n; ++c) (void)(r.U32(&out.coded_sizes[c]) && r.U32(&out.checksums[c]));
    } else {
      for (uint64_t c = 0; c < n; ++c) (void)r.U32(&out.checksums[c]);
    }
  }
  if (r.remaining() != 0)
    return Status::Corruption("block table holds " + std::to_string(r.remaining()) +
                              " bytes past its last field's words");
  if (t.empty()) return Status::Corruption("block table without a field with blocks");
  return t;
}

uint64_t BlockTableChecksum(std::span<const std::byte> bytes) {
  return FieldChecksum(bytes.data(), bytes.size());
}

}  // namespace libshard::format
