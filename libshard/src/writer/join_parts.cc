// PartDirectory, MarkPartEmpty, JoinParts (libshard/merge.h; FORMAT.md §7.1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "format/journal.h"
#include "format/manifest.h"
#include "io/file.h"
#include "io/file_lock.h"
#include "io/filesystem.h"
#include "storage/storage_driver.h"
#include "libshard/checksum.h"
#include "libshard/dataset_lock.h"
#include "libshard/merge.h"
#include "writer/identity_check.h"

namespace libshard {
namespace {

constexpr char kPartsDir[] = "parts";
constexpr char kEmptySuffix[] = ".empty";
constexpr char kJoinLock[] = ".join.lock";
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;

std::string Padded(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%05u", v);
  return buf;
}

Status CheckRank(uint32_t rank, uint32_t world_size) {
  if (world_size == 0 || world_size > kMaxWorldSize)
    return Status::InvalidArgument("world size " + std::to_string(world_size) +
                                   " is out of range; use 1.." + std::to_string(kMaxWorldSize));
  if (rank >= world_size)
    return Status::InvalidArgument("rank " + std::to_string(rank) +
                                   " is not below the world size " + std::to_string(world_size));
  return Status::OK();
}

bool HasJournal(const std::string& dir) {
  return internal::PathExists(internal::JoinPath(dir, format::kJournalName));
}
// A rank's part is complete once its Writer committed and removed its journal (FORMAT.md §2.3).
bool PartComplete(const std::string& dir) {
  return internal::PathExists(internal::JoinPath(dir, format::kManifestName)) && !HasJournal(dir);
}
bool PartEmpty(const std::string& dir) {
  return internal::PathExists(dir + kEmptySuffix) && !HasJournal(dir);
}

// The join lock, waited for: ranks finishing at once queue here (a dead holder's lock is
// released by the kernel, so no lock is ever stale).
Result<io::FileLock> AcquireJoinLock(const std::string& path) {
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    Result<io::FileLock> lock = io::FileLock::TryAcquire(path);
    if (lock.ok() || !io::FileLock::IsBusy(lock.status())) return lock;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

// "xxh3:HEX" of the parts' manifests, in rank order, each followed by a NUL: what the stamp
// records, so a join is redone exactly when a part was committed again.
Result<std::string> ManifestsDigest(const std::vector<std::string>& parts) {
  Xxh3Stream h;
  for (const std::string& p : parts) {
    LIBSHARD_ASSIGN_OR_RETURN(
        std::string text,
        internal::ReadWholeFile(internal::JoinPath(p, format::kManifestName), kMaxManifestBytes));
    h.Update(text.data(), text.size());
    h.Update("", 1);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "xxh3:%016llx", static_cast<unsigned long long>(h.Digest()));
  return std::string(buf);
}

std::string StampName(uint32_t world_size) { return ".joined-of-" + Padded(world_size); }

// The world size of a part's name, "rank-RRRRR-of-WWWWW" (a part) or "rank-RRRRR-of-WWWWW.empty"
// (a marker; `*marker` set), with R < W; 0 for any other name (a part set aside included).
uint32_t PartWorldSize(std::string_view name, bool* marker) {
  *marker = name.ends_with(kEmptySuffix);
  if (*marker) name.remove_suffix(std::string_view(kEmptySuffix).size());
  if (name.size() != 19 || !name.starts_with("rank-") || name.substr(10, 4) != "-of-") return 0;
  uint32_t rank = 0, world = 0;
  for (size_t k = 5; k < 10; ++k) {
    if (name[k] < '0' || name[k] > '9') return 0;
    rank = rank * 10 + static_cast<uint32_t>(name[k] - '0');
  }
  for (size_t k = 14; k < 19; ++k) {
    if (name[k] < '0' || name[k] > '9') return 0;
    world = world * 10 + static_cast<uint32_t>(name[k] - '0');
  }
  return rank < world ? world : 0;
}

}  // namespace

std::string PartDirectory(std::string_view out, uint32_t rank, uint32_t world_size) {
  return internal::JoinPath(internal::JoinPath(out, kPartsDir),
                            "rank-" + Padded(rank) + "-of-" + Padded(world_size));
}

Status MarkPartEmpty(const std::string& out, uint32_t rank, uint32_t world_size, bool empty) {
  LIBSHARD_RETURN_IF_ERROR(CheckRank(rank, world_size));
  const std::string parts = internal::JoinPath(out, kPartsDir);
  const std::string marker = PartDirectory(out, rank, world_size) + kEmptySuffix;
  if (!empty) {
    if (!internal::PathExists(marker)) return Status::OK();
    LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(marker));
    return internal::SyncDirectory(parts);
  }
  LIBSHARD_RETURN_IF_ERROR(internal::MakeDirectories(parts));
  const std::string name = marker.substr(parts.size() + 1);
  LIBSHARD_RETURN_IF_ERROR(internal::WriteFileAtomically(parts, name, "", /*sync=*/true));
  return internal::SyncDirectory(parts);
}

Result<JoinResult> JoinParts(const std::string& out, uint32_t world_size,
                             const JoinOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(CheckRank(0, world_size));
  {
    LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                              storage::OpenStorage(out));
    if (!driver->info().local_files)
      return storage::NeedsLocalFiles(*driver, "parts are joined locally",
                                      "a write of several ranks joins its parts through local "
                                      "files next to them")
          .WithContext("join");
  }
  const std::string parts_root = internal::JoinPath(out, kPartsDir);
  LIBSHARD_RETURN_IF_ERROR(internal::MakeDirectories(parts_root));
  LIBSHARD_ASSIGN_OR_RETURN(io::FileLock lock,
                            AcquireJoinLock(internal::JoinPath(parts_root, kJoinLock)));

  JoinResult result;
  std::vector<std::string> with_samples;
  for (uint32_t r = 0; r < world_size; ++r) {
    const std::string dir = PartDirectory(out, r, world_size);
    if (PartComplete(dir)) {
      with_samples.push_back(dir);
      ++result.ranks_finished;
    } else if (PartEmpty(dir)) {
      ++result.ranks_finished;
    }
  }
  if (result.ranks_finished < world_size || with_samples.empty()) return result;

  LIBSHARD_ASSIGN_OR_RETURN(std::string digest, ManifestsDigest(with_samples));
  const std::string manifest = internal::JoinPath(out, format::kManifestName);
  const std::string stamp_name = StampName(world_size);
  const std::string stamp = internal::JoinPath(parts_root, stamp_name);
  if (internal::PathExists(manifest)) {
    Result<std::string> recorded = internal::ReadWholeFile(stamp, 4096);
    if (recorded.ok() && *recorded == digest + "\n") {
      result.joined = result.already_joined = true;
      result.parts_joined = static_cast<uint32_t>(with_samples.size());
      return result;
    }
    // A join of older parts (or one whose stamp a crash lost): OUT stops being a dataset here
    // and is one again at the new join's commit, never a mix of the two.
    LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(manifest));
    LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(out));
  }
  LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(stamp));
  MergeOptions merge;
  merge.link = options.link;
  merge.order_by_source = true;
  merge.allow_identity_change = options.allow_identity_change;
  merge.caller = options.caller;
  LIBSHARD_RETURN_IF_ERROR(MergeDatasets(out, with_samples, merge).WithContext("join of " + out));
  LIBSHARD_RETURN_IF_ERROR(
      internal::WriteFileAtomically(parts_root, stamp_name, digest + "\n", /*sync=*/true));
  LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(parts_root));
  result.joined = true;
  result.parts_joined = static_cast<uint32_t>(with_samples.size());
  return result;
}

Result<std::vector<std::string>> BeginPart(const std::string& out, uint32_t rank,
                                           uint32_t world_size, bool allow_identity_change,
                                           Caller caller) {
  LIBSHARD_RETURN_IF_ERROR(CheckRank(rank, world_size));
  const std::string parts_root = internal::JoinPath(out, kPartsDir);
  LIBSHARD_RETURN_IF_ERROR(internal::MakeDirectories(parts_root));
  // Under the join lock: ranks starting at once set aside one after the other (the first does
  // it), and no join runs meanwhile.
  LIBSHARD_ASSIGN_OR_RETURN(io::FileLock join_lock,
                            AcquireJoinLock(internal::JoinPath(parts_root, kJoinLock)));
  std::vector<std::string> set_aside;
  LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::string> names, internal::ListDirectory(parts_root));
  std::sort(names.begin(), names.end());
  // Whether `out` is (or is being made) the join of parts: parts/ holds parts (set aside ones
  // too) or a join stamp.
  bool joined = false;
  for (const std::string& name : names) {
    const std::string path = internal::JoinPath(parts_root, name);
    if (name.starts_with(".joined-of-")) {
      joined = true;
      // The stamp of another world size's join: a digest, not data.
      if (name != StampName(world_size)) LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(path));
      continue;
    }
    joined = joined || name.starts_with("rank-");
    bool marker = false;
    const uint32_t world = PartWorldSize(name, &marker);
    if (world == 0 || world == world_size) continue;
    // A part of a run of another world size: set aside whole, once no one writes it.
    std::shared_ptr<const DatasetLock> part_lock;
    if (!marker) {
      auto lock = DatasetLock::Acquire(path, /*create_directory=*/false, caller);
      if (!lock.ok())
        return lock.status().WithContext(
            "a write of " + std::to_string(world_size) + " ranks found " + path +
            " of a write of " + std::to_string(world) +
            " ranks, which it would set aside; stop that write first");
      part_lock = std::move(*lock);
    }
    LIBSHARD_ASSIGN_OR_RETURN(std::string moved, writer_internal::RenameAside(path));
    set_aside.push_back(std::move(moved));
  }
  // `out` itself: the join of parts, or nothing yet. One writer's dataset or unfinished write
  // there would be replaced by this write's join.
  const bool has_manifest = internal::PathExists(internal::JoinPath(out, format::kManifestName));
  const bool has_journal = internal::PathExists(internal::JoinPath(out, format::kJournalName));
  if (has_journal || (has_manifest && !joined)) {
    const std::string what = has_journal ? "an unfinished write of one writer"
                                         : "a dataset written by one writer";
    if (!allow_identity_change)
      return Status::InvalidArgument(
          out + " holds " + what + " (not a join of parts); a write of " +
          std::to_string(world_size) + " ranks there would replace it when it joins its parts. "
          "Write to another directory, continue that write with one writer, or pass " +
          (caller == Caller::kCli      ? std::string("--allow-identity-change")
           : caller == Caller::kPython ? std::string("allow_identity_change=True")
                                       : std::string("allow_identity_change")) +
          " to set it aside (moved to " + out + ".stale-TIME, kept)");
    auto lock = DatasetLock::Acquire(out, /*create_directory=*/false, caller);
    if (!lock.ok()) return lock.status();
    LIBSHARD_ASSIGN_OR_RETURN(std::string moved,
                              writer_internal::SetAsideEntries(out, {std::string(kPartsDir)}));
    set_aside.push_back(std::move(moved));
  }
  if (!set_aside.empty()) LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(parts_root));
  LIBSHARD_RETURN_IF_ERROR(MarkPartEmpty(out, rank, world_size, /*empty=*/false));
  return set_aside;
}

}  // namespace libshard
