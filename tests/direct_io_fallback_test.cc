// O_DIRECT alignment from statx(STATX_DIOALIGN) and the buffered fallback where O_DIRECT is
// refused at open or at the first read (io/direct_io.h), on the test's own temporary directory
// (a tmpfs at /dev/shm where there is one) with LIBSHARD_IO_REFUSE_DIRECT standing in for a
// file system that refuses.
#include "io/direct_io.h"

#include <fcntl.h>
#include <linux/stat.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace libshard::io {
namespace {

namespace fs = std::filesystem;

class DirectIoFallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir_ = base / ("libshard_dio_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "f.bin").string();
    std::ofstream(path_, std::ios::binary) << std::string(3 * 4096, 'z');
    ::unsetenv("LIBSHARD_IO_REFUSE_DIRECT");
  }
  void TearDown() override {
    ::unsetenv("LIBSHARD_IO_REFUSE_DIRECT");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
  std::string path_;
};

TEST_F(DirectIoFallbackTest, AlignmentIsTheKernelsWhereItSaysSo) {
  Result<OpenedFile> f = OpenForReading(path_, IoMode::kAuto);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  if (!f->direct) GTEST_SKIP() << "O_DIRECT refused here: " << f->fallback;
  struct statx stx {};
  const bool kernel_says =
      ::syscall(SYS_statx, f->file.fd(), "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_mem_align != 0;
  if (kernel_says) {
    EXPECT_EQ(f->align_source, "statx");
    EXPECT_EQ(f->memory_align, stx.stx_dio_mem_align);
    EXPECT_EQ(f->offset_align, stx.stx_dio_offset_align);
  } else {
    EXPECT_EQ(f->align_source, "default");
    EXPECT_EQ(f->memory_align, 4096u);
    EXPECT_EQ(f->offset_align, 4096u);
  }
  // A caller whose buffers are aligned to less than the device needs reads buffered.
  if (f->offset_align > 1 || f->memory_align > 1) {
    Result<OpenedFile> small = OpenForReading(path_, IoMode::kAuto, 1);
    ASSERT_TRUE(small.ok());
    EXPECT_FALSE(small->direct);
    EXPECT_NE(small->fallback.find("alignment"), std::string::npos) << small->fallback;
  }
}

TEST_F(DirectIoFallbackTest, RefusedAtOpenReadsBuffered) {
  ::setenv("LIBSHARD_IO_REFUSE_DIRECT", "open", 1);
  Result<OpenedFile> f = OpenForReading(path_, IoMode::kAuto);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_FALSE(f->direct);
  EXPECT_NE(f->fallback.find("refuses O_DIRECT"), std::string::npos) << f->fallback;
  EXPECT_NE(f->fallback.find(path_), std::string::npos) << f->fallback;
  char buf[16];
  ASSERT_TRUE(f->file.PReadExact(buf, sizeof(buf), 5).ok());
  EXPECT_EQ(std::string(buf, sizeof(buf)), std::string(16, 'z'));
  EXPECT_EQ(::fcntl(f->file.fd(), F_GETFL) & O_DIRECT, 0);
  Result<OpenedFile> strict = OpenForReading(path_, IoMode::kDirect);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kUnsupported);
}

TEST_F(DirectIoFallbackTest, RefusedAtFirstReadReadsBuffered) {
  ::setenv("LIBSHARD_IO_REFUSE_DIRECT", "read", 1);
  Result<OpenedFile> f = OpenForReading(path_, IoMode::kAuto);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_FALSE(f->direct);
  EXPECT_NE(f->fallback.find("refuses O_DIRECT reads"), std::string::npos) << f->fallback;
  EXPECT_NE(f->fallback.find("in place"), std::string::npos) << f->fallback;
  EXPECT_EQ(::fcntl(f->file.fd(), F_GETFL) & O_DIRECT, 0);
  char buf[16];
  ASSERT_TRUE(f->file.PReadExact(buf, sizeof(buf), 4099).ok());
  EXPECT_EQ(std::string(buf, sizeof(buf)), std::string(16, 'z'));
  Result<OpenedFile> strict = OpenForReading(path_, IoMode::kDirect);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kUnsupported);
  // Writers are not probed at open (they learn of a refusal at the first write).
  Result<OpenedFile> w = OpenForWriting(path_, IoMode::kAuto, Disposition::kExisting);
  ASSERT_TRUE(w.ok());
}

TEST_F(DirectIoFallbackTest, LocalDiskIsNotProbed) {
  // No variable: a local (non-network) file system gets O_DIRECT without a probe read and is
  // not named as shared.
  Result<OpenedFile> f = OpenForReading(path_, IoMode::kAuto);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->file_system.empty()) << f->file_system;
}

}  // namespace
}  // namespace libshard::io
