// Random-access bytes of one source: a file read with pread, or an owned in-memory buffer (an
// inflated gzip). Readers parse through this so the same parser serves both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/status.h"

namespace libshard::convert {

// Thread-safe for concurrent ReadAt calls once constructed.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Fills all of dst from [offset, offset + dst.size()); a range past size() is Corruption
  // ("truncated"), naming `what` (the record being read) and the offset.
  virtual Status ReadAt(uint64_t offset, std::span<std::byte> dst, std::string_view what) const = 0;
  // The path, for messages.
  virtual const std::string& name() const = 0;
};

// Reads a file with pread. Owns the descriptor (closed on destruction; read-only, so close
// cannot lose data).
class FileByteSource final : public ByteSource {
 public:
  // Opens without blocking (O_NONBLOCK: a FIFO put where a sample file was would otherwise hang
  // open() until a writer appears) and refuses with InvalidArgument anything that is not a
  // regular file once opened (FIFO, socket, device; also behind a symlink), naming the path.
  static Result<std::unique_ptr<FileByteSource>> Open(const std::string& path);
  // Opens `rel` (a '/'-separated relative path, checked by IsPlainRelativePath) beneath the
  // directory `dirfd` without following a symlink in any of its components (each one is opened
  // with O_NOFOLLOW), with the same checks as Open. Messages name the file as `display`. For the
  // files that a cache's manifest names (readers/cache_dir.h): a manifest cannot make pack read
  // outside its directory.
  static Result<std::unique_ptr<FileByteSource>> OpenBeneath(int dirfd, const std::string& rel,
                                                             const std::string& display);
  ~FileByteSource() override;
  FileByteSource(const FileByteSource&) = delete;
  FileByteSource& operator=(const FileByteSource&) = delete;

  uint64_t size() const override { return size_; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst, std::string_view what) const override;
  const std::string& name() const override { return path_; }
  int fd() const { return fd_; }

 private:
  // Takes `fd` (closed on every path) and refuses anything but a regular file.
  static Result<std::unique_ptr<FileByteSource>> Adopt(std::string path, int fd);
  FileByteSource(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_;
  uint64_t size_;
};

// Anonymous memory that grows in place with mremap: growing never copies, so holding n bytes
// costs n bytes (plus one growth step) at every moment, never the 2n..3n of vector doubling.
// Move-only owner of the mapping (unmapped on destruction).
class GrowableBuffer {
 public:
  GrowableBuffer() = default;
  ~GrowableBuffer();
  GrowableBuffer(GrowableBuffer&& other) noexcept;
  GrowableBuffer& operator=(GrowableBuffer&& other) noexcept;
  GrowableBuffer(const GrowableBuffer&) = delete;
  GrowableBuffer& operator=(const GrowableBuffer&) = delete;

  // Makes size() == n (new bytes are zero; shrinking releases the tail). ResourceExhausted when
  // the kernel refuses the memory; the buffer is then unchanged.
  Status Resize(uint64_t n);
  uint64_t size() const { return size_; }
  std::byte* data() { return static_cast<std::byte*>(addr_); }
  const std::byte* data() const { return static_cast<const std::byte*>(addr_); }
  std::span<const std::byte> bytes() const { return {data(), static_cast<size_t>(size_)}; }

 private:
  void* addr_ = nullptr;
  uint64_t size_ = 0;     // bytes in use
  uint64_t mapped_ = 0;   // bytes mapped (size_ rounded up to pages)
};

// Serves bytes from an owned buffer.
class MemoryByteSource final : public ByteSource {
 public:
  MemoryByteSource(std::string name, std::vector<std::byte> data)
      : name_(std::move(name)), vector_(std::move(data)), data_(vector_) {}
  MemoryByteSource(std::string name, GrowableBuffer data)
      : name_(std::move(name)), mapped_(std::move(data)), data_(mapped_.bytes()) {}
  uint64_t size() const override { return data_.size(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst, std::string_view what) const override;
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  std::vector<std::byte> vector_;  // one of the two owners holds the bytes
  GrowableBuffer mapped_;
  std::span<const std::byte> data_;
};

// Inflates the gzip file `path` (one or more concatenated members, inflated to their
// concatenation as `gzip -d` does) into memory, reading it in chunks. The output grows in steps
// of at most kGzipGrowStep and never past max_bytes + 1, so a zip bomb costs at most max_bytes
// (+ one step) of memory; it is refused with ResourceExhausted naming the file and
// `--max-decompressed` as soon as the output passes max_bytes.
inline constexpr uint64_t kGzipGrowStep = uint64_t{64} << 20;
// Messages name the limit as `limit_name` (SourceOptions::max_decompressed_name).
Result<GrowableBuffer> InflateGzipFile(
    const std::string& path, uint64_t max_bytes,
    std::string_view limit_name = "SourceOptions::max_decompressed_bytes");
// The same from bytes already open (messages name src.name()).
Result<GrowableBuffer> InflateGzip(
    const ByteSource& src, uint64_t max_bytes,
    std::string_view limit_name = "SourceOptions::max_decompressed_bytes");

// True for a non-empty '/'-separated relative path of at most 4096 bytes whose every component is
// non-empty and neither "." nor "..", with no NUL byte: a path that stays beneath its directory.
bool IsPlainRelativePath(std::string_view rel);

}  // namespace libshard::convert
