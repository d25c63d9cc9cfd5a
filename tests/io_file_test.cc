// Tests for io::File: ownership, O_DIRECT probing and fallback, full positional reads.
#include "io/file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "testutil/testutil.h"

namespace libshard::io {
namespace {

namespace fs = std::filesystem;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(FileTest, OpenMissingFileIsNotFoundNamingThePath) {
  Result<File> f = File::Open("/nonexistent/libshard/x", O_RDONLY);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("/nonexistent/libshard/x"), std::string::npos);
}

TEST(FileTest, MoveTransfersOwnershipAndCloseIsIdempotent) {
  testing::TempDir dir;
  testing::WriteStringToFile(dir / "a", "hello");
  Result<File> f = File::Open((dir / "a").string(), O_RDONLY);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const int fd = f->fd();
  File moved = std::move(f).value();
  EXPECT_EQ(moved.fd(), fd);
  File other;
  other = std::move(moved);
  EXPECT_FALSE(moved.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  ASSERT_TRUE(other.valid());
  EXPECT_TRUE(other.Close().ok());
  EXPECT_TRUE(other.Close().ok());
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // the descriptor is really closed
}

TEST(FileTest, PReadFullStopsAtEndOfFile) {
  testing::TempDir dir;
  const std::string data = RandomBytes(10000, 1);
  testing::WriteStringToFile(dir / "a", data);
  Result<File> f = File::Open((dir / "a").string(), O_RDONLY);
  ASSERT_TRUE(f.ok());
  std::string buf(8192, '\0');
  Result<uint64_t> n = f->PReadFull(buf.data(), 8192, 5000);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5000u);
  EXPECT_EQ(buf.substr(0, 5000), data.substr(5000));
  EXPECT_EQ(*f->Size(), 10000u);
}

TEST(FileTest, DirectOnRealDiskOrCleanFallback) {
  testing::TempDir dir("/var/tmp");
  ASSERT_FALSE(dir.path().empty());
  testing::WriteStringToFile(dir.path() / "a", RandomBytes(8192, 2));
  DirectIoInfo info;
  Result<File> f = File::OpenForReading((dir.path() / "a").string(), true, false, &info);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  if (info.direct) {
    EXPECT_GE(info.offset_align, 1u);
    EXPECT_LE(info.offset_align, 4096u);
    EXPECT_NE(::fcntl(f->fd(), F_GETFL) & O_DIRECT, 0);
  } else {
    EXPECT_FALSE(info.reason.empty());
  }
}

TEST(FileTest, TmpfsRefusesDirectAndFallsBackToBuffered) {
  testing::TempDir dir("/dev/shm");
  if (dir.path().empty()) GTEST_SKIP() << "no /dev/shm";
  testing::WriteStringToFile(dir.path() / "a", RandomBytes(4096, 3));
  const std::string path = (dir.path() / "a").string();
  DirectIoInfo info;
  Result<File> f = File::OpenForReading(path, true, false, &info);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  if (info.direct) GTEST_SKIP() << "this tmpfs accepts O_DIRECT (Linux >= 6.6)";
  EXPECT_EQ(::fcntl(f->fd(), F_GETFL) & O_DIRECT, 0);
  EXPECT_NE(info.reason.find(path), std::string::npos);
  Result<File> strict = File::OpenForReading(path, true, true, &info);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(strict.status().message().find("buffered"), std::string::npos);
}

}  // namespace
}  // namespace libshard::io
