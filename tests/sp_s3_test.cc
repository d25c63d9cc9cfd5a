// Sequence-parallel reads of an s3:// dataset (docs/guide/long-context.md "What each storage
// path reads", docs/CACHE.md): each rank's cache fetches only the blocks that cover its token
// slice of every field (row blocks, FORMAT.md §3.10), raw or with field codecs, so a group of 4
// fetches about one copy of each sample from the object store, not 4 and not one per rank, and
// every slice is bit for bit the local dataset's. Dataset::Read(i, ReadRequest{rows}) on s3://
// fetches only its rows' blocks too. A slice whose cached blocks are damaged is fetched again
// (docs/CACHE.md §7); one damaged in the bucket is an error naming the object. In-process against the S3 front (testutil/fake_s3.h), whose
// memory server counts the ranged GETs of the shards (one cache block each).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "codec/row_blocks.h"
#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/sequence_parallel.h"
#include "libshard/writer.h"
#include "remote/cache_log.h"
#include "testutil/fake_s3.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kCacheBlock = 16384;  // LIBSHARD_CACHE_BLOCK_SIZE of these tests
constexpr uint64_t kRowBlockBytes = 4096;
constexpr uint64_t kHidden = 256;  // hidden_state rows of 512 bytes
constexpr uint64_t kSamples = 8;
constexpr uint32_t kDegree = 4;

uint64_t SampleLength(uint64_t i) { return 3000 + 457 * i; }  // 1.5 .. 3.1 MB of hidden_state

class SpS3Test : public ::testing::TestWithParam<bool> {  // param: field codecs (compress auto)
 protected:
  void SetUp() override {
    for (const auto& [k, v] : std::vector<std::pair<const char*, std::string>>{
             {"AWS_ENDPOINT_URL_S3", kS3Endpoint},
             {"AWS_ACCESS_KEY_ID", "test"},
             {"AWS_SECRET_ACCESS_KEY", "test"},
             {"AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"},
             {"AWS_CONFIG_FILE", "/nonexistent"},
             {"LIBSHARD_CACHE_BLOCK_SIZE", std::to_string(kCacheBlock)},
             {"LIBSHARD_S3_BACKOFF_MS", "1"},
             {"LIBSHARD_CACHE_MIN_FREE", "0"}})
      ::setenv(k, v.c_str(), 1);
    server_ = objstore::MemoryServer::Make();
    front_ = ServeS3(server_);
    WriterOptions o = FastOptions();
    o.shard_size = 8 << 20;
    if (GetParam()) o.field_codecs = FieldCodecPolicy::kAuto;
    {
      codec::ScopedWriterRowBlockBytes blocks(kRowBlockBytes);
      auto writer = Writer::Create((dir_ / "ds").string(), EagleSchema(), o);
      ASSERT_TRUE(writer.ok()) << writer.status().ToString();
      for (uint64_t i = 0; i < kSamples; ++i) {
        const uint64_t len = SampleLength(i);
        OwnedSample s =
            MakeSample(EagleSchema(), {{len}, {len}, {1, len, kHidden}}, i, GetParam());
        ASSERT_TRUE((*writer)->Append(s.input).ok());
      }
      ASSERT_TRUE((*writer)->Finish().ok());
    }
    auto local = Dataset::Open((dir_ / "ds").string());
    ASSERT_TRUE(local.ok()) << local.status().ToString();
    local_ = *local;
    ASSERT_TRUE(local_->has_row_blocks());
    for (uint64_t i = 0; i < kSamples; ++i) stored_ += local_->location(i).stored_size;
    server_->PutDirectory("bkt", "ds", (dir_ / "ds").string());
  }
  void TearDown() override {
    for (const char* k : {"AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                          "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                          "LIBSHARD_CACHE_BLOCK_SIZE", "LIBSHARD_S3_BACKOFF_MS",
                          "LIBSHARD_CACHE_MIN_FREE"})
      ::unsetenv(k);
  }

  // The s3:// dataset over a cache directory of its own (`cache`: its name).
  std::shared_ptr<Dataset> OpenS3(const std::string& cache) {
    DatasetOptions o;
    o.cache_dir = (dir_ / ("cache-" + cache)).string();
    auto ds = Dataset::Open("s3://bkt/ds", o);
    EXPECT_TRUE(ds.ok()) << ds.status().ToString();
    return ds.ok() ? *ds : nullptr;
  }
  // Bytes of the shards fetched from the bucket since the last ResetCounts: one cache block per
  // ranged GET (the shards' last blocks are shorter: an upper bound).
  uint64_t FetchedBytes() const { return server_->Requests("GET", ".lss") * kCacheBlock; }

  static LoaderOptions SpOptions(uint32_t rank) {
    LoaderOptions o;
    o.order = Order::Shuffled(5);
    o.rank = rank;
    o.world_size = kDegree;  // one group of kDegree ranks
    o.sequence_parallel.degree = kDegree;
    o.memory_budget = 64 << 20;
    o.pin_memory = PinMemory::kOff;
    return o;
  }

  // Rank `rank`'s samples over `ds`, each checked bit for bit against the local dataset's rows.
  void LoadAndCheck(const std::shared_ptr<Dataset>& ds, uint32_t rank) {
    auto loader = Loader::Create(ds, SpOptions(rank));
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    uint64_t served = 0;
    while (true) {
      auto batch = (*loader)->Next();
      ASSERT_TRUE(batch.ok()) << batch.status().ToString();
      if (!batch->has_value()) break;
      for (const Sample& got : (*batch)->samples) {
        ++served;
        const uint64_t i = got.index();
        SCOPED_TRACE("sample " + std::to_string(i) + " rank " + std::to_string(rank));
        ASSERT_TRUE(got.has_sequence_slice());
        const SequenceSlice& slice = got.sequence_slice().slice;
        SplitRequest req;
        req.length = local_->length(i);
        req.sp_size = kDegree;
        req.sp_rank = rank;
        auto want = SliceOf(SplitRule::kEven, req);
        ASSERT_TRUE(want.ok());
        EXPECT_EQ(slice.start, want->start);
        EXPECT_EQ(slice.stop, want->stop);
        ReadRequest request;
        request.rows = RowRange{want->start, want->stop};
        auto cut = local_->Read(i, request);
        ASSERT_TRUE(cut.ok()) << cut.status().ToString();
        for (const Field& field : local_->schema().fields) {
          const TensorView* g = got.Find(field.name);
          const TensorView* c = cut->Find(field.name);
          ASSERT_TRUE(g != nullptr && c != nullptr) << field.name;
          EXPECT_EQ(g->shape, c->shape) << field.name;
          ASSERT_EQ(g->nbytes, c->nbytes) << field.name;
          EXPECT_TRUE(c->nbytes == 0 || std::memcmp(g->data, c->data, c->nbytes) == 0)
              << field.name << ": the s3:// slice differs from the local dataset's rows";
        }
      }
    }
    EXPECT_EQ(served, kSamples);
  }

  TempDir dir_;
  std::shared_ptr<objstore::MemoryServer> server_;
  std::unique_ptr<S3Front> front_;
  std::shared_ptr<Dataset> local_;
  uint64_t stored_ = 0;  // the samples' stored bytes
};

// Each rank on a node of its own (a cache of its own) fetches about its quarter of every
// sample; the group's ranks together about one copy.
TEST_P(SpS3Test, EachRankFetchesItsSliceAndTheGroupAboutOneCopy) {
  uint64_t group = 0;
  for (uint32_t r = 0; r < kDegree; ++r) {
    std::shared_ptr<Dataset> ds = OpenS3("rank" + std::to_string(r));
    ASSERT_NE(ds, nullptr);
    server_->ResetCounts();
    LoadAndCheck(ds, r);
    const uint64_t fetched = FetchedBytes();
    group += fetched;
    RecordProperty("rank" + std::to_string(r) + "_fetched", std::to_string(fetched));
    // A quarter of each sample plus the blocks at each end of each field's rows.
    EXPECT_LT(static_cast<double>(fetched), 0.40 * static_cast<double>(stored_))
        << "rank " << r << " fetched " << fetched << " of " << stored_ << " stored bytes";
  }
  std::printf("s3 SP group of %u (%s): fetched %.3fx the stored bytes (%llu of %llu)\n", kDegree,
              GetParam() ? "field codecs" : "raw",
              static_cast<double>(group) / static_cast<double>(stored_),
              static_cast<unsigned long long>(group), static_cast<unsigned long long>(stored_));
  EXPECT_LT(static_cast<double>(group), 1.35 * static_cast<double>(stored_));
}

// The group's ranks on one node (one cache): one copy of each sample.
TEST_P(SpS3Test, TheGroupOnOneNodeFetchesAboutOneCopy) {
  std::shared_ptr<Dataset> ds = OpenS3("node");
  ASSERT_NE(ds, nullptr);
  server_->ResetCounts();
  for (uint32_t r = 0; r < kDegree; ++r) LoadAndCheck(ds, r);
  const uint64_t fetched = FetchedBytes();
  std::printf("s3 SP group of %u on one node (%s): fetched %.3fx the stored bytes\n", kDegree,
              GetParam() ? "field codecs" : "raw",
              static_cast<double>(fetched) / static_cast<double>(stored_));
  EXPECT_LT(static_cast<double>(fetched), 1.2 * static_cast<double>(stored_))
      << fetched << " of " << stored_;
}

// Dataset::Read(i, ReadRequest{rows}) on s3:// fetches only the blocks of its rows, checked, and
// equals the local dataset's read.
TEST_P(SpS3Test, ReadOfRowsFetchesOnlyTheirBlocks) {
  std::shared_ptr<Dataset> ds = OpenS3("rows");
  ASSERT_NE(ds, nullptr);
  EXPECT_TRUE(ds->has_row_blocks());
  server_->ResetCounts();
  for (uint64_t i = 0; i < kSamples; ++i) {
    ReadRequest request;
    request.rows = RowRange{local_->length(i) / 2, local_->length(i) / 2 + local_->length(i) / 4};
    auto got = ds->Read(i, request);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto want = local_->Read(i, request);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    EXPECT_EQ(got->rows(), want->rows());
    for (const Field& field : local_->schema().fields) {
      const TensorView* g = got->Find(field.name);
      const TensorView* w = want->Find(field.name);
      ASSERT_TRUE(g != nullptr && w != nullptr);
      ASSERT_EQ(g->nbytes, w->nbytes) << "sample " << i << " " << field.name;
      EXPECT_EQ(std::memcmp(g->data, w->data, w->nbytes), 0) << "sample " << i << " " << field.name;
    }
  }
  const uint64_t fetched = FetchedBytes();
  EXPECT_LT(static_cast<double>(fetched), 0.40 * static_cast<double>(stored_))
      << fetched << " of " << stored_;
}

// A byte of hidden_state in rank 2's quarter of sample 3 (of 4): in the shard, and its shard.
std::pair<std::string, uint64_t> DamageSpot(const Dataset& local) {
  const SampleLocation loc = local.location(3);
  const TensorLocation t = local.tensor(3, 2);  // hidden_state, raw: stored as it is
  return {fs::path(local.shards()[loc.shard].path).filename().string(),
          loc.offset + t.offset + t.nbytes * 5 / 8};
}

// The object damaged in the bucket under rank 2's slice: the checked read fails and blames the
// bucket's object (after one fresh download), never serving the bytes; the other ranks' rows of
// the same sample read.
TEST_P(SpS3Test, DamageInTheBucketIsAnErrorNamingIt) {
  if (GetParam()) GTEST_SKIP() << "raw samples: the damaged byte's place is the tensor's";
  const auto [shard, at] = DamageSpot(*local_);
  server_->Damage("bkt", "ds/" + shard, at);
  std::shared_ptr<Dataset> ds = OpenS3("damaged");
  ASSERT_NE(ds, nullptr);
  const uint64_t len = local_->length(3);
  ReadRequest request;
  request.rows = RowRange{len / 2, len * 3 / 4};
  auto got = ds->Read(3, request);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorruption) << got.status().ToString();
  EXPECT_NE(got.status().message().find("the object in the bucket is damaged"), std::string::npos)
      << got.status().ToString();
  request.rows = RowRange{0, len / 4};  // rank 0's rows: not damaged
  EXPECT_TRUE(ds->Read(3, request).ok());
}

// The cached copy damaged on this node's disk under rank 2's slice: the slice's blocks are
// fetched again (a warning) and the read serves the right bytes, through Dataset::Read(i, rows)
// and through the loader.
TEST_P(SpS3Test, DamagedCachedSliceIsHealed) {
  if (GetParam()) GTEST_SKIP() << "raw samples: the damaged byte's place is the tensor's";
  std::vector<std::string> warnings;
  std::mutex mu;
  remote::CacheWarningSink previous = remote::SetCacheWarningSink([&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    warnings.push_back(line);
  });
  const auto [shard, at] = DamageSpot(*local_);
  std::shared_ptr<Dataset> ds = OpenS3("heal");
  ASSERT_NE(ds, nullptr);
  const uint64_t len = local_->length(3);
  ReadRequest request;
  request.rows = RowRange{len / 2, len * 3 / 4};
  ASSERT_TRUE(ds->Read(3, request).ok());  // cached now
  const auto flip = [&, shard = shard, at = at] {
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "cache-heal")) {
      const std::string f = e.path().filename().string();
      if (e.path().parent_path().filename() != "objects" || f.rfind(shard + ".", 0) != 0 ||
          f.find(".blocks") != std::string::npos || f.find(".tmp-") != std::string::npos)
        continue;
      std::fstream file(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      file.seekg(static_cast<std::streamoff>(at));
      char c = 0;
      file.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      file.seekp(static_cast<std::streamoff>(at));
      file.write(&c, 1);
      return true;
    }
    return false;
  };
  ASSERT_TRUE(flip());
  auto got = ds->Read(3, request);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto want = local_->Read(3, request);
  ASSERT_TRUE(want.ok());
  const TensorView* g = got->Find("hidden_state");
  const TensorView* w = want->Find("hidden_state");
  ASSERT_EQ(g->nbytes, w->nbytes);
  EXPECT_EQ(std::memcmp(g->data, w->data, w->nbytes), 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("the cached copy was damaged"), std::string::npos) << warnings[0];
  }
  // The loader's row-range reads heal the same way (rank 2 reads the damaged rows).
  ASSERT_TRUE(flip());
  LoadAndCheck(ds, 2);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(warnings.size(), 2u);
  }
  remote::SetCacheWarningSink(previous);
}

// An s3:// dataset whose index is version 3 (no row blocks): a rank's slice reads each field
// whole through the cache, the same rows, and the note says so once naming the URL and upgrading
// at the source (never `libshard upgrade` of the cache's copy).
TEST_P(SpS3Test, OlderIndexReadsFieldsWholeAndSaysWhereToUpgrade) {
  RewriteIndexAsV3(dir_ / "ds");
  server_->PutDirectory("bkt", "v3", (dir_ / "ds").string());
  DatasetOptions o;
  o.cache_dir = (dir_ / "cache-v3").string();
  auto ds = Dataset::Open("s3://bkt/v3", o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_FALSE((*ds)->has_row_blocks());
  ::testing::internal::CaptureStderr();
  LoadAndCheck(*ds, 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("libshard: s3://bkt/v3: index version 3 has no row blocks"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("upload it again"), std::string::npos) << err;
  EXPECT_EQ(err.find("cache-v3"), std::string::npos) << "names the cache's copy: " << err;
}

INSTANTIATE_TEST_SUITE_P(Stored, SpS3Test, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("FieldCodecs") : std::string("Raw");
                         });

}  // namespace
}  // namespace libshard::testing
