// Helpers shared by the GoogleTest suites: temporary directories and corruption helpers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace libshard::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  // A fresh directory under `base` (e.g. /dev/shm to test a tmpfs); path() is empty when one
  // cannot be made there, so a test can skip.
  explicit TempDir(const std::filesystem::path& base);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A writable directory on a file system that refuses O_DIRECT (open(2) fails with EINVAL), so
// tests can exercise the "O_DIRECT refused -> buffered reads" fallback for real. It tries, in
// order:
//   1. a fresh directory under /dev/shm, when that tmpfs refuses O_DIRECT (Linux < 6.6);
//   2. as root only, a fresh directory under $TMPDIR (or /tmp) with a ramfs mounted on it
//      (ramfs has no direct I/O support on any kernel so far).
// Each candidate is probed by really opening a file in it with O_DIRECT; nothing is assumed.
// path() is empty when neither works, and why_unavailable() then says why, for GTEST_SKIP.
//
// Cleanup contract: the destructor removes the files, detaches the mount (umount2 MNT_DETACH)
// and removes the directory, so a test that fails an ASSERT leaves nothing behind. For the
// flows that skip destructors (abort, crash, SIGKILL, a ctest timeout) the mount is guarded
// by a small reaper process forked before mounting: it waits on a pipe and, when the pipe hits
// EOF without the "done" byte the destructor sends, detaches the mount and removes the
// directory. So no ramfs mount outlives the test process.
class NoDirectIoDir {
 public:
  NoDirectIoDir();
  ~NoDirectIoDir();
  NoDirectIoDir(const NoDirectIoDir&) = delete;
  NoDirectIoDir& operator=(const NoDirectIoDir&) = delete;

  // The directory; empty when none could be had.
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Why path() is empty (every candidate tried, and why each failed); empty when available.
  const std::string& why_unavailable() const { return why_unavailable_; }
  // Whether path() is a ramfs this object mounted (false for a /dev/shm directory).
  bool mounted() const { return mounted_; }
  // What the directory is, e.g. "ramfs mounted at /tmp/libshard_ramfs_ab12cd" (for messages).
  const std::string& description() const { return description_; }

 private:
  // Tries a ramfs mount; on failure returns why and leaves the object ready for the destructor.
  std::string TryRamfs();
  // Starts the reaper for mount_point_; returns "" or why it could not.
  std::string StartReaper();
  // Tells the reaper the mount is gone (or never existed); it then exits without acting.
  void DismissReaper();

  std::unique_ptr<TempDir> shm_;         // candidate 1, when used
  std::filesystem::path mount_point_;    // candidate 2: our directory (mounted or not)
  bool mounted_ = false;
  int reaper_fd_ = -1;                   // write end of the reaper's pipe; -1 when none
  std::filesystem::path path_;
  std::string why_unavailable_;
  std::string description_;
};

// Whether `dir` is a mount point listed in /proc/self/mounts (exact path match).
bool IsMountPoint(const std::filesystem::path& dir);

// Corruption helpers: each edits a file in place.
void FlipByte(const std::filesystem::path& file, uint64_t offset, uint8_t mask = 0x01);
void TruncateFile(const std::filesystem::path& file, uint64_t new_size);
void WriteBytes(const std::filesystem::path& file, uint64_t offset, const void* data, size_t n);
std::string ReadFileToString(const std::filesystem::path& file);
void WriteStringToFile(const std::filesystem::path& file, const std::string& data);

// Rewrites the dataset in `dir` with an index of version 1 (FORMAT.md §3.1-§3.7) in place of the
// version 2 index writers produce, manifest updated, shards untouched: for the tests of the
// version 1 reader. Throws std::runtime_error on failure.
void RewriteIndexAsV1(const std::filesystem::path& dir);
// Rewrites it with an index of version 3 (field checksums, no row blocks: FORMAT.md §3.9), as
// written before index version 4: for the tests of what readers do with a dataset without row
// blocks. Throws std::runtime_error on failure.
void RewriteIndexAsV3(const std::filesystem::path& dir);

}  // namespace libshard::testing
