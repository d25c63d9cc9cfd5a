// SlicePlan: what a row-range read of one sample reads and how it is checked and served
// (FORMAT.md §3.10.3). Made by Dataset::PlanSlice from the index alone (the record, the dims and,
// with row blocks, the sample's block table); the bytes it names are read by the caller
// (Dataset::Read(i, request) with pread, the loader with its engine: loader/read_layout.h) and
// handed to Dataset::FinishSlice, which checks them and makes the Sample. Internal to the
// library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/row_blocks.h"
#include "format/block_table.h"
#include "libshard/sample.h"

namespace libshard::internal {

// One contiguous range of a sample's stored bytes that a row-range read reads.
struct SliceExtent {
  uint64_t offset = 0;  // within the sample's stored bytes (SampleLocation::offset adds the shard's)
  uint64_t size = 0;
  bool operator==(const SliceExtent&) const = default;
};

// How one field is read (FORMAT.md §3.10.3).
enum class SliceMode : uint8_t {
  // The field's stored region, read whole (checked by its field checksum); the rows cut from it.
  kWhole,
  // A raw field: the row blocks covering the rows (checked block by block), or only the rows
  // (verification off); one extent per run of rows.
  kRows,
  // A field under a codec with row blocks: its region's head and the chunks covering the rows
  // (checked chunk by chunk), decoded.
  kCoded,
};

// One field of the read. Its tokens are `outer` runs of `seq` tokens (the dims before seq_dim
// multiply to `outer`; seq = shape[seq_dim]) of `token_bytes` raw bytes each; tokens
// [begin, end) of each run are served. A field without a sequence dimension is one run served
// whole (outer 1, seq = begin... = its rows).
struct FieldSlice {
  size_t field = 0;
  SliceMode mode = SliceMode::kWhole;
  bool check = false;           // verify what is read (field checksum, or blocks)
  uint8_t codec = 0;            // FORMAT.md §4.3.1
  uint64_t region_offset = 0;   // the field's stored region within the stored bytes (§3.8.4)
  uint64_t region_size = 0;
  uint64_t full_nbytes = 0;     // raw bytes of the whole tensor
  uint64_t outer = 1;
  uint64_t seq = 0;
  uint64_t token_bytes = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  Shape shape;                  // the served tensor's shape
  uint64_t nbytes = 0;          // its bytes
  // The plan's extents [first_extent, first_extent + extent_count) are this field's.
  size_t first_extent = 0;
  size_t extent_count = 0;
  // Served from the bytes read (a raw field, rows moved to the start of their extent when not
  // 64-byte aligned), or built at decoded_offset of the decode buffer (decoded chunks, a coded
  // region decoded whole, runs of rows gathered).
  bool in_place = true;
  uint64_t decoded_offset = 0;
  format::FieldBlocks blocks;   // kRows with check, kCoded: the field's blocks (§3.10.2)
  codec::CodedPlaces places;    // kCoded: where the head and the chunks lie in the region
};

struct SlicePlan {
  uint64_t sample = 0;
  uint64_t length = 0;       // the sample's length (Dataset::length)
  RowRange rows;             // the rows served: the request's, clipped to length
  // The whole stored extent is read (extents = {[0, stored_size)}), checked by the sample
  // checksum, decoded when stored compressed, and the rows cut from it: a sample stored with
  // whole-sample zstd, or any sample of a dataset without field checksums when verifying.
  bool whole = false;
  bool check_sample = false;  // whole, and verifying: the sample checksum
  bool decode_whole = false;  // whole and stored compressed (zstd, or field codecs)
  std::vector<SliceExtent> extents;
  std::vector<FieldSlice> fields;  // in the order served
  uint64_t decoded_bytes = 0;      // the decode buffer FinishSlice needs, 64-byte aligned
  // Bytes of the stored extent read: the sum of the extents' sizes.
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const SliceExtent& e : extents) n += e.size;
    return n;
  }
};

}  // namespace libshard::internal
