// Tests for io::File: ownership, O_DIRECT probing and fallback, full positional reads; and the
// cleanup contract of testing::NoDirectIoDir, which the fallback tests rely on.
#include "io/file.h"
#include "io/direct_io.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
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

TEST(FileTest, WriteReadExactSyncAndTruncate) {
  testing::TempDir dir;
  const std::string path = (dir / "w").string();
  Result<File> f = File::Open(path, O_RDWR | O_CREAT | O_EXCL);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::string data = RandomBytes(20000, 7);
  ASSERT_TRUE(f->PWriteAll(data.data(), data.size(), 100).ok());
  ASSERT_TRUE(f->Sync().ok());
  EXPECT_EQ(*f->Size(), 20100u);
  std::string back(data.size(), '\0');
  ASSERT_TRUE(f->PReadExact(back.data(), back.size(), 100).ok());
  EXPECT_EQ(back, data);
  // The gap before the first write reads as zeros.
  std::string head(100, 'x');
  ASSERT_TRUE(f->PReadExact(head.data(), head.size(), 0).ok());
  EXPECT_EQ(head, std::string(100, '\0'));
  ASSERT_TRUE(f->Truncate(4096).ok());
  EXPECT_EQ(*f->Size(), 4096u);
  // Past the end: Corruption naming the file, the offset and how much was there.
  Status short_read = f->PReadExact(back.data(), 5000, 0);
  EXPECT_EQ(short_read.code(), StatusCode::kCorruption);
  EXPECT_NE(short_read.message().find(path), std::string::npos) << short_read.ToString();
  EXPECT_NE(short_read.message().find("4096 of 5000"), std::string::npos) << short_read.ToString();
  // A created file gets mode 0644 (before the umask): its owner can read and write it.
  const fs::perms perms = fs::status(path).permissions();
  EXPECT_NE(perms & fs::perms::owner_read, fs::perms::none);
  EXPECT_NE(perms & fs::perms::owner_write, fs::perms::none);
  EXPECT_TRUE(f->Close().ok());
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
  Result<OpenedFile> f = OpenForReading((dir.path() / "a").string(), IoMode::kAuto);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  if (f->direct) {
    EXPECT_GE(f->offset_align, 1u);
    EXPECT_LE(f->offset_align, 4096u);
    EXPECT_NE(::fcntl(f->file.fd(), F_GETFL) & O_DIRECT, 0);
    EXPECT_EQ(f->fallback, "");
  } else {
    EXPECT_FALSE(f->fallback.empty());
  }
  // kBuffered never asks for O_DIRECT, and says so.
  Result<OpenedFile> b = OpenForReading((dir.path() / "a").string(), IoMode::kBuffered);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(b->direct);
  EXPECT_EQ(::fcntl(b->file.fd(), F_GETFL) & O_DIRECT, 0);
  EXPECT_EQ(b->fallback, "buffered reads requested");
}

// The automatic fallback, on a file system that really refuses O_DIRECT (tmpfs before Linux
// 6.6, else a ramfs we mount; skipped only when neither can be had, e.g. unprivileged).
TEST(FileTest, FileSystemRefusingDirectFallsBackToBuffered) {
  testing::NoDirectIoDir dir;
  if (dir.path().empty()) GTEST_SKIP() << dir.why_unavailable();
  // Not a multiple of 4096: buffered reads have no alignment rules, so an odd size and offset
  // must read exactly.
  const std::string data = RandomBytes(3 * 4096 + 123, 3);
  const std::string path = (dir / "a").string();
  testing::WriteStringToFile(path, data);
  ASSERT_EQ(testing::ReadFileToString(path), data);

  Result<OpenedFile> opened = OpenForReading(path, IoMode::kAuto);
  ASSERT_TRUE(opened.ok()) << dir.description() << ": " << opened.status().ToString();
  EXPECT_FALSE(opened->direct) << dir.description();
  File* f = &opened->file;
  EXPECT_EQ(::fcntl(f->fd(), F_GETFL) & O_DIRECT, 0) << "opened with O_DIRECT on "
                                                      << dir.description();
  EXPECT_NE(opened->fallback.find(path), std::string::npos) << opened->fallback;
  EXPECT_NE(opened->fallback.find("refuses O_DIRECT"), std::string::npos) << opened->fallback;
  EXPECT_NE(opened->fallback.find("buffered"), std::string::npos) << opened->fallback;

  std::string buf(data.size(), '\0');
  Result<uint64_t> n = f->PReadFull(buf.data(), data.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  EXPECT_TRUE(buf == data) << "buffered read differs from the written bytes";
  n = f->PReadFull(buf.data(), data.size() - 1001, 1001);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size() - 1001);
  EXPECT_TRUE(buf.compare(0, *n, data, 1001, *n) == 0) << "unaligned read at 1001 differs";

  Result<OpenedFile> strict = OpenForReading(path, IoMode::kDirect);
  ASSERT_FALSE(strict.ok()) << "IoMode::kDirect succeeded on " << dir.description();
  EXPECT_EQ(strict.status().code(), StatusCode::kUnsupported) << strict.status().ToString();
  EXPECT_NE(strict.status().message().find("refuses it"), std::string::npos)
      << strict.status().ToString();
  EXPECT_NE(strict.status().message().find(path), std::string::npos)
      << strict.status().ToString();
  // io/ names no loader option: that context is the loader's to add.
  EXPECT_EQ(strict.status().message().find("io_mode"), std::string::npos)
      << strict.status().ToString();
  EXPECT_EQ(strict.status().message().find("LIBSHARD_"), std::string::npos)
      << strict.status().ToString();

  // Writing: the same decision, and writes land whole.
  const std::string out = (dir / "w").string();
  Result<OpenedFile> w = OpenForWriting(out, IoMode::kAuto, Disposition::kCreateTruncate);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE(w->direct) << dir.description();
  EXPECT_NE(w->fallback.find("refuses O_DIRECT"), std::string::npos) << w->fallback;
  const std::string block = RandomBytes(8192, 4);
  ASSERT_TRUE(WriteWithFallback(&*w, block.data(), block.size(), 0).ok());
  ASSERT_TRUE(w->file.Close().ok());
  EXPECT_TRUE(testing::ReadFileToString(out) == block);
  Result<OpenedFile> wstrict = OpenForWriting(out, IoMode::kDirect, Disposition::kExisting);
  ASSERT_FALSE(wstrict.ok());
  EXPECT_EQ(wstrict.status().code(), StatusCode::kUnsupported) << wstrict.status().ToString();
}

// Why `dir` mounted nothing, for skipping the cleanup tests below.
std::string NoMountReason(const testing::NoDirectIoDir& dir) {
  return dir.path().empty() ? dir.why_unavailable() : dir.description() + " needs no mount";
}

// NoDirectIoDir's cleanup contract, for the ramfs it mounts: the destructor removes the mount
// and the directory, and when the process dies without running destructors the reaper does.
TEST(NoDirectIoDirTest, DestructorRemovesTheMount) {
  fs::path mount_point;
  {
    testing::NoDirectIoDir dir;
    if (!dir.mounted()) GTEST_SKIP() << NoMountReason(dir);
    mount_point = dir.path();
    testing::WriteStringToFile(dir / "a", "x");
    ASSERT_TRUE(testing::IsMountPoint(mount_point));
  }
  EXPECT_FALSE(testing::IsMountPoint(mount_point)) << mount_point;
  EXPECT_FALSE(fs::exists(mount_point)) << mount_point;
}

TEST(NoDirectIoDirDeathTest, MountIsRemovedWhenTheProcessAborts) {
  {
    testing::NoDirectIoDir probe;
    if (!probe.mounted()) GTEST_SKIP() << NoMountReason(probe);
  }
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  // "fast" death tests (the default) fork at EXPECT_DEATH, so the child inherits the pipe.
  // The child mounts, reports the mount point through the pipe and aborts: no destructor runs.
  EXPECT_DEATH(
      {
        ::close(fds[0]);
        testing::NoDirectIoDir dir;
        // Reports nothing unless the mount really exists, so the test cannot pass vacuously.
        const std::string p =
            (testing::IsMountPoint(dir.path()) ? dir.path().string() : std::string()) + "\n";
        (void)!::write(fds[1], p.data(), p.size());
        std::abort();
      },
      "");
  ::close(fds[1]);
  std::string reported;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') reported += c;
  ::close(fds[0]);
  ASSERT_FALSE(reported.empty()) << "the child mounted nothing";
  const fs::path mount_point = reported;
  // The reaper acts as soon as the pipe's write end is gone: normally within milliseconds; the
  // 20 s bound is for a loaded machine.
  for (int i = 0; i < 2000 && (testing::IsMountPoint(mount_point) || fs::exists(mount_point));
       ++i) {
    ::usleep(10 * 1000);
  }
  EXPECT_FALSE(testing::IsMountPoint(mount_point)) << mount_point << " still mounted";
  EXPECT_FALSE(fs::exists(mount_point)) << mount_point << " still exists";
}

}  // namespace
}  // namespace libshard::io
