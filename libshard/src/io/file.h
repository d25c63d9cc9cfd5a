// File: the move-only owner of one POSIX file descriptor, for every file libshard opens: the
// loader's shards, the Writer's shards and journal, the Dataset's index (system calls only; no
// libshard format knowledge). Positioned reads and writes are safe to call concurrently on one
// File. Close() reports the error of close(2); the destructor closes silently. Whether a dataset
// file is opened with O_DIRECT is decided by OpenForReading / OpenForWriting (io/direct_io.h).
#pragma once

#include <cstdint>
#include <string>

#include "libshard/status.h"

namespace libshard::io {

class File {
 public:
  File() = default;
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  // open(2) with O_CLOEXEC added; `mode` applies when `flags` create the file. Errors name the
  // path. Unless `flags` has O_DIRECTORY, the path must be a regular file: a FIFO, device or
  // socket is refused with InvalidArgument without blocking (the open is made with O_NONBLOCK,
  // which is cleared again unless `flags` asked for it), so hostile directory entries can never
  // hang a reader or writer.
  static Result<File> Open(const std::string& path, int flags, int mode = 0644);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Size in bytes from fstat(2).
  Result<uint64_t> Size() const;

  // Reads exactly `length` bytes at `offset` unless EOF comes first; returns the bytes read.
  // Retries EINTR/EAGAIN and continues after short reads.
  Result<uint64_t> PReadFull(void* dst, uint64_t length, uint64_t offset) const;
  // Reads exactly `length` bytes at `offset`: Corruption naming the file and offset when the file
  // ends first, IoError on a failed call.
  [[nodiscard]] Status PReadExact(void* dst, uint64_t length, uint64_t offset) const;
  // Writes all `length` bytes at `offset`, continuing after short writes.
  [[nodiscard]] Status PWriteAll(const void* src, uint64_t length, uint64_t offset);
  [[nodiscard]] Status Sync();
  [[nodiscard]] Status Truncate(uint64_t size);
  // Frees the blocks of [offset, offset + length), keeping the size (reads there return zeros);
  // EOPNOTSUPP where the file system cannot. Needs a descriptor open for writing.
  [[nodiscard]] Status PunchHole(uint64_t offset, uint64_t length);

  // posix_fadvise(POSIX_FADV_RANDOM): reads of this descriptor read what they ask for and no
  // kernel read-ahead beyond it (a buffered read of a token slice would otherwise bring in up to
  // read_ahead_kb more after each of its extents). Advice only: a file system that ignores it
  // changes nothing, so nothing is reported.
  void AdviseRandomAccess() const;

  // Closes the descriptor; reports close(2) failure. Idempotent.
  Status Close();

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace libshard::io
