// The node-local cache heals instead of poisoning itself (docs/CACHE.md §7), in-process against
// the S3 front (testutil/fake_s3.h) over a memory store's server (objstore/memory_store.h):
// nothing enters the cache unverified where a reference exists, a damaged cached copy is fetched
// again once (a warning), and only a second failure is an error, which blames the bucket's
// object, naming it. tests/python/test_s3_heal.py runs the same cases
// against a real S3 server behind a fault proxy.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "loader/streaming_loader.h"
#include "remote/cache_log.h"
#include "testutil/fake_s3.h"
#include "testutil/loader_hooks.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

namespace fs = std::filesystem;
using objstore::MemoryServer;
using objstore::Fault;
using objstore::FaultRule;

constexpr uint64_t kBlock = 8192;
constexpr int kSamples = 40;

class S3CacheHealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& [k, v] : std::vector<std::pair<const char*, const char*>>{
             {"AWS_ENDPOINT_URL_S3", testing::kS3Endpoint},
             {"AWS_ACCESS_KEY_ID", "test"},
             {"AWS_SECRET_ACCESS_KEY", "test"},
             {"AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"},
             {"AWS_CONFIG_FILE", "/nonexistent"},
             {"LIBSHARD_CACHE_BLOCK_SIZE", "8192"},
             {"LIBSHARD_S3_CONNECTIONS", "3"},
             {"LIBSHARD_S3_MAX_ATTEMPTS", "3"},
             {"LIBSHARD_S3_BACKOFF_MS", "1"},
             {"LIBSHARD_CACHE_MIN_FREE", "0"}})
      ::setenv(k, v, 1);
    server_ = MemoryServer::Make();
    installed_ = testing::ServeS3(server_);
    WriterOptions w = testing::FastOptions();
    w.shard_size = 64 << 10;
    testing::WriteStandard(dir_ / "ds", kSamples, w);
    server_->PutDirectory("bkt", "ds", (dir_ / "ds").string());
    options_.cache_dir = (dir_ / "cache").string();
    previous_sink_ = remote::SetCacheWarningSink([this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      warnings_.push_back(line);
    });
  }
  void TearDown() override {
    remote::SetCacheWarningSink(previous_sink_);
    for (const char* k :
         {"AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
          "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "LIBSHARD_CACHE_BLOCK_SIZE",
          "LIBSHARD_S3_CONNECTIONS", "LIBSHARD_S3_MAX_ATTEMPTS", "LIBSHARD_S3_BACKOFF_MS",
          "LIBSHARD_CACHE_MIN_FREE"})
      ::unsetenv(k);
  }

  std::shared_ptr<Dataset> Open() {
    Result<std::shared_ptr<Dataset>> ds = Dataset::Open(kUrl, options_);
    EXPECT_TRUE(ds.ok()) << ds.status().ToString();
    return ds.ok() ? *ds : nullptr;
  }
  std::vector<std::string> Warnings() {
    std::lock_guard<std::mutex> lock(mu_);
    return warnings_;
  }
  // The cached file of `name` (objects/NAME.E, not a state file).
  fs::path Cached(const std::string& name) {
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "cache")) {
      const std::string f = e.path().filename().string();
      if (e.path().parent_path().filename() == "objects" && f.rfind(name + ".", 0) == 0 &&
          f.find(".blocks") == std::string::npos && f.find(".tmp-") == std::string::npos)
        return e.path();
    }
    ADD_FAILURE() << "no cached " << name;
    return {};
  }
  static void ExpectAll(const Dataset& ds) {
    for (uint64_t i = 0; i < kSamples; ++i) {
      Result<Sample> s = ds.Read(i);
      ASSERT_TRUE(s.ok()) << "sample " << i << ": " << s.status().ToString();
      testing::ExpectSampleEq(*s, testing::StandardSample(i));
    }
  }
  // Where sample i lies (shard 0 of the local copy's index).
  SampleLocation Where(uint64_t i) {
    auto local = Dataset::Open((dir_ / "ds").string());
    EXPECT_TRUE(local.ok());
    return (*local)->location(i);
  }
  std::string ShardName(uint32_t shard) {
    auto local = Dataset::Open((dir_ / "ds").string());
    return fs::path((*local)->shards()[shard].path).filename().string();
  }

  static constexpr const char* kUrl = "s3://bkt/ds";
  testing::TempDir dir_;
  std::shared_ptr<MemoryServer> server_;
  std::unique_ptr<testing::S3Front> installed_;
  DatasetOptions options_;
  std::mutex mu_;
  std::vector<std::string> warnings_;
  remote::CacheWarningSink previous_sink_;
};

TEST_F(S3CacheHealTest, EverySampleAsLocalThroughFaults) {
  ::setenv("LIBSHARD_S3_MAX_ATTEMPTS", "10", 1);  // the faults may all meet one request
  FaultRule r;
  r.method = "GET";
  r.key_contains = ".lss";
  r.ranged_only = true;
  for (Fault f : {Fault::kError, Fault::kDrop, Fault::kCut, Fault::kStall,
                    Fault::kNoContentRange, Fault::kIgnoreRange, Fault::kNoGeneration}) {
    r.faults = {f};
    server_->AddFault(r);
  }
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  ExpectAll(*ds);
  EXPECT_TRUE(Warnings().empty());
}

TEST_F(S3CacheHealTest, BlockDamagedInTransferHeals) {
  const SampleLocation loc = Where(7);
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  FaultRule r;
  r.faults = {Fault::kCorrupt};
  r.method = "GET";
  r.key_contains = ShardName(loc.shard);
  r.range_offset = loc.offset / kBlock * kBlock;
  r.arg = loc.offset % kBlock + 100;
  server_->AddFault(r);
  Result<Sample> s = ds->Read(7);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  testing::ExpectSampleEq(*s, testing::StandardSample(7));
  ASSERT_EQ(Warnings().size(), 1u);
  EXPECT_NE(Warnings()[0].find("that download was damaged"), std::string::npos) << Warnings()[0];
  EXPECT_NE(Warnings()[0].find("bucket bkt, key ds/" + ShardName(loc.shard)), std::string::npos);
  EXPECT_EQ(server_->RangedGets(ShardName(loc.shard), r.range_offset), 2u);
  // Healed for good: a new open reads it from the cache.
  server_->ResetCounts();
  auto again = Open();
  ExpectAll(*again);
  EXPECT_EQ(server_->RangedGets(ShardName(loc.shard), r.range_offset), 0u);
}

TEST_F(S3CacheHealTest, BlockDamagedOnDiskHeals) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  ExpectAll(*ds);
  const SampleLocation loc = Where(11);
  testing::FlipByte(Cached(ShardName(loc.shard)), loc.offset + 64);
  server_->ResetCounts();
  auto fresh = Open();  // a new process would see the same file
  Result<Sample> s = fresh->Read(11);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  testing::ExpectSampleEq(*s, testing::StandardSample(11));
  ASSERT_EQ(Warnings().size(), 1u);
  EXPECT_NE(Warnings()[0].find("damaged on this node's disk"), std::string::npos) << Warnings()[0];
  EXPECT_EQ(Warnings()[0].find("re-run libshard pack"), std::string::npos) << Warnings()[0];
  EXPECT_EQ(server_->RangedGets(ShardName(loc.shard)), 1u);
}

TEST_F(S3CacheHealTest, LoaderHealsEveryDamagedBlock) {
  {
    auto ds = Open();
    ExpectAll(*ds);
  }
  // Damage on disk in three samples' blocks, one of them block 0 past the header.
  for (uint64_t i : {0u, 9u, 30u}) {
    const SampleLocation loc = Where(i);
    testing::FlipByte(Cached(ShardName(loc.shard)), loc.offset + 8);
  }
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
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
    for (const Sample& s : (*b)->samples) testing::ExpectSampleEq(s, testing::StandardSample(n++));
  }
  EXPECT_EQ(n, static_cast<uint64_t>(kSamples));
  EXPECT_EQ(Warnings().size(), 3u);
}

TEST_F(S3CacheHealTest, DamagedInTheBucketIsTheBucketsError) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  const SampleLocation loc = Where(5);
  server_->Damage("bkt", "ds/" + ShardName(loc.shard), loc.offset + 10);
  Result<Sample> s = ds->Read(5);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kCorruption);
  const std::string m = s.status().message();
  EXPECT_NE(m.find("the object in the bucket is damaged"), std::string::npos) << m;
  EXPECT_NE(m.find("bucket bkt, key ds/" + ShardName(loc.shard)), std::string::npos) << m;
  EXPECT_NE(m.find("ETag " + server_->Generation("bkt", "ds/" + ShardName(loc.shard))),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("bytes " + std::to_string(loc.offset)), std::string::npos) << m;
  EXPECT_EQ(m.find("re-run libshard pack"), std::string::npos) << m;
  EXPECT_TRUE(Warnings().empty());
  // Other samples still read.
  Result<Sample> other = ds->Read(kSamples - 1);
  EXPECT_TRUE(other.ok()) << other.status().ToString();
}

TEST_F(S3CacheHealTest, ReplacedObjectBehindAServerThatIgnoresIfMatch) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  const SampleLocation loc = Where(3);
  const std::string key = "ds/" + ShardName(loc.shard);
  std::string changed = server_->Get("bkt", key);
  changed[loc.offset + 20] = static_cast<char>(changed[loc.offset + 20] ^ 1);
  server_->Put("bkt", key, changed);
  FaultRule r;
  r.faults = {Fault::kIgnoreCondition, Fault::kNoGeneration};
  r.method = "GET";
  r.times = -1;
  server_->AddFault(r);
  Result<Sample> s = ds->Read(3);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().sys_errno(), ESTALE) << s.status().ToString();
  EXPECT_NE(s.status().message().find("replaced since the dataset was opened"), std::string::npos);
  server_->ClearFaults();
  // Reopened: the new version, which reads (its block checksums differ from the old one's).
  server_->Put("bkt", key, server_->Get("bkt", key));
  auto again = Open();
  Result<Sample> fresh = again->Read(3);
  EXPECT_FALSE(fresh.ok());  // the flipped byte is in the new version's bytes
  EXPECT_NE(fresh.status().message().find("the object in the bucket is damaged"), std::string::npos)
      << fresh.status().ToString();
}

// Issue 45, through the S3 client: a server that ignores If-Match and sends no ETag (on GET and
// HEAD alike) after the object was replaced; once the right object is back, the read heals.
TEST_F(S3CacheHealTest, ServerWithoutEtagsHealsOnceTheRightObjectIsBack) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  const SampleLocation loc = Where(3);
  const std::string key = "ds/" + ShardName(loc.shard);
  const std::string original = server_->Get("bkt", key);
  std::string changed = original;
  changed[loc.offset + 20] = static_cast<char>(changed[loc.offset + 20] ^ 1);
  server_->Put("bkt", key, changed);
  FaultRule r;
  r.faults = {Fault::kIgnoreCondition, Fault::kNoGeneration};
  r.times = -1;
  server_->AddFault(r);
  Result<Sample> s = ds->Read(3);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().sys_errno(), ESTALE) << s.status().ToString();
  EXPECT_NE(s.status().message().find("does not hold the bytes the index records"),
            std::string::npos)
      << s.status().ToString();
  server_->Put("bkt", key, original);  // back; the server still ignores If-Match, sends no ETag
  Result<Sample> healed = ds->Read(3);
  ASSERT_TRUE(healed.ok()) << healed.status().ToString();
  testing::ExpectSampleEq(*healed, testing::StandardSample(3));
  ExpectAll(*ds);
}

TEST_F(S3CacheHealTest, ManifestCutShortIsNeverCached) {
  FaultRule r;
  r.faults = {Fault::kCutUnmarked};
  r.method = "GET";
  r.key_contains = "manifest.json";
  r.times = -1;
  server_->AddFault(r);
  Result<std::shared_ptr<Dataset>> bad = Dataset::Open(kUrl, options_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("received"), std::string::npos) << bad.status().ToString();
  server_->ClearFaults();
  r.times = 1;
  server_->AddFault(r);  // once: the next download is whole
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  ExpectAll(*ds);
  EXPECT_EQ(testing::ReadFileToString(Cached("manifest.json")),
            server_->Get("bkt", "ds/manifest.json"));
}

TEST_F(S3CacheHealTest, CachedManifestAndIndexDamagedOnDiskAreRepaired) {
  {
    auto ds = Open();
    ExpectAll(*ds);
  }
  const std::string manifest = server_->Get("bkt", "ds/manifest.json");
  const std::string index = server_->Get("bkt", "ds/index.lsi");
  testing::FlipByte(Cached("manifest.json"), manifest.size() / 2);
  testing::FlipByte(Cached("index.lsi"), 40);  // the head
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  ExpectAll(*ds);
  EXPECT_EQ(testing::ReadFileToString(Cached("manifest.json")), manifest);
  EXPECT_EQ(testing::ReadFileToString(Cached("index.lsi")), index);
  EXPECT_EQ(Warnings().size(), 2u);
  // A block of the index (read on first use), damaged under an open dataset.
  testing::FlipByte(Cached("index.lsi"), index.size() - 10);
  auto fresh = Open();
  ExpectAll(*fresh);
  EXPECT_EQ(testing::ReadFileToString(Cached("index.lsi")), index);
  EXPECT_EQ(Warnings().size(), 3u);
}

TEST_F(S3CacheHealTest, IndexDamagedInTransferIsNeverCached) {
  FaultRule r;
  r.faults = {Fault::kCorrupt};
  r.method = "GET";
  r.key_contains = "index.lsi";
  r.times = -1;
  server_->AddFault(r);
  Result<std::shared_ptr<Dataset>> bad = Dataset::Open(kUrl, options_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_NE(bad.status().message().find("on two downloads"), std::string::npos)
      << bad.status().ToString();
  server_->ClearFaults();
  r.times = 1;
  server_->AddFault(r);
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  ExpectAll(*ds);
}

TEST_F(S3CacheHealTest, ShardHeaderDamagedOnDiskIsFetchedAgain) {
  {
    auto ds = Open();
    ExpectAll(*ds);
  }
  testing::FlipByte(Cached(ShardName(0)), 100);  // block 0: the shard header
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  ExpectAll(*ds);
  ASSERT_GE(Warnings().size(), 1u);
  EXPECT_NE(Warnings()[0].find("shard header was damaged"), std::string::npos) << Warnings()[0];
}

TEST_F(S3CacheHealTest, ShardHeaderDamagedInTransfer) {
  FaultRule r;
  r.faults = {Fault::kCorrupt};
  r.method = "GET";
  r.key_contains = ShardName(0);
  r.range_offset = 0;
  r.arg = 100;
  server_->AddFault(r);  // the header probe at open
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(server_->FaultsApplied(), 1u);
  server_->AddFault(r);  // block 0 when read: its header is checked as it lands
  ExpectAll(*ds);
  EXPECT_EQ(server_->FaultsApplied(), 2u);
  auto again = Open();
  ExpectAll(*again);
  EXPECT_TRUE(Warnings().empty());
}

// Issue 35: a node-local loader whose cache_size is below what its node's share fills in cache
// blocks says so at creation, naming the node, the sizes and what to do; one whose share fits,
// and a global loader, say nothing of it.
TEST_F(S3CacheHealTest, NodeLocalLoaderWarnsWhenItsShareExceedsCacheSize) {
  const auto make = [&](uint64_t cache_size, bool node_local) {
    options_.cache_size = cache_size;
    std::shared_ptr<Dataset> ds = Open();
    LoaderOptions o;
    if (node_local) o.order = NodeLocalOrder{.nodes = 2};
    o.world_size = 2;
    o.rank = 1;
    o.memory_budget = 1 << 20;
    testing::RecordingSink sink;
    auto loader = StreamingLoader::Make(ds, o, {nullptr, sink.AsSink()});
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    return sink.Matching("locality='node'");
  };
  // A quarter of the dataset: room for what Open caches (one block of each shard, the index),
  // not for a node's half.
  uint64_t total = 0;
  {
    auto local = Dataset::Open((dir_ / "ds").string());
    ASSERT_TRUE(local.ok());
    for (const ShardInfo& sh : (*local)->shards()) total += sh.size;
  }
  const uint64_t quarter = total / 4 / kBlock * kBlock;
  const std::vector<std::string> small = make(quarter, true);
  ASSERT_EQ(small.size(), 1u);
  for (const char* part : {"node 1 of 2", kUrl, "more than cache_size", "fetches up to",
                           "raise cache_size to at least", "--nodes 2"})
    EXPECT_NE(small[0].find(part), std::string::npos) << part << " not in: " << small[0];
  EXPECT_TRUE(make(uint64_t{1} << 30, true).empty());
  EXPECT_TRUE(make(quarter, false).empty());
}

}  // namespace
}  // namespace libshard
