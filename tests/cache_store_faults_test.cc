// The node-local cache against a hostile store and a full disk (docs/CACHE.md §4, §7), in-process
// over the memory store (objstore/memory_store.h) and its fault rules:
//   - a store that ignores the conditions of reads and names no generation leaves another
//     version's bytes in the cache: the read that finds them is a clear error, never those
//     bytes, and once the store serves the right objects again the next read heals;
//   - a cache directory with no room (its free-space floor, or a file system full of other
//     files) evicts what can go, else reads through uncached with one warning: a read never
//     fails for the cache's own lack of space.
// Each answer is the right data or a clear error; never wrong data.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "objstore/memory_store.h"
#include "remote/cache_log.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

namespace fs = std::filesystem;
using objstore::Fault;
using objstore::FaultRule;
using objstore::MemoryServer;

constexpr int kSamples = 40;

class CacheHostileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> serial{0};
    bucket_ = "faults-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
    url_ = "memory://" + bucket_ + "/ds";
    for (const auto& [k, v] : std::vector<std::pair<const char*, const char*>>{
             {"LIBSHARD_CACHE_BLOCK_SIZE", "8192"},
             {"LIBSHARD_S3_CONNECTIONS", "3"},
             {"LIBSHARD_CACHE_MIN_FREE", "0"}})
      ::setenv(k, v, 1);
    server_ = MemoryServer::Global();
    previous_sink_ = remote::SetCacheWarningSink([this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      warnings_.push_back(line);
    });
    options_.cache_dir = (dir_ / "cache").string();
  }
  void TearDown() override {
    server_->ClearFaults();
    for (const std::string& k : server_->Keys(bucket_)) server_->Remove(bucket_, k);
    remote::SetCacheWarningSink(previous_sink_);
    for (const char* k :
         {"LIBSHARD_CACHE_BLOCK_SIZE", "LIBSHARD_S3_CONNECTIONS", "LIBSHARD_CACHE_MIN_FREE"})
      ::unsetenv(k);
  }

  // The standard samples (`hidden` wide) written locally and put in the bucket.
  void Upload(uint64_t hidden = 24, uint64_t shard_size = 64 << 10) {
    WriterOptions w = testing::FastOptions();
    w.shard_size = shard_size;
    auto writer = Writer::Create((dir_ / "ds").string(), testing::EagleSchema(), w);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    for (uint64_t i = 0; i < kSamples; ++i) {
      want_.push_back(testing::MakeEagleSample(i, 3 + (i * 5) % 17, hidden));
      ASSERT_TRUE((*writer)->Append(want_.back().input).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
    server_->PutDirectory(bucket_, "ds", (dir_ / "ds").string());
  }
  std::shared_ptr<Dataset> Open() {
    Result<std::shared_ptr<Dataset>> ds = Dataset::Open(url_, options_);
    EXPECT_TRUE(ds.ok()) << ds.status().ToString();
    return ds.ok() ? *ds : nullptr;
  }
  std::vector<std::string> Warnings() {
    std::lock_guard<std::mutex> lock(mu_);
    return warnings_;
  }
  void ExpectAll(const Dataset& ds) {
    for (uint64_t i = 0; i < kSamples; ++i) {
      Result<Sample> s = ds.Read(i);
      ASSERT_TRUE(s.ok()) << "sample " << i << ": " << s.status().ToString();
      testing::ExpectSampleEq(*s, want_[i]);
    }
  }
  // Every sample through the streaming loader, in order.
  void ExpectLoaderServesAll(const std::shared_ptr<Dataset>& ds) {
    LoaderOptions o;
    o.order = Order::Unshuffled();
    o.memory_budget = 4 << 20;
    o.pin_memory = PinMemory::kOff;
    auto loader = Loader::Create(ds, o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    uint64_t n = 0;
    while (true) {
      Result<std::optional<Batch>> b = (*loader)->Next();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      if (!*b) break;
      for (const Sample& s : (*b)->samples) testing::ExpectSampleEq(s, want_[n++]);
    }
    EXPECT_EQ(n, static_cast<uint64_t>(kSamples));
  }
  SampleLocation Where(uint64_t i) {
    auto local = Dataset::Open((dir_ / "ds").string());
    EXPECT_TRUE(local.ok());
    return (*local)->location(i);
  }
  std::string ShardKey(uint32_t shard) {
    auto local = Dataset::Open((dir_ / "ds").string());
    return "ds/" + fs::path((*local)->shards()[shard].path).filename().string();
  }
  // Blocks recorded present in the cache's state files (docs/CACHE.md §2).
  uint64_t PresentBlocks() {
    uint64_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "cache")) {
      if (e.path().extension() != ".blocks") continue;
      const std::string s = testing::ReadFileToString(e.path());
      for (size_t off = 64; off + 16 <= s.size(); off += 16)
        n += s.compare(off, 8, "PRESENT1") == 0;
    }
    return n;
  }

  testing::TempDir dir_;
  std::string bucket_, url_;
  std::shared_ptr<MemoryServer> server_;
  DatasetOptions options_;
  std::vector<testing::OwnedSample> want_;
  std::mutex mu_;
  std::vector<std::string> warnings_;
  remote::CacheWarningSink previous_sink_;
};

// Issue 45: a store that ignores conditional reads and sends no generation at all (not even at
// open). Another version's bytes reach the cache; the read that finds them is an error naming
// the problem; once the store serves the right object again, the next read heals.
TEST_F(CacheHostileStoreTest, NoGenerationAndIgnoredConditionsHealOnceTheRightObjectIsBack) {
  Upload();
  FaultRule r;
  r.faults = {Fault::kIgnoreCondition, Fault::kNoGeneration};
  r.times = -1;
  server_->AddFault(r);
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  const SampleLocation loc = Where(3);
  const std::string key = ShardKey(loc.shard);
  const std::string original = server_->Get(bucket_, key);
  std::string changed = original;
  changed[loc.offset + 20] = static_cast<char>(changed[loc.offset + 20] ^ 1);
  server_->Put(bucket_, key, changed);
  for (int attempt = 0; attempt < 2; ++attempt) {  // as often as it is read: never those bytes
    Result<Sample> s = ds->Read(3);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().sys_errno(), ESTALE) << s.status().ToString();
    for (const char* part : {"does not hold the bytes the index records", "names no version",
                             "reopen the dataset", url_.c_str()})
      EXPECT_NE(s.status().message().find(part), std::string::npos)
          << part << " not in: " << s.status().message();
  }
  // The right object is back (the store still ignores conditions and names no generation).
  server_->Put(bucket_, key, original);
  Result<Sample> healed = ds->Read(3);
  ASSERT_TRUE(healed.ok()) << healed.status().ToString();
  testing::ExpectSampleEq(*healed, want_[3]);
  ExpectAll(*ds);
  ExpectLoaderServesAll(ds);
  auto again = Open();
  ASSERT_NE(again, nullptr);
  ExpectAll(*again);
}

// The same through the loader: its reads heal into the loader's own buffers.
TEST_F(CacheHostileStoreTest, TheLoaderHealsOtherVersionsBytesOnceTheRightObjectIsBack) {
  Upload();
  FaultRule r;
  r.faults = {Fault::kIgnoreCondition, Fault::kNoGeneration};
  r.times = -1;
  server_->AddFault(r);
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  const SampleLocation loc = Where(9);
  const std::string key = ShardKey(loc.shard);
  const std::string original = server_->Get(bucket_, key);
  std::string changed = original;
  changed[loc.offset + 8] = static_cast<char>(changed[loc.offset + 8] ^ 0x40);
  server_->Put(bucket_, key, changed);
  {
    // Sample 9's bytes are another version's: the loader fails naming it, serves nothing wrong.
    LoaderOptions o;
    o.order = Order::Unshuffled();
    o.memory_budget = 4 << 20;
    o.pin_memory = PinMemory::kOff;
    auto loader = Loader::Create(ds, o);
    ASSERT_TRUE(loader.ok());
    uint64_t n = 0;
    Status failed;
    while (failed.ok()) {
      Result<std::optional<Batch>> b = (*loader)->Next();
      if (!b.ok()) {
        failed = b.status();
        break;
      }
      if (!*b) break;
      for (const Sample& s : (*b)->samples) testing::ExpectSampleEq(s, want_[n++]);
    }
    EXPECT_FALSE(failed.ok());
    EXPECT_LE(n, 9u);
    EXPECT_NE(failed.message().find("sample 9"), std::string::npos) << failed.ToString();
  }
  server_->Put(bucket_, key, original);
  ExpectLoaderServesAll(ds);
}

// A store whose heads name the generation but whose reads ignore the condition (and name none):
// the replacement is told as such (ESTALE), and the other version's bytes are dropped from the
// cache, so a read after the object is back fetches the right ones.
TEST_F(CacheHostileStoreTest, ReplacedObjectsBytesAreDroppedNotServedAgain) {
  Upload();
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  const SampleLocation loc = Where(5);
  const std::string key = ShardKey(loc.shard);
  const std::string original = server_->Get(bucket_, key);
  std::string changed = original;
  changed[loc.offset + 30] = static_cast<char>(changed[loc.offset + 30] ^ 2);
  server_->Put(bucket_, key, changed);
  FaultRule r;
  r.faults = {Fault::kIgnoreCondition, Fault::kNoGeneration};
  r.method = "GET";
  r.times = -1;
  server_->AddFault(r);
  Result<Sample> s = ds->Read(5);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().sys_errno(), ESTALE) << s.status().ToString();
  EXPECT_NE(s.status().message().find("replaced since the dataset was opened"), std::string::npos);
  server_->Put(bucket_, key, original);
  ExpectAll(*ds);
  EXPECT_TRUE(Warnings().empty());  // the dropped blocks were fetched anew, nothing to heal
}

// A replica that lags and serves the previous version's bytes under the current generation:
// caught by the checksums, fetched again, healed.
TEST_F(CacheHostileStoreTest, StaleReplicaBytesAreHealed) {
  Upload();
  const SampleLocation loc = Where(12);
  const std::string key = ShardKey(loc.shard);
  const std::string original = server_->Get(bucket_, key);
  std::string older = original;
  older[loc.offset + 40] = static_cast<char>(older[loc.offset + 40] ^ 4);
  server_->Put(bucket_, key, older);
  server_->Put(bucket_, key, original);  // `older` is now the previous version
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  FaultRule r;
  r.faults = {Fault::kStale};
  r.method = "GET";
  r.key_contains = key;
  r.ranged_only = true;
  r.range_offset = loc.offset / 8192 * 8192;
  server_->AddFault(r);
  ExpectAll(*ds);
  ASSERT_EQ(Warnings().size(), 1u);
  EXPECT_NE(Warnings()[0].find("that download was damaged"), std::string::npos) << Warnings()[0];
}

// Issue 45: no room for blocks (a free-space floor no download can keep, nothing evictable):
// every read reads through, uncached, with one warning; nothing fails, nothing is cached.
TEST_F(CacheHostileStoreTest, NoRoomForBlocksReadsThroughUncached) {
  Upload();
  ::setenv("LIBSHARD_CACHE_MIN_FREE", "1125899906842624", 1);  // 1 PiB
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  ExpectAll(*ds);
  for (uint64_t i = 0; i < kSamples; ++i) EXPECT_TRUE(ds->Verify(i).ok()) << i;
  ExpectLoaderServesAll(ds);
  EXPECT_EQ(PresentBlocks(), 0u);
  const std::vector<std::string> w = Warnings();
  ASSERT_EQ(w.size(), 1u);
  for (const char* part : {"has no room for more blocks", "uncached", "docs/CACHE.md §4"})
    EXPECT_NE(w[0].find(part), std::string::npos) << part << " not in: " << w[0];
  // Read through, the bytes are still checked: a damaged object is the bucket's error.
  const SampleLocation loc = Where(7);
  server_->Damage(bucket_, ShardKey(loc.shard), loc.offset + 9);
  Result<Sample> bad = ds->Read(7);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("read through uncached"), std::string::npos);
}

// A small file system for the cache (root only: a tmpfs mount), `bytes` large.
class SmallFileSystem {
 public:
  SmallFileSystem(const std::string& dir, uint64_t bytes) : dir_(dir) {
    fs::create_directories(dir);
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0,
                       ("size=" + std::to_string(bytes)).c_str()) == 0;
  }
  ~SmallFileSystem() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs v {};
  return statvfs(dir.c_str(), &v) == 0 ? uint64_t{v.f_bavail} * v.f_frsize : 0;
}

// Issue 45: the cache's file system runs out of space (no floor kept: LIBSHARD_CACHE_MIN_FREE=0)
// while the dataset is three times its size: blocks are evicted to make room, every read right.
TEST_F(CacheHostileStoreTest, AFullFileSystemEvictsInsteadOfFailing) {
  SmallFileSystem small((dir_ / "cache").string(), 1 << 20);
  if (!small.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  Upload(/*hidden=*/1024, /*shard_size=*/256 << 10);
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  for (int pass = 0; pass < 2; ++pass) ExpectAll(*ds);
  ExpectLoaderServesAll(ds);
  EXPECT_GT(PresentBlocks(), 0u);  // cached what fits
}

// Issue 45: the file system is full of other files: nothing of the cache's can be evicted to
// make room, so reads go through uncached, with one warning.
TEST_F(CacheHostileStoreTest, AFileSystemFullOfOtherFilesReadsThrough) {
  const std::string root = (dir_ / "cache").string();
  SmallFileSystem small(root, 1 << 20);
  if (!small.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  Upload(/*hidden=*/1024, /*shard_size=*/256 << 10);
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  {
    std::ofstream other(root + "/other-file", std::ios::binary);
    const std::string chunk(4096, 'o');
    while (FreeBytes(root) >= 4096 && other.write(chunk.data(), chunk.size())) other.flush();
  }
  ASSERT_LT(FreeBytes(root), 8192u);
  ExpectAll(*ds);
  ExpectLoaderServesAll(ds);
  const std::vector<std::string> w = Warnings();
  ASSERT_GE(w.size(), 1u);
  EXPECT_NE(w.back().find("has no room for more blocks"), std::string::npos) << w.back();
  EXPECT_TRUE(fs::exists(root + "/other-file"));  // never the cache's to evict
}

}  // namespace
}  // namespace libshard
