// Dataset over an index of sample blocks (versions 2 to 4, as written today; FORMAT.md §3.8): Open reads the head and the lengths; each
// sample block is read and checked on first use, thread-safely; a block damaged, truncated or
// rewritten after Open fails the samples in it with a Corruption (to Read, to the loader), never a
// crash; `libshard upgrade` (UpgradeIndex) rewrites a version 1 index without touching shards.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "dataset/dataset_access.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index.h"
#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/upgrade.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

constexpr uint64_t kSamples = format::kDefaultBlockSamples + 300;  // two blocks

class DatasetBlockIndexTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    written_ = std::make_unique<TempDir>();
    WriteStandard(written_->path(), kSamples, FastOptions());
  }
  static void TearDownTestSuite() { written_.reset(); }
  void SetUp() override {
    std::filesystem::copy(written_->path(), dir_ / "ds");
    const std::string bytes = ReadFileToString(Index());
    std::vector<std::byte> b(format::AsBytes(bytes), format::AsBytes(bytes) + bytes.size());
    ASSERT_EQ(format::GetU32(b.data() + 8), format::kIndexVersion);
    auto l = format::Index::ParseHeader({b.data(), 128}, b.size(), "idx");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    auto v = format::Index::Parse(
        std::vector<std::byte>(b.begin(), b.begin() + l->head_size),
        std::vector<std::byte>(b.begin() + l->lengths_offset,
                               b.begin() + l->lengths_offset + l->lengths_size),
        b.size(), "idx");
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ASSERT_EQ(v->block_count(), 2u);
    head_size_ = l->head_size;
    block1_ = v->block_offset(1);
  }
  std::string Dir() const { return (dir_ / "ds").string(); }
  std::filesystem::path Index() const { return dir_ / "ds" / "index.lsi"; }
  std::shared_ptr<Dataset> OpenOrDie() {
    auto ds = Dataset::Open(Dir());
    EXPECT_TRUE(ds.ok()) << ds.status().ToString();
    return ds.ok() ? *ds : nullptr;
  }

  static std::unique_ptr<TempDir> written_;
  TempDir dir_;
  uint64_t head_size_ = 0;
  uint64_t block1_ = 0;
};

std::unique_ptr<TempDir> DatasetBlockIndexTest::written_;

TEST_F(DatasetBlockIndexTest, ReadsBackEverySample) {
  auto ds = OpenOrDie();
  ASSERT_TRUE(ds);
  ASSERT_EQ(ds->size(), kSamples);
  const std::vector<uint64_t> lengths = ds->lengths();
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{4096}, kSamples - 1}) {
    SCOPED_TRACE("sample " + std::to_string(i));
    auto s = ds->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, StandardSample(i));
    EXPECT_EQ(*ds->source(i), StandardSample(i).input.source);
    EXPECT_EQ(ds->length(i), lengths[i]);
    EXPECT_EQ(ds->tensor(i, 0).shape, StandardSample(i).input.tensors[0].shape);
  }
}

TEST_F(DatasetBlockIndexTest, ADamagedBlockFailsOnlyItsSamplesAndOnlyWhenUsed) {
  FlipByte(Index(), block1_ + 3);
  auto ds = OpenOrDie();  // blocks are not read at Open
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->lengths().size(), kSamples);
  EXPECT_TRUE(ds->Read(0).ok());
  EXPECT_TRUE(ds->Verify(4095).ok());
  const std::vector<std::string> where = {Index().string(), "block 1",
                                          "offset " + std::to_string(block1_),
                                          "checksum mismatch"};
  ExpectError(ds->Read(4096).status(), StatusCode::kCorruption, where);
  ExpectError(ds->Verify(kSamples - 1), StatusCode::kCorruption, where);
  ExpectError(ds->source(4100).status(), StatusCode::kCorruption, where);
  ExpectError(ds->metadata(4100).status(), StatusCode::kCorruption, where);
  // The infallible accessors give empty values rather than anything read from the damaged block.
  EXPECT_EQ(ds->location(4096).stored_size, 0u);
  EXPECT_EQ(ds->location(4096).checksum, 0u);
  EXPECT_EQ(ds->tensor(4096, 0).nbytes, 0u);
  ExpectError(internal::DatasetAccess::MakeSample(*ds, 4096, nullptr, 0, 0, nullptr).status(),
              StatusCode::kCorruption, where);
}

TEST_F(DatasetBlockIndexTest, IndexTruncatedAfterOpenFailsTheBlocksNotReadYet) {
  auto ds = OpenOrDie();
  ASSERT_TRUE(ds);
  ASSERT_TRUE(ds->Read(0).ok());  // block 0 is now in memory
  TruncateFile(Index(), block1_ + 10);
  EXPECT_TRUE(ds->Read(1).ok());
  EXPECT_TRUE(ds->Read(4095).ok());
  ExpectError(ds->Read(4096).status(), StatusCode::kCorruption,
              {Index().string(), "block 1", "changed after the dataset was opened"});
  // Reopening sees the truncation at once.
  ExpectError(Dataset::Open(Dir()).status(), StatusCode::kCorruption, {"truncated"});
}

TEST_F(DatasetBlockIndexTest, IndexRewrittenAfterOpenIsCaughtByTheBlockChecksum) {
  auto ds = OpenOrDie();
  ASSERT_TRUE(ds);
  const char junk[16] = "not an index...";
  WriteBytes(Index(), block1_ + 100, junk, sizeof junk);
  ExpectError(ds->Read(kSamples - 1).status(), StatusCode::kCorruption,
              {Index().string(), "block 1", "checksum mismatch"});
}

TEST_F(DatasetBlockIndexTest, DamagedHeadOrLengthsFailOpen) {
  FlipByte(Index(), 130);
  ExpectError(Dataset::Open(Dir()).status(), StatusCode::kCorruption,
              {Index().string(), "index checksum mismatch"});
  FlipByte(Index(), 130);
  FlipByte(Index(), head_size_ + 1);
  ExpectError(Dataset::Open(Dir()).status(), StatusCode::kCorruption,
              {Index().string(), "lengths checksum"});
}

// A codec id this reader does not know (FORMAT.md §4.3.1 defines 0..5) is refused at Open rather
// than its stored regions handed out as raw tensors. (Codecs 1..5 are decoded:
// codec_dataset_test.cc.)
TEST_F(DatasetBlockIndexTest, AFieldCodecThisReaderCannotDecodeIsUnsupported) {
  std::string s = ReadFileToString(Index());
  auto* p = reinterpret_cast<std::byte*>(s.data());
  const uint64_t field2 = 128 + 32 * 2;
  format::PutU32(p + field2 + 4, format::GetU32(p + field2 + 4) | (uint32_t{7} << 16));  // codec 7
  p[field2 + 14] = std::byte{4};  // its stored-size column width
  const uint64_t old_sum = format::GetU64(p + 120);
  format::PutU64(p + 120, format::Xxh3WithHole({p, head_size_}, 120));
  WriteStringToFile(Index(), s);
  std::string m = ReadFileToString(dir_ / "ds" / "manifest.json");
  m.replace(m.find(format::Hex16(old_sum)), 16, format::Hex16(format::GetU64(p + 120)));
  WriteStringToFile(dir_ / "ds" / "manifest.json", m);
  ExpectError(Dataset::Open(Dir()).status(), StatusCode::kUnsupported,
              {Index().string(), "field 2", "codec 7", "upgrade libshard"});
}

TEST_F(DatasetBlockIndexTest, TheLoaderReportsADamagedBlockAsAnErrorOfTheSample) {
  FlipByte(Index(), block1_ + 3);
  auto ds = OpenOrDie();
  ASSERT_TRUE(ds);
  LoaderOptions o;
  o.order = Order::Unshuffled();
  o.memory_budget = 16 << 20;
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  uint64_t good = 0;
  Status error;
  for (;;) {
    auto b = (*loader)->Next();
    if (!b.ok()) {
      error = b.status();
      break;
    }
    if (!b->has_value()) break;
    ++good;
  }
  EXPECT_EQ(good, 4096u);
  ExpectError(error, StatusCode::kCorruption, {"sample 4096", "block 1", "checksum mismatch"});
}

TEST_F(DatasetBlockIndexTest, ConcurrencyOfFirstUseOfBlocks) {
  auto ds = OpenOrDie();
  ASSERT_TRUE(ds);
  std::atomic<uint64_t> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = t; i < kSamples; i += 97) {
        auto s = ds->Read(i);
        if (!s.ok() || s->tensors()[0].shape != StandardSample(i).input.tensors[0].shape)
          failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0u);
}

TEST(UpgradeTest, RewritesAVersion1IndexAndLeavesShardsAlone) {
  TempDir dir;
  const std::filesystem::path golden = std::filesystem::path(LIBSHARD_TEST_DATA_DIR) / "golden_v1_uids";
  std::filesystem::copy(golden, dir / "ds");
  std::filesystem::remove(dir / "ds" / ".libshard.lock");
  std::vector<std::pair<std::string, std::string>> before;
  {
    auto ds = Dataset::Open((dir / "ds").string());
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    EXPECT_EQ((*ds)->index_version(), 1u);
    for (uint64_t i = 0; i < (*ds)->size(); ++i) {
      auto s = (*ds)->Read(i);
      ASSERT_TRUE(s.ok());
      std::string bytes;
      for (const TensorView& t : s->tensors())
        bytes.append(reinterpret_cast<const char*>(t.data), t.nbytes);
      before.emplace_back(bytes, (*ds)->source(i)->path);
    }
  }
  auto upgraded = UpgradeIndex((dir / "ds").string());
  ASSERT_TRUE(upgraded.ok()) << upgraded.status().ToString();
  EXPECT_TRUE(*upgraded);
  EXPECT_FALSE(std::filesystem::exists(dir / "ds" / "index.lsi"));
  const std::string index = ReadFileToString(dir / "ds" / "index.a.lsi");
  EXPECT_EQ(format::GetU32(format::AsBytes(index) + 8), 4u);
  EXPECT_LT(index.size(), std::filesystem::file_size(golden / "index.lsi"));
  auto ds = Dataset::Open((dir / "ds").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->index_version(), 4u);
  EXPECT_TRUE((*ds)->has_row_blocks());
  EXPECT_TRUE((*ds)->has_field_checksums());
  ASSERT_EQ((*ds)->size(), before.size());
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    auto s = (*ds)->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::string bytes;
    for (const TensorView& t : s->tensors())
      bytes.append(reinterpret_cast<const char*>(t.data), t.nbytes);
    EXPECT_EQ(bytes, before[i].first) << "sample " << i;
    EXPECT_EQ((*ds)->source(i)->path, before[i].second);
  }
  for (const auto& e : std::filesystem::directory_iterator(golden))
    if (e.path().extension() == ".lss")
      EXPECT_EQ(ReadFileToString(e.path()), ReadFileToString(dir / "ds" / e.path().filename()));
  // Already version 2: nothing to do.
  auto again = UpgradeIndex((dir / "ds").string());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(*again);
  ExpectError(UpgradeIndex((dir / "none").string()).status(), StatusCode::kNotFound, {"none"});
}

}  // namespace
}  // namespace libshard::testing
