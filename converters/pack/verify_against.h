// `libshard verify --against SRC`: compares a packed sample with the file it came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libshard/dataset.h"
#include "readers/source_file.h"

namespace libshard::convert {

// The quantization error of one lossy field (fp8 codecs, FORMAT.md §4.3.5) in one sample.
struct LossyFieldError {
  std::string field;
  double max_rel = 0;     // max |y - x| / |x| over finite non-zero source values x
  double sum_rel = 0;     // sum of the same, for the mean
  uint64_t count = 0;     // values summed
};

struct VerifyAgainstResult {
  bool source_hash_checked = false;
  bool source_hash_matches = true;  // false: the source file changed since it was packed
  std::vector<LossyFieldError> lossy;  // one per lossy field (codecs 3, 4)
};

// Reads sample `i` of `dataset` (checksum verified) and the source file named by its provenance
// under `source_root`, and checks every field bit for bit: same dtype, shape and bytes (a field
// under a lossy codec: every value within the §4.3.5 error bound, its error reported). The
// sample's metadata must equal the source's. Errors (Corruption) name the sample, the source file,
// the field and the first differing byte offset within the tensor.
Result<VerifyAgainstResult> VerifyAgainstSource(const Dataset& dataset, uint64_t i,
                                                const std::string& source_root,
                                                const SourceOptions& options = {});

}  // namespace libshard::convert
