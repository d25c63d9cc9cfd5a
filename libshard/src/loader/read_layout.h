// ReadLayout: which bytes of a sample the loader reads (all stored bytes, or only the selected
// fields' payload range for `fields=` / `max_len`, or with row blocks the extents of a row-range
// read: PlanSliceRead), and how the bytes read become a Sample. Computation over the Dataset's
// index (a row-range read's plan reads the sample's block table, FORMAT.md §3.10); no shard
// I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dataset/slice_plan.h"
#include "libshard/dataset.h"
#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard {

// How a verified loader checks a partial read (FORMAT.md §3.9).
enum class PartialCheck {
  kNone,    // verification off: read only the bytes served
  kFields,  // field checksums: read each served field whole and check its checksum
  kWhole,   // no field checksums: read the whole sample and check the sample checksum
};

// One read of a row-range layout: `length` bytes at `file_offset` of the shard, landing at
// `slot_offset` of the read slot. All three are multiples of 4096.
struct ReadExtent {
  uint64_t file_offset = 0;
  uint64_t length = 0;
  uint64_t slot_offset = 0;
  bool operator==(const ReadExtent&) const = default;
};

struct ReadLayout {
  bool whole = true;         // read every stored byte (compressed, verified, or all fields)
  bool check_fields = false; // partial, to be checked field by field (PartialCheck::kFields)
  uint64_t file_offset = 0;  // where the read starts in the shard; multiple of 4096
  uint64_t read_length = 0;  // bytes to request; multiple of 4096 (may run past EOF)
  uint64_t needed = 0;       // bytes that must arrive (the rest is padding or past EOF)
  // Partial reads: payload range [payload_begin, payload_end) starts `skew` bytes into the slot.
  uint64_t payload_begin = 0;
  uint64_t payload_end = 0;
  uint64_t skew = 0;
  // A row-range read (PlanSliceRead): its plan (dataset/slice_plan.h) and the page-aligned reads
  // of its extents, back to back in the slot in file order (read_length is their sum,
  // file_offset the first one's). Empty for the single-range reads above.
  std::shared_ptr<const internal::SlicePlan> slice;
  std::vector<ReadExtent> extents;
  // Bytes of the decoded (raw) slot the sample needs: raw_size for a compressed sample read as
  // above, the plan's decode buffer for a row-range read, else 0.
  uint64_t decoded_bytes = 0;

  // Where the sub-read at `slot_offset` of the slot (at most `max_length` bytes) reads: within
  // one extent of a row-range read, else at file_offset + slot_offset.
  struct SubRead {
    uint64_t file_offset = 0;
    uint64_t length = 0;
  };
  SubRead SubReadAt(uint64_t slot_offset, uint64_t max_length) const;
  // The slot offset that file offset `file_offset` of a sub-read lands at.
  uint64_t SlotOffsetOf(uint64_t file_offset) const;
  // The ranges of the shard the layout reads, each with where it lands in the slot: the extents
  // of a row-range read, else the one read. What an s3:// dataset's cache fills (and pins) for
  // the read, range by range (docs/CACHE.md): only the blocks that cover them.
  size_t ranges() const { return extents.empty() ? 1 : extents.size(); }
  ReadExtent range(size_t k) const {
    return extents.empty() ? ReadExtent{file_offset, read_length, 0} : extents[k];
  }
};

// `fields`: selected field indices (empty: all). `max_len` > 0: rows kept on each selected
// field's seq_dim. A partial read is planned only for uncompressed samples, and `check` says
// what it must cover: only the bytes served (kNone), each served field whole (kFields), or the
// whole stored extent (kWhole: no partial read).
ReadLayout PlanRead(const Dataset& dataset, uint64_t index, const SampleLocation& location,
                    std::span<const size_t> fields, uint64_t max_len, PartialCheck check);

// A row-range read of sample `index`: rows [rows.start, rows.stop) of the fields with a sequence
// dimension in `fields` (empty: all), the others whole (FORMAT.md §3.10.3), checked as `check`
// says (kFields: every row block or field read is checked; kNone: only the rows are read), as a
// layout of page-aligned reads, merged where they touch; a sample stored with whole-sample zstd,
// or a dataset without field checksums under kWhole, is one read of the whole sample. What the
// sequence-parallel loader reads per rank: its token slice.
Result<ReadLayout> PlanSliceRead(const Dataset& dataset, uint64_t index,
                                 const SampleLocation& location, std::span<const size_t> fields,
                                 RowRange rows, PartialCheck check);
// The Sample of a row-range read: `slot` holds the layout's reads, `decoded` its decode buffer
// (layout.decoded_bytes, 64-byte aligned; null when 0). Checks every byte it serves (as planned)
// and decodes; Corruption naming the shard, the sample, the field and its rows on a mismatch.
Result<Sample> FinishSliceRead(const Dataset& dataset, const SampleLocation& location,
                               const ReadLayout& layout, std::byte* slot, std::byte* decoded,
                               std::shared_ptr<const void> memory);

// Views over decoded payload bytes: `base` holds payload bytes [base_offset, base_offset +
// base_size). With max_len > 0, tensors longer than max_len along seq_dim are cut to max_len rows
// (rows are moved in place when the kept rows are not a contiguous prefix, which needs the whole
// tensor present). Corruption when a selected tensor does not lie in the buffer.
Result<Sample> BuildSample(const Dataset& dataset, uint64_t index, std::byte* base,
                           uint64_t base_offset, uint64_t base_size,
                           std::shared_ptr<const void> memory, std::span<const size_t> fields,
                           uint64_t max_len);

// Sample length after max_len clipping (for token-budget batching).
inline uint64_t ClippedLength(uint64_t length, uint64_t max_len) {
  return max_len > 0 && length > max_len ? max_len : length;
}

}  // namespace libshard
