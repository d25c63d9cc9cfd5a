// ReadLayout: which bytes of a sample the loader reads (all stored bytes, or only the selected
// fields' payload range for `fields=` / `max_len`), and how the bytes read become a Sample.
// Pure computation over the Dataset's index; no I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

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
};

// `fields`: selected field indices (empty: all). `max_len` > 0: rows kept on each selected
// field's seq_dim. A partial read is planned only for uncompressed samples, and `check` says
// what it must cover: only the bytes served (kNone), each served field whole (kFields), or the
// whole stored extent (kWhole: no partial read).
ReadLayout PlanRead(const Dataset& dataset, uint64_t index, const SampleLocation& location,
                    std::span<const size_t> fields, uint64_t max_len, PartialCheck check);

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
