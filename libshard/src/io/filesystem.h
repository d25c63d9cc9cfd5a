// File-system helpers the Writer and Dataset use: paths, directories, whole-file reads, atomic
// replace, links and copies, mmap. Open files are io::File (io/file.h).
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

// 64 random bits from getrandom(2), never 0 (shard uids, FORMAT.md §4.1).
Result<uint64_t> RandomNonZeroU64();

// A buffer of `size` bytes (rounded up to `alignment`) aligned to `alignment`, or null when the
// allocation fails. Contents are uninitialised.
std::shared_ptr<std::byte[]> AllocateAligned(uint64_t size, uint64_t alignment = 4096);

}  // namespace libshard::internal
