// The cache's pin and evict protocol (docs/CACHE.md §3) and the root's bound (§4-5), on cache
// files made here without a server (tests/python/test_s3_evict.py runs them against one).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "format/bytes.h"
#include "remote/cache_files.h"
#include "remote/cache_root.h"

namespace libshard::remote {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlock = 16384;

class CacheEvictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() /
             ("cache_evict_test-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(root_);
    fs::create_directories(root_ + "/b/p-0/objects");
  }
  void TearDown() override { fs::remove_all(root_); }

  // A shard cache of `blocks` full blocks under the root, every block present (bytes 'A' + b).
  std::unique_ptr<CachedShard> MakeShard(const std::string& name, uint64_t blocks,
                                         bool present = true) {
    auto s = std::make_unique<CachedShard>();
    s->url = "s3://b/p/" + name;
    s->etag = "\"etag-" + name + "\"";
    s->size = blocks * kBlock;
    s->data_path = root_ + "/b/p-0/objects/" + name + ".E";
    s->state_path = s->data_path + ".blocks";
    EXPECT_TRUE(s->Init(kBlock).ok());
    for (uint64_t b = 0; present && b < blocks; ++b) MarkPresent(*s, b);
    return s;
  }
  static void MarkPresent(CachedShard& s, uint64_t b) {
    std::vector<char> bytes(kBlock, static_cast<char>('A' + b));
    ASSERT_TRUE(s.data.PWriteAll(bytes.data(), bytes.size(), b * kBlock).ok());
    const uint64_t word = kPresent;
    ASSERT_TRUE(s.state.PWriteAll(&word, 8, kStateHeader + b * kEntryBytes).ok());
  }
  static uint64_t Word(const CachedShard& s, uint64_t b) {
    uint64_t w = 0;
    EXPECT_TRUE(s.state.PReadExact(&w, 8, kStateHeader + b * kEntryBytes).ok());
    return w;
  }
  static io::File Own(const std::string& path) {
    Result<io::File> f = io::File::Open(path, O_RDWR | O_CLOEXEC);
    EXPECT_TRUE(f.ok());
    return std::move(f).value();
  }
  static uint64_t Allocated(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return uint64_t(st.st_blocks) * 512;
  }

  std::string root_;
};

TEST_F(CacheEvictTest, PinnedBlockIsNotEvictedThenIs) {
  auto s = MakeShard("shard-0", 4);
  io::File pin = Own(s->state_path), evict = Own(s->state_path);
  Result<RangeLock> held = PinEntry(pin.fd(), s->state, 2);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_TRUE(held->held());
  // Held by a reader: skipped, the block stays present with its bytes.
  Result<uint64_t> freed = EvictEntry(evict.fd(), s->state, s->data, 2, kBlock, s->size);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 0u);
  EXPECT_EQ(Word(*s, 2), kPresent);
  char c = 0;
  ASSERT_TRUE(s->data.PReadExact(&c, 1, 2 * kBlock + 7).ok());
  EXPECT_EQ(c, 'C');
  // Another block of the same shard is evicted meanwhile: absent, its bytes gone.
  const uint64_t before = Allocated(s->data_path);
  freed = EvictEntry(evict.fd(), s->state, s->data, 1, kBlock, s->size);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, kBlock);
  EXPECT_EQ(Word(*s, 1), 0u);
  EXPECT_EQ(Allocated(s->data_path), before - kBlock);
  ASSERT_TRUE(s->data.PReadExact(&c, 1, kBlock + 7).ok());
  EXPECT_EQ(c, 0);
  // An absent block: nothing to do.
  freed = EvictEntry(evict.fd(), s->state, s->data, 1, kBlock, s->size);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 0u);
  // The reader is done: now it goes.
  held->Release();
  freed = EvictEntry(evict.fd(), s->state, s->data, 2, kBlock, s->size);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, kBlock);
  EXPECT_EQ(Word(*s, 2), 0u);
}

TEST_F(CacheEvictTest, PinFailsOnAbsentOrLockedBlock) {
  auto s = MakeShard("shard-0", 3);
  io::File pin = Own(s->state_path), fetch = Own(s->state_path);
  // A block being fetched (or evicted): the exclusive lock is held, so the pin waits for it.
  Result<RangeLock> excl =
      RangeLock::Acquire(fetch.fd(), kStateHeader + kEntryBytes, kEntryBytes, true, "x");
  ASSERT_TRUE(excl.ok());
  std::atomic<bool> done{false};
  Result<RangeLock> p = Status::Internal("unset");
  std::thread reader([&] {
    p = PinEntry(pin.fd(), s->state, 1);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(done.load()) << "pinned a block while it was held exclusively";
  excl->Release();
  reader.join();
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->held());
  p->Release();
  // Absent: a pin is never held on it.
  const uint64_t zero = 0;
  ASSERT_TRUE(s->state.PWriteAll(&zero, 8, kStateHeader + 2 * kEntryBytes).ok());
  p = PinEntry(pin.fd(), s->state, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->held());
  // And the shared lock was given back: an evictor can lock the entry.
  Result<RangeLock> e =
      RangeLock::Try(fetch.fd(), kStateHeader + 2 * kEntryBytes, kEntryBytes, true, "x");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->held());
}

TEST_F(CacheEvictTest, KilledReadersPinIsReleasedByTheKernel) {
  auto s = MakeShard("shard-0", 2);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child's own description, as a reader process has.
    Result<io::File> f = io::File::Open(s->state_path, O_RDWR | O_CLOEXEC);
    Result<RangeLock> p = f.ok() ? PinEntry(f->fd(), s->state, 0) : Result<RangeLock>(f.status());
    const char ok = p.ok() && p->held() ? 'y' : 'n';
    (void)!write(ready[1], &ok, 1);
    while (true) pause();
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  ASSERT_EQ(ok, 'y');
  io::File evict = Own(s->state_path);
  Result<uint64_t> freed = EvictEntry(evict.fd(), s->state, s->data, 0, kBlock, s->size);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 0u) << "a block pinned by a live reader was evicted";
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  freed = EvictEntry(evict.fd(), s->state, s->data, 0, kBlock, s->size);
  ASSERT_TRUE(freed.ok());
  // Block 0 keeps its first 4096 bytes (the shard header the local reader checks at open).
  EXPECT_EQ(*freed, kBlock - kKeptHead);
  EXPECT_EQ(Word(*s, 0), 0u);
  char c = 0;
  ASSERT_TRUE(s->data.PReadExact(&c, 1, 100).ok());
  EXPECT_EQ(c, 'A');
  ASSERT_TRUE(s->data.PReadExact(&c, 1, kKeptHead + 1).ok());
  EXPECT_EQ(c, 0);
}

TEST_F(CacheEvictTest, VersionOneStateFileIsUpgradedInPlace) {
  auto s = MakeShard("shard-0", 2);
  std::byte v1[4];
  format::PutU32(v1, 1);
  ASSERT_TRUE(s->state.PWriteAll(v1, 4, 8).ok());
  s.reset();
  auto again = std::make_unique<CachedShard>();
  again->url = "s3://b/p/shard-0";
  again->etag = "\"etag-shard-0\"";
  again->size = 2 * kBlock;
  again->data_path = root_ + "/b/p-0/objects/shard-0.E";
  again->state_path = again->data_path + ".blocks";
  Status st = again->Init(kBlock);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::byte got[4];
  ASSERT_TRUE(again->state.PReadExact(got, 4, 8).ok());
  EXPECT_EQ(format::GetU32(got), kStateVersion);
  EXPECT_EQ(Word(*again, 1), kPresent);  // every good block kept
  // A version this library does not know is refused, naming the file.
  format::PutU32(v1, 7);
  ASSERT_TRUE(again->state.PWriteAll(v1, 4, 8).ok());
  again->state = io::File();
  again->data = io::File();
  st = again->Init(kBlock);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a valid cache state file"), std::string::npos);
}

TEST_F(CacheEvictTest, RootBoundEvictsOtherDatasetsButNeverAPinnedBlock) {
  // Two "datasets" under one root, all blocks present; the bound covers both.
  auto a = MakeShard("shard-a", 4);
  fs::create_directories(root_ + "/b/q-1/objects");
  auto b = MakeShard("shard-b", 4);
  fs::create_directories(root_ + "/staging/b/x");
  {
    std::ofstream big(root_ + "/staging/b/x/shard.lss");
    big << std::string(1 << 20, 'z');  // staging is not the cache: never counted
  }
  ::setenv("LIBSHARD_CACHE_MEASURE_SECONDS", "0", 1);
  Result<std::shared_ptr<RootCache>> root = RootCache::Get(root_);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  ASSERT_TRUE((*root)->Measure().ok());  // writes .usage
  Result<uint64_t> used = (*root)->Measure();
  ASSERT_TRUE(used.ok());
  const uint64_t files = Allocated(a->data_path) + Allocated(b->data_path) +
                         Allocated(a->state_path) + Allocated(b->state_path) +
                         Allocated(root_ + "/.usage");
  EXPECT_EQ(*used, files);
  EXPECT_GE(*used, 8 * kBlock);
  // Pin every block but the last of each: room for one block evicts one of those two; room
  // for four is refused once both are gone, and the pinned ones stay.
  io::File pa = Own(a->state_path), pb = Own(b->state_path);
  std::vector<RangeLock> pins;
  for (uint64_t k = 0; k < 3; ++k) {
    pins.push_back(std::move(PinEntry(pa.fd(), a->state, k)).value());
    pins.push_back(std::move(PinEntry(pb.fd(), b->state, k)).value());
  }
  const int fd = a->state.fd();
  Status st = (*root)->Reserve(kBlock, *used, 0, fd);  // needs one block's room: evicts one
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(int(Word(*a, 3) == 0) + int(Word(*b, 3) == 0), 1);
  for (uint64_t k = 0; k < 3; ++k) {
    EXPECT_EQ(Word(*a, k), kPresent);
    EXPECT_EQ(Word(*b, k), kPresent);
  }
  // Now only the other last block can go; ask for four blocks' room.
  Result<uint64_t> now = (*root)->Measure();
  ASSERT_TRUE(now.ok());
  st = (*root)->Reserve(4 * kBlock, *now, 0, fd);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("the cache is full"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(root_), std::string::npos);
  EXPECT_EQ(Word(*a, 3) + Word(*b, 3), 0u);
  for (uint64_t k = 0; k < 3; ++k) {
    EXPECT_EQ(Word(*a, k), kPresent) << "pinned block " << k << " evicted";
    EXPECT_EQ(Word(*b, k), kPresent) << "pinned block " << k << " evicted";
  }
  pins.clear();
  ::unsetenv("LIBSHARD_CACHE_MEASURE_SECONDS");
}

TEST_F(CacheEvictTest, RunningCountIsSharedAndCorrectedByMeasure) {
  auto a = MakeShard("shard-a", 2);
  ::setenv("LIBSHARD_CACHE_MEASURE_SECONDS", "3600", 1);
  Result<std::shared_ptr<RootCache>> root = RootCache::Get(root_);
  ASSERT_TRUE(root.ok());
  Result<uint64_t> used = (*root)->Measure();
  ASSERT_TRUE(used.ok());
  // Reservations add up in the count (no walk: the interval is long) until the bound.
  ASSERT_TRUE((*root)->Reserve(kBlock, *used + 2 * kBlock, 0, a->state.fd()).ok());
  ASSERT_TRUE((*root)->Reserve(kBlock, *used + 2 * kBlock, 0, a->state.fd()).ok());
  // A third does not fit, and with nothing evictable (every block pinned) is refused.
  io::File pa = Own(a->state_path);
  Result<RangeLock> p0 = PinEntry(pa.fd(), a->state, 0);
  Result<RangeLock> p1 = PinEntry(pa.fd(), a->state, 1);
  ASSERT_TRUE(p0.ok() && p1.ok() && p0->held() && p1->held());
  Status st = (*root)->Reserve(kBlock, *used + 2 * kBlock, 0, a->state.fd());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("cache_size " + std::to_string(*used + 2 * kBlock)),
            std::string::npos)
      << st.message();
  // Given back (the GETs failed): room again.
  (*root)->Unreserve(2 * kBlock);
  EXPECT_TRUE((*root)->Reserve(kBlock, *used + 2 * kBlock, 0, a->state.fd()).ok());
  // The usage file holds the count for every process of the node.
  std::byte rec[kUsageBytes];
  io::File usage = Own(root_ + "/.usage");
  ASSERT_TRUE(usage.PReadExact(rec, kUsageBytes, 0).ok());
  EXPECT_EQ(std::memcmp(rec, kUsageMagic, 8), 0);
  EXPECT_EQ(format::GetU64(rec + 16), *used + kBlock);
  ::unsetenv("LIBSHARD_CACHE_MEASURE_SECONDS");
}

}  // namespace
}  // namespace libshard::remote
