// `libshard verify --against SRC`: compares a packed sample with the file it came from.
#pragma once

#include <cstdint>
#include <string>

#include "libshard/dataset.h"
#include "readers/source_file.h"

namespace libshard::convert {

struct VerifyAgainstResult {
  bool source_hash_checked = false;
  bool source_hash_matches = true;  // false: the source file changed since it was packed
};

// Reads sample `i` of `dataset` (checksum verified) and the source file named by its provenance
// under `source_root`, and checks every field bit for bit: same dtype, shape and bytes. The
// sample's metadata must equal the source's. Errors (Corruption) name the sample, the source file,
// the field and the first differing byte offset within the tensor.
Result<VerifyAgainstResult> VerifyAgainstSource(const Dataset& dataset, uint64_t i,
                                                const std::string& source_root,
                                                const SourceOptions& options = {});

}  // namespace libshard::convert
