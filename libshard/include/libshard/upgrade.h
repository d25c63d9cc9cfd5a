// UpgradeIndex: rewrites a dataset's index in the newest index version (the `libshard upgrade`
// command).
#pragma once

#include <string>

#include "libshard/caller.h"
#include "libshard/status.h"

namespace libshard {

// Rewrites the index of the dataset in `dir` as the current index version, 3 with field
// checksums (docs/FORMAT.md §3.9, §3.8.8): every sample is read whole and its checksum checked
// (a damaged sample fails the upgrade with a Corruption naming it, and nothing is written), its
// field checksums computed; then, under the dataset lock (dataset_lock.h), the new index is
// written under the name the manifest does not use, then the manifest is committed, then the old
// index removed (§7), so a crash at any point leaves a dataset that opens, old or new. Shard
// files are never touched. Returns true when the index was rewritten, false when it already was
// current. The dataset must open cleanly. Errors give `caller`'s spelling of what to do
// (caller.h).
[[nodiscard]] Result<bool> UpgradeIndex(const std::string& dir, Caller caller = Caller::kCpp);

}  // namespace libshard
