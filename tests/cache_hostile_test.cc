// The cache directory as hostile input (docs/CACHE.md §1, §4): a lying or damaged .usage is
// measured again, no symlink in the cache is ever followed (nothing is written outside it), a
// FIFO never blocks, and the free-space floor counts every download in flight on the node.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <string>

#include "format/bytes.h"
#include "remote/cache_files.h"
#include "remote/cache_records.h"
#include "remote/cache_root.h"
#include "testutil/testutil.h"

namespace libshard::remote {
namespace {

namespace fs = std::filesystem;

uint64_t NowNs() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

class CacheHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (dir_ / "cache").string();
    fs::create_directories(root_);
    ::setenv("LIBSHARD_CACHE_MEASURE_SECONDS", "3600", 1);
  }
  void TearDown() override { ::unsetenv("LIBSHARD_CACHE_MEASURE_SECONDS"); }

  void WriteUsage(uint64_t used, uint64_t when_ns) {
    std::byte rec[kUsageBytes];
    EncodeUsage({used, when_ns, 0}, rec);
    testing::WriteStringToFile(root_ + "/" + kUsageName,
                               std::string(reinterpret_cast<const char*>(rec), kUsageBytes));
  }
  UsageRecord ReadUsage() {
    const std::string s = testing::ReadFileToString(root_ + "/" + kUsageName);
    EXPECT_EQ(s.size(), kUsageBytes);
    std::optional<UsageRecord> r = ParseUsage(AsBytes(s), NowNs(), UINT64_MAX);
    EXPECT_TRUE(r.has_value());
    return r.value_or(UsageRecord{});
  }
  std::unique_ptr<CachedShard> Shard(const std::string& dir) {
    auto s = std::make_unique<CachedShard>();
    s->url = "s3://b/p/shard";
    s->etag = "\"e\"";
    s->size = 4 * 16384;
    s->data_path = dir + "/shard.E";
    s->state_path = s->data_path + ".blocks";
    return s;
  }

  testing::TempDir dir_;
  std::string root_;
};

TEST_F(CacheHostileTest, UsageRecordIsBounded) {
  std::byte rec[kUsageBytes];
  const uint64_t now = NowNs();
  EncodeUsage({1000, now, 0}, rec);
  ASSERT_TRUE(ParseUsage({rec, kUsageBytes}, now, 1 << 20).has_value());
  EXPECT_FALSE(ParseUsage({rec, kUsageBytes}, now, 999).has_value());  // more than the disk
  EncodeUsage({1000, now + 3600ull * 1000000000ull, 0}, rec);
  EXPECT_FALSE(ParseUsage({rec, kUsageBytes}, now, 1 << 20).has_value());  // the future
  EncodeUsage({1000, now, uint64_t{1} << 62}, rec);
  EXPECT_FALSE(ParseUsage({rec, kUsageBytes}, now, 1 << 20).has_value());  // pending, a lie
  EncodeUsage({1000, now, 0}, rec);
  rec[8] = std::byte{2};
  EXPECT_FALSE(ParseUsage({rec, kUsageBytes}, now, 1 << 20).has_value());  // version
  EXPECT_FALSE(ParseUsage({rec, 63}, now, 1 << 20).has_value());
}

TEST_F(CacheHostileTest, HugeCountIsMeasuredAgainNotObeyed) {
  // 2^62 bytes used: the old library found every read "cache full" and emptied the cache.
  WriteUsage(uint64_t{1} << 62, NowNs());
  Result<std::shared_ptr<RootCache>> root = RootCache::Get(root_);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  Status st = (*root)->Reserve(4096, /*cache_size=*/1 << 20, 0, -1);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_LT(ReadUsage().used, uint64_t{1} << 20);
}

TEST_F(CacheHostileTest, FutureMeasureIsMeasuredAgain) {
  // A measure dated a day ahead was never due again: its count stayed wrong for good.
  WriteUsage(12345, NowNs() + 86400ull * 1000000000ull);
  Result<std::shared_ptr<RootCache>> root = RootCache::Get(root_);
  ASSERT_TRUE(root.ok());
  ASSERT_TRUE((*root)->Reserve(4096, 0, 0, -1).ok());
  const UsageRecord r = ReadUsage();
  EXPECT_LE(r.measured_ns, NowNs());
  EXPECT_NE(r.used, 12345u + 4096u);
}

TEST_F(CacheHostileTest, UsageSymlinkIsNotFollowed) {
  const std::string outside = (dir_ / "outside").string();
  testing::WriteStringToFile(outside, "precious");
  fs::create_symlink(outside, root_ + "/" + kUsageName);
  Result<std::shared_ptr<RootCache>> root = RootCache::Get(root_);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  ASSERT_TRUE((*root)->Reserve(4096, 0, 0, -1).ok());
  EXPECT_EQ(testing::ReadFileToString(outside), "precious");
  EXPECT_FALSE(fs::is_symlink(root_ + "/" + kUsageName));
  EXPECT_EQ(fs::file_size(root_ + "/" + kUsageName), kUsageBytes);
}

TEST_F(CacheHostileTest, ShardFileSymlinksAreNotFollowed) {
  const std::string dir = root_ + "/b/p-0/objects";
  fs::create_directories(dir);
  const std::string outside = (dir_ / "outside").string();
  testing::WriteStringToFile(outside, "precious");
  auto s = Shard(dir);
  fs::create_symlink(outside, s->data_path);
  fs::create_symlink(outside, s->state_path);
  ASSERT_TRUE(s->Init(16384).ok());
  std::string block(16384, 'x');
  ASSERT_TRUE(s->data.PWriteAll(block.data(), block.size(), 0).ok());
  EXPECT_EQ(testing::ReadFileToString(outside), "precious");
  EXPECT_FALSE(fs::is_symlink(s->data_path));
  EXPECT_FALSE(fs::is_symlink(s->state_path));
  // Cached whole files: read without following, rewritten without following.
  fs::create_symlink(outside, dir + "/manifest.json.E");
  EXPECT_FALSE(ReadCachedFile(dir + "/manifest.json.E", 8).ok());
  ASSERT_TRUE(RewriteCachedFile(dir + "/manifest.json.E", "{}").ok());
  EXPECT_EQ(testing::ReadFileToString(outside), "precious");
  EXPECT_EQ(testing::ReadFileToString(dir + "/manifest.json.E"), "{}");
}

TEST_F(CacheHostileTest, DirectorySymlinksAreNotFollowed) {
  const fs::path outside = dir_ / "elsewhere";
  fs::create_directories(outside);
  fs::create_symlink(outside, root_ + "/b");
  ASSERT_TRUE(MakeCacheDirs(root_, "b/p-0/objects").ok());
  EXPECT_FALSE(fs::is_symlink(root_ + "/b"));
  EXPECT_TRUE(fs::is_directory(root_ + "/b/p-0/objects"));
  EXPECT_TRUE(fs::is_empty(outside));
}

TEST_F(CacheHostileTest, FifoDoesNotBlock) {
  const std::string dir = root_ + "/b/p-0/objects";
  fs::create_directories(dir);
  auto s = Shard(dir);
  ASSERT_EQ(::mkfifo(s->state_path.c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo((dir + "/index.lsi.E").c_str(), 0644), 0);
  Status st = s->Init(16384);  // replaced by a state file
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(fs::is_regular_file(s->state_path));
  EXPECT_FALSE(ReadCachedFile(dir + "/index.lsi.E", 8).ok());  // refused, not a hang
}

TEST_F(CacheHostileTest, StateHeaderIsBounded) {
  StateHeader h{kStateVersion, 16384, 4 * 16384, 4, 7};
  std::byte b[kStateHeader];
  EncodeStateHeader(h, b);
  EXPECT_TRUE(ParseStateHeader({b, kStateHeader}, kStateHeader + 4 * kEntryBytes).has_value());
  EXPECT_FALSE(ParseStateHeader({b, kStateHeader}, kStateHeader + 5 * kEntryBytes).has_value());
  h.blocks = uint64_t{1} << 62;  // a count the file cannot hold
  EncodeStateHeader(h, b);
  EXPECT_FALSE(ParseStateHeader({b, kStateHeader}, kStateHeader + 4 * kEntryBytes).has_value());
  h = {kStateVersion, 4095, 4 * 4095, 4, 7};
  EncodeStateHeader(h, b);
  EXPECT_FALSE(ParseStateHeader({b, kStateHeader}, kStateHeader + 4 * kEntryBytes).has_value());
}

// A tmpfs of a fixed size (root only): nothing else writes there, so free space is exact.
class SmallFileSystem {
 public:
  explicit SmallFileSystem(const std::string& dir) : dir_(dir) {
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=4m") == 0;
  }
  ~SmallFileSystem() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

TEST_F(CacheHostileTest, FreeSpaceIsReservedForEveryDownloadInFlight) {
  const std::string root = (dir_ / "small").string();
  fs::create_directories(root);
  SmallFileSystem fsys(root);
  if (!fsys.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  Result<std::shared_ptr<RootCache>> cache = RootCache::Get(root);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  Result<io::File> dir = io::File::Open(root, O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(dir.ok());
  const int fd = dir->fd();
  struct statvfs v {};
  ASSERT_EQ(fstatvfs(fd, &v), 0);
  constexpr uint64_t kBlock = 256 << 10;
  const uint64_t free_bytes = uint64_t{v.f_bavail} * v.f_frsize;
  // Room for two and a half blocks above the floor.
  const uint64_t min_free = free_bytes - 5 * kBlock / 2;
  ASSERT_TRUE((*cache)->Reserve(kBlock, 0, min_free, fd).ok());
  ASSERT_TRUE((*cache)->Reserve(kBlock, 0, min_free, fd).ok());
  // Two downloads in flight have not written a byte yet; a third would overrun the floor. It is
  // refused (nothing here can be evicted) instead of failing later with ENOSPC.
  Status third = (*cache)->Reserve(kBlock, 0, min_free, fd);
  EXPECT_EQ(third.code(), StatusCode::kResourceExhausted) << third.ToString();
  EXPECT_NE(third.message().find("reserved by downloads in flight"), std::string::npos)
      << third.ToString();
  // One lands (its bytes now take the room it reserved): still no room for the third.
  testing::WriteStringToFile(root + "/landed", std::string(kBlock, 'x'));
  (*cache)->Landed(kBlock);
  EXPECT_FALSE((*cache)->Reserve(kBlock, 0, min_free, fd).ok());
  // The other fails: its room is free again.
  (*cache)->Abandoned(kBlock);
  EXPECT_TRUE((*cache)->Reserve(kBlock, 0, min_free, fd).ok());
}

}  // namespace
}  // namespace libshard::remote
