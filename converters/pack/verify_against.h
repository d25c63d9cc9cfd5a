// `libshard verify --against SRC`: compares a packed sample with the file (or the cache sample)
// it came from.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libshard/dataset.h"
#include "readers/cache_source.h"
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

// What `verify --against SRC` compares with: a directory of source files, or a cache
// (readers/cache_source.h) opened once, whose samples are found by their keys.
class AgainstSource {
 public:
  // Opens `root`; `format` as pack's --from (kAuto: a cache when the directory is one).
  static Result<AgainstSource> Open(const std::string& root,
                                    SourceFormat format = SourceFormat::kAuto,
                                    const SourceOptions& options = {});
  const std::string& root() const { return root_; }
  // Null for a directory of files.
  const CacheSource* cache() const { return cache_.get(); }
  // The source of the sample whose provenance path is `rel`, and how messages name it.
  Result<std::unique_ptr<SourceFile>> OpenSource(const std::string& rel, std::string* where) const;
  // Its provenance content hash (HashFile, or CacheSource::HashSample).
  Result<uint64_t> Hash(const std::string& rel) const;

 private:
  std::string root_;
  SourceOptions options_;
  std::shared_ptr<const CacheSource> cache_;
};

// Reads sample `i` of `dataset` (checksum verified) and its source in `source` (the file named
// by its provenance, or the cache's sample of that key), and checks every field bit for bit:
// same dtype, shape and bytes (a field under a lossy codec: every value within the §4.3.5 error
// bound, its error reported). The sample's metadata must equal the source's. Errors (Corruption)
// name the sample, the source, the field and the first differing byte offset within the tensor.
Result<VerifyAgainstResult> VerifyAgainstSource(const Dataset& dataset, uint64_t i,
                                                const AgainstSource& source);

// The same against a directory of source files (or a cache, detected) opened for this one sample.
// Reads sample `i` of `dataset` (checksum verified) and the source file named by its provenance
// under `source_root`, and checks every field bit for bit: same dtype, shape and bytes (a field
// under a lossy codec: every value within the §4.3.5 error bound, its error reported). The
// sample's metadata must equal the source's. Errors (Corruption) name the sample, the source file,
// the field and the first differing byte offset within the tensor.
Result<VerifyAgainstResult> VerifyAgainstSource(const Dataset& dataset, uint64_t i,
                                                const std::string& source_root,
                                                const SourceOptions& options = {});

}  // namespace libshard::convert
