// Helpers shared by the GoogleTest suites: temporary directories and corruption helpers.
#pragma once

#include <cstdint>
#include <filesystem>
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

// Corruption helpers: each edits a file in place.
void FlipByte(const std::filesystem::path& file, uint64_t offset, uint8_t mask = 0x01);
void TruncateFile(const std::filesystem::path& file, uint64_t new_size);
void WriteBytes(const std::filesystem::path& file, uint64_t offset, const void* data, size_t n);
std::string ReadFileToString(const std::filesystem::path& file);
void WriteStringToFile(const std::filesystem::path& file, const std::string& data);

}  // namespace libshard::testing
