#include "testutil/testutil.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace libshard::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/libshard_test_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::TempDir(const std::filesystem::path& base) {
  std::string tmpl = (base / "libshard_test_XXXXXX").string();
  if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

void WriteBytes(const std::filesystem::path& file, uint64_t offset, const void* data, size_t n) {
  int fd = ::open(file.c_str(), O_WRONLY);
  if (fd < 0) throw std::runtime_error("open " + file.string());
  if (::pwrite(fd, data, n, static_cast<off_t>(offset)) != static_cast<ssize_t>(n)) {
    ::close(fd);
    throw std::runtime_error("pwrite " + file.string());
  }
  ::close(fd);
}

void FlipByte(const std::filesystem::path& file, uint64_t offset, uint8_t mask) {
  int fd = ::open(file.c_str(), O_RDWR);
  if (fd < 0) throw std::runtime_error("open " + file.string());
  uint8_t b = 0;
  if (::pread(fd, &b, 1, static_cast<off_t>(offset)) != 1) {
    ::close(fd);
    throw std::runtime_error("pread " + file.string());
  }
  b ^= mask;
  if (::pwrite(fd, &b, 1, static_cast<off_t>(offset)) != 1) {
    ::close(fd);
    throw std::runtime_error("pwrite " + file.string());
  }
  ::close(fd);
}

void TruncateFile(const std::filesystem::path& file, uint64_t new_size) {
  std::filesystem::resize_file(file, new_size);
}

std::string ReadFileToString(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteStringToFile(const std::filesystem::path& file, const std::string& data) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

}  // namespace libshard::testing
