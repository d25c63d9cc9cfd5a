// Small RAII wrappers over the POSIX file calls the Writer and Dataset make: whole-file reads,
// positioned reads and writes, fsync, atomic replace, mmap. The loader's read path uses
// io/file.h and the engines instead.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/status.h"

namespace libshard::internal {

// An owned file descriptor. Move-only; closes on destruction (errors ignored: call Close() to see
// them). pread/pwrite are safe to call concurrently on one PosixFile.
class PosixFile {
 public:
  PosixFile() = default;
  ~PosixFile();
  PosixFile(PosixFile&& o) noexcept;
  PosixFile& operator=(PosixFile&& o) noexcept;
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  static Result<PosixFile> Open(const std::string& path, int flags, mode_t mode = 0644);

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // Reads exactly n bytes at `offset`; Corruption naming the file and offset when the file ends
  // first, IoError on a failed call.
  [[nodiscard]] Status PReadExact(void* buf, uint64_t n, uint64_t offset) const;
  [[nodiscard]] Status PWriteAll(const void* buf, uint64_t n, uint64_t offset);
  [[nodiscard]] Status Sync();
  [[nodiscard]] Status Truncate(uint64_t size);
  Result<uint64_t> Size() const;
  [[nodiscard]] Status Close();

 private:
  int fd_ = -1;
  std::string path_;
};

// A read-only private mapping of a whole file (an empty file maps to an empty span).
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> Map(const std::string& path);
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(addr_), size_}; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// `dir/name` joined with one '/'.
std::string JoinPath(std::string_view dir, std::string_view name);
bool PathExists(const std::string& path);
[[nodiscard]] Status MakeDirectories(const std::string& dir);
[[nodiscard]] Status SyncDirectory(const std::string& dir);
[[nodiscard]] Status RenameFile(const std::string& from, const std::string& to);
// Removes a file; a missing file is not an error.
[[nodiscard]] Status RemoveFile(const std::string& path);
// Plain names of the entries of `dir`.
Result<std::vector<std::string>> ListDirectory(const std::string& dir);
// Reads a whole file of at most `max_size` bytes.
Result<std::string> ReadWholeFile(const std::string& path, uint64_t max_size);
// Writes `dir/name` via `dir/name.tmp`, fsync (when `sync`) and rename; the directory is not
// fsynced (callers batch that).
[[nodiscard]] Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                         std::string_view data, bool sync);
// Hard-links `from` to `to` when `link` (falling back to a copy when linking fails), else copies.
// `to` must not exist.
[[nodiscard]] Status LinkOrCopyFile(const std::string& from, const std::string& to, bool link,
                                    bool sync);

// A buffer of `size` bytes (rounded up to `alignment`) aligned to `alignment`, or null when the
// allocation fails. Contents are uninitialised.
std::shared_ptr<std::byte[]> AllocateAligned(uint64_t size, uint64_t alignment = 4096);

}  // namespace libshard::internal
