// MergeDatasets: one dataset from several (the `libshard merge` and `pack --part` workflow), and
// JoinParts: the join of the parts a multi-rank write leaves (docs/FORMAT.md §7.1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/caller.h"
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
  // Order the merged samples by their key (Dataset::key, SourceFileInfo::path: a Python
  // `libshard.Writer`'s `key`, pack's source path), compared byte-wise, instead of part order:
  // the result then does not depend on which part holds which sample or in which order the parts
  // are given.
  // Every sample must have a non-empty key, and no key may occur twice across the parts (both
  // are InvalidArgument naming the key and the parts). Samples keep pointing into their own
  // shards. Python `merge(by_key=True)`, `libshard merge --by-key`.
  bool by_key = false;
  // The former name of by_key (either one set orders by key); kept for existing callers.
  bool order_by_source = false;
  // The front end merging: errors give its spelling of what to do (caller.h).
  Caller caller = Caller::kCpp;
  // Parts of one dataset have one identity (identity.h: attributes and schema): parts whose
  // attributes differ are refused (InvalidArgument naming the part, each key and both values).
  // True merges them deliberately; the merged dataset then records only the attributes every
  // part shares (SharedAttributes). Parts of different schemas are refused either way. Python
  // merge(allow_identity_change=True), `libshard merge --allow-identity-change`.
  bool allow_identity_change = false;
};

[[nodiscard]] Status MergeDatasets(const std::string& out_dir, const std::vector<std::string>& parts,
                                   const MergeOptions& options);

// --- Multi-rank writes (docs/FORMAT.md §7.1) -------------------------------------------------
//
// Rank r of W writes its own dataset, the part PartDirectory(out, r, W) =
// `OUT/parts/rank-RRRRR-of-WWWWW/` (a Writer there, any way: libshard.Writer, a C++ generator
// with Writer or ParallelWriter). A rank that ends without a sample says so with MarkPartEmpty.
// When a rank has finished it calls JoinParts(out, W): the last one to finish (whichever it is)
// finds every part finished and joins them into `OUT` itself. Any number of ranks may call it at
// once, and again later: it is idempotent, and it replaces a join made before a part changed.

inline constexpr uint32_t kMaxWorldSize = 99999;  // five digits in a part's name

// `OUT/parts/rank-RRRRR-of-WWWWW` (rank and world size zero-padded to five digits).
std::string PartDirectory(std::string_view out, uint32_t rank, uint32_t world_size);

// Records that rank `rank` of `world_size` finished without a sample (the marker
// `PartDirectory(...).empty`, fsynced), or, with `empty` false, removes that record (a rank that
// writes samples after all). InvalidArgument for rank >= world_size or a world size outside
// 1..kMaxWorldSize.
[[nodiscard]] Status MarkPartEmpty(const std::string& out, uint32_t rank, uint32_t world_size,
                                   bool empty = true);

struct JoinOptions {
  bool link = true;  // hard-link the parts' shards (MergeOptions::link)
  // Join parts of different identities (MergeOptions::allow_identity_change).
  bool allow_identity_change = false;
  Caller caller = Caller::kCpp;  // the front end joining (MergeOptions::caller)
};

struct JoinResult {
  // OUT holds the join of the parts as they are now (made by this call, or found up to date).
  bool joined = false;
  bool already_joined = false;  // found up to date: nothing was written
  uint32_t ranks_finished = 0;  // of world_size: complete parts and empty ranks
  uint32_t parts_joined = 0;    // parts with samples in the join (when joined)
};

// Joins the parts of `out` written by `world_size` ranks into `out`, ordered by key
// (MergeOptions::order_by_source), shards hard-linked: when every rank has finished (a complete
// part, or marked empty) and at least one has samples; otherwise joined = false and nothing is
// written. Serialised by an exclusive lock on `OUT/parts/.join.lock` (waited for, released by the
// kernel if the holder dies). A crash at any point leaves OUT without a manifest or with a
// complete join, never a partial one; the next JoinParts finishes the work. Errors: a key in two
// parts, parts of different schemas or attributes (InvalidArgument, as MergeDatasets), I/O.
Result<JoinResult> JoinParts(const std::string& out, uint32_t world_size,
                             const JoinOptions& options = {});

// What rank `rank` of `world_size` calls before it writes its part (libshard.Writer and capture
// do): removes its `.empty` marker (MarkPartEmpty(..., false)) and, under the join lock, sets
// aside what a run of another world size left, which this run never writes and never joins:
// every part `parts/rank-*-of-VVVVV` (V != world_size) is renamed to `NAME.stale-TIME` (kept,
// never reused; its own lock is taken first, so a part still being written is refused with
// AlreadyExists naming its writer), its `.empty` markers likewise, and its join stamp removed.
// When `out` itself holds one writer's dataset or unfinished write (not a join of parts), which
// the join would replace: InvalidArgument saying so, or with `allow_identity_change` that is set
// aside too (moved to `OUT.stale-TIME/`, `parts/` kept). Returns the paths set aside.
Result<std::vector<std::string>> BeginPart(const std::string& out, uint32_t rank,
                                           uint32_t world_size, bool allow_identity_change = false,
                                           Caller caller = Caller::kCpp);

}  // namespace libshard
