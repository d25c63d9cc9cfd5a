// Random-access bytes of one source: a file read with pread, or an owned in-memory buffer (an
// inflated gzip). Readers parse through this so the same parser serves both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
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
  // The whole content when it is in memory (gzip sources), else an empty span.
  virtual std::span<const std::byte> InMemory() const { return {}; }
  // The path, for messages.
  virtual const std::string& name() const = 0;
};

// Reads a file with pread. Owns the descriptor (closed on destruction; read-only, so close
// cannot lose data).
class FileByteSource final : public ByteSource {
 public:
  static Result<std::unique_ptr<FileByteSource>> Open(const std::string& path);
  ~FileByteSource() override;
  FileByteSource(const FileByteSource&) = delete;
  FileByteSource& operator=(const FileByteSource&) = delete;

  uint64_t size() const override { return size_; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst, std::string_view what) const override;
  const std::string& name() const override { return path_; }

 private:
  FileByteSource(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_;
  uint64_t size_;
};

// Serves bytes from an owned buffer.
class MemoryByteSource final : public ByteSource {
 public:
  MemoryByteSource(std::string name, std::vector<std::byte> data)
      : name_(std::move(name)), data_(std::move(data)) {}
  uint64_t size() const override { return data_.size(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst, std::string_view what) const override;
  std::span<const std::byte> InMemory() const override { return data_; }
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  std::vector<std::byte> data_;
};

// Inflates the gzip file `path` (one or more concatenated members) into memory, reading it in
// chunks. Refuses with ResourceExhausted as soon as the output would pass max_bytes, so a
// zip bomb costs at most max_bytes of memory.
Result<std::vector<std::byte>> InflateGzipFile(const std::string& path, uint64_t max_bytes);

}  // namespace libshard::convert
