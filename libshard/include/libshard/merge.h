// MergeDatasets: one dataset from several (the `libshard merge` and `pack --part` workflow).
#pragma once

#include <string>
#include <vector>

#include "libshard/status.h"

namespace libshard {

// Builds a dataset in `out_dir` (created if missing; must not already hold a dataset or a journal)
// whose samples are the samples of `parts`, in the given part order and, within a part, in the
// part's order. Every part must open cleanly and have the same schema. Shard files are
// hard-linked into `out_dir` when `link` is true (falling back to a copy when linking fails, e.g.
// across file systems) and copied otherwise; only the index and the manifest are new
// (docs/FORMAT.md §7). Sample bytes are not re-read or re-checksummed. The parts are left intact.
// `out_dir` is locked (dataset_lock.h) from before it is inspected until the commit: a second
// writer of it fails at once with AlreadyExists.
[[nodiscard]] Status MergeDatasets(const std::string& out_dir, const std::vector<std::string>& parts,
                                   bool link = true);

struct MergeOptions {
  bool link = true;  // as above
  // Order the merged samples by their key (Provenance::path: a Python `libshard.Writer`'s `key`,
  // pack's source path; Dataset::key), compared byte-wise, instead of part order: the result then
  // does not depend on which part holds which sample or in which order the parts are given.
  // Every sample must have a non-empty key, and no key may occur twice across the parts (both
  // are InvalidArgument naming the key and the parts). Samples keep pointing into their own
  // shards. Python `merge(by_key=True)`, `libshard merge --by-key`.
  bool by_key = false;
  // The former name of by_key (either one set orders by key); kept for existing callers.
  bool order_by_source = false;
};

[[nodiscard]] Status MergeDatasets(const std::string& out_dir, const std::vector<std::string>& parts,
                                   const MergeOptions& options);

}  // namespace libshard
