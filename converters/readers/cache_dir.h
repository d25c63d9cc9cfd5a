// The files of a cache directory (a DeepSpec target cache, a NeMo AutoModel offline cache, a
// TorchSpec offline folder: readers/cache_source.h), as the cache readers see them: named by
// '/'-separated relative paths that its manifest gives, so every name is untrusted.
//
// LocalCacheDir opens them beneath the directory and follows no symlink on the way
// (FileByteSource::OpenBeneath): a manifest cannot make pack read outside the cache, nor open a
// FIFO or a device. MemoryCacheDir serves the same interface from memory (fuzz targets, tests).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libshard/status.h"
#include "readers/byte_source.h"

namespace libshard::convert {

struct CacheFileInfo {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

// Thread-safe: every call may run concurrently with any other.
class CacheDir {
 public:
  virtual ~CacheDir() = default;
  // The directory, for messages and provenance.
  virtual const std::string& path() const = 0;
  // Opens `rel` for reading. NotFound when it does not exist; InvalidArgument when `rel` is not a
  // plain relative path (IsPlainRelativePath), a component is a symlink, or it is not a regular
  // file.
  virtual Result<std::unique_ptr<ByteSource>> Open(const std::string& rel) const = 0;
  // Size and modification time of `rel`, with the same checks as Open.
  virtual Result<CacheFileInfo> Stat(const std::string& rel) const = 0;
  // The names directly in the directory (no "." or ".."), unsorted.
  virtual Result<std::vector<std::string>> List() const = 0;
  // Whether `rel` names an entry of any kind (a symlink counts; nothing is followed).
  virtual bool Exists(const std::string& rel) const = 0;
  // "DIR/rel", for messages.
  std::string Name(const std::string& rel) const { return path() + "/" + rel; }
};

class LocalCacheDir final : public CacheDir {
 public:
  // Opens the directory `path` (a symlink to a directory is accepted here: the user named it).
  static Result<std::unique_ptr<LocalCacheDir>> OpenDir(const std::string& path);
  ~LocalCacheDir() override;
  LocalCacheDir(const LocalCacheDir&) = delete;
  LocalCacheDir& operator=(const LocalCacheDir&) = delete;

  const std::string& path() const override { return path_; }
  Result<std::unique_ptr<ByteSource>> Open(const std::string& rel) const override;
  Result<CacheFileInfo> Stat(const std::string& rel) const override;
  Result<std::vector<std::string>> List() const override;
  bool Exists(const std::string& rel) const override;

 private:
  LocalCacheDir(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Files held in memory, by relative path. Stat gives mtime 0.
class MemoryCacheDir final : public CacheDir {
 public:
  explicit MemoryCacheDir(std::string path) : path_(std::move(path)) {}
  void Add(const std::string& rel, std::vector<std::byte> bytes) { files_[rel] = std::move(bytes); }

  const std::string& path() const override { return path_; }
  Result<std::unique_ptr<ByteSource>> Open(const std::string& rel) const override;
  Result<CacheFileInfo> Stat(const std::string& rel) const override;
  Result<std::vector<std::string>> List() const override;
  bool Exists(const std::string& rel) const override { return files_.count(rel) != 0; }

 private:
  std::string path_;
  std::map<std::string, std::vector<std::byte>> files_;
};

}  // namespace libshard::convert
