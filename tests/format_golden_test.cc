// Format stability: datasets checked in under tests/data/golden_v1*/ must keep reading, and the
// writer must keep producing the same bytes (FORMAT.md is version 1 forever).
//
// golden_v1 and golden_v1_zstd were written before the shard-uid revision (FORMAT.md §4.1: shard
// uid 0, index flags 0); they are frozen and never regenerated: readers must keep accepting them
// unchanged. golden_v1_uids is what the writer produces now (with a fixed shard_uid_seed).
//
// Regenerate golden_v1_uids (only when the format changes, never to make a failing test pass):
//   LIBSHARD_REGENERATE_GOLDEN=1 build/tests/format_golden_test --gtest_filter='*Regenerate*'
#include <gtest/gtest.h>

#include <cstdlib>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

const std::filesystem::path kGoldenDir = LIBSHARD_TEST_DATA_DIR;

// Every dtype, ranks 0..3, a zero-size tensor, metadata of every type.
Schema GoldenSchema() {
  Schema s;
  s.fields = {{"input_ids", DType::kInt64, 1, 0},     {"mask", DType::kBool, 1, 0},
              {"hidden", DType::kBFloat16, 3, 1},     {"half", DType::kFloat16, 2, 0},
              {"score", DType::kFloat32, 0, -1},      {"f64", DType::kFloat64, 1, -1},
              {"u8", DType::kUInt8, 2, -1},           {"i8", DType::kInt8, 1, -1},
              {"i16", DType::kInt16, 1, -1},          {"i32", DType::kInt32, 1, -1},
              {"u16", DType::kUInt16, 1, -1},         {"u32", DType::kUInt32, 1, -1},
              {"u64", DType::kUInt64, 1, -1},         {"e4m3", DType::kFloat8E4M3FN, 1, -1},
              {"e5m2", DType::kFloat8E5M2, 1, -1}};
  s.length_field = 0;
  return s;
}

OwnedSample GoldenSample(uint64_t i) {
  const uint64_t l = 2 + 3 * i;
  std::vector<Shape> shapes = {{l}, {l}, {1, l, 16}, {l, 4}, {}, {i == 1 ? uint64_t{0} : uint64_t{3}}, {2, 5},
                               {7}, {3}, {3}, {3}, {3}, {2}, {9}, {9}};
  OwnedSample s = MakeSample(GoldenSchema(), shapes, 1000 + i, /*compressible=*/i != 2);
  s.input.source.path = "golden/sample_" + std::to_string(i) + ".pt";
  return s;
}

constexpr uint64_t kGoldenSamples = 4;

WriterOptions GoldenOptions(bool zstd) {
  WriterOptions o;
  o.fsync = false;
  o.shard_uid_seed = 0x601d;  // reproducible shard uids
  o.shard_size = 2 * 4096;  // several shards
  o.compression = zstd ? Compression::kZstd : Compression::kNone;
  o.source_root = "/golden";
  o.created_by = "libshard format_golden_test";
  return o;
}

void WriteGolden(const std::filesystem::path& dir, bool zstd) {
  std::filesystem::remove_all(dir);
  auto w = Writer::Create(dir.string(), GoldenSchema(), GoldenOptions(zstd));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = 0; i < kGoldenSamples; ++i)
    ASSERT_TRUE((*w)->Append(GoldenSample(i).input).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

void ExpectGoldenContents(const std::filesystem::path& dir, bool zstd) {
  auto ds = Dataset::Open(dir.string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->schema(), GoldenSchema());
  ASSERT_EQ((*ds)->size(), kGoldenSamples);
  EXPECT_GT((*ds)->shards().size(), 1u);
  bool any_compressed = false;
  for (uint64_t i = 0; i < kGoldenSamples; ++i) {
    OwnedSample want = GoldenSample(i);
    auto s = (*ds)->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, want);
    EXPECT_EQ(*(*ds)->source(i), want.input.source);
    EXPECT_EQ((*ds)->length(i), 2 + 3 * i);
    any_compressed |= ((*ds)->location(i).flags & kSampleFlagZstd) != 0;
  }
  EXPECT_EQ(any_compressed, zstd);
}

TEST(FormatGoldenTest, CheckedInDatasetsStillRead) {
  ExpectGoldenContents(kGoldenDir / "golden_v1", false);
  ExpectGoldenContents(kGoldenDir / "golden_v1_zstd", true);
  ExpectGoldenContents(kGoldenDir / "golden_v1_uids", false);
}

// The files written before shard uids carry none, and are read without the ownership check.
TEST(FormatGoldenTest, PreUidDatasetsHaveNoShardUids) {
  for (const char* name : {"golden_v1", "golden_v1_zstd"}) {
    auto ds = Dataset::Open((kGoldenDir / name).string());
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    for (const ShardInfo& s : (*ds)->shards()) EXPECT_EQ(s.uid, 0u) << s.path;
  }
  auto ds = Dataset::Open((kGoldenDir / "golden_v1_uids").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  for (const ShardInfo& s : (*ds)->shards()) EXPECT_NE(s.uid, 0u) << s.path;
}

TEST(FormatGoldenTest, WriterStillProducesTheSameBytes) {
  TempDir dir;
  WriteGolden(dir.path(), false);
  for (const auto& e : std::filesystem::directory_iterator(kGoldenDir / "golden_v1_uids")) {
    const std::string name = e.path().filename().string();
    if (name == "manifest.json") continue;  // holds created_at
    if (name.starts_with(".")) continue;     // e.g. the writer's lock file, not dataset bytes
    EXPECT_EQ(ReadFileToString(e.path()), ReadFileToString(dir / name)) << name << " changed";
  }
  // The manifest differs only in its timestamp.
  auto strip = [](std::string m) {
    size_t at = m.find("\"created_at\"");
    return m.erase(at, m.find('\n', at) - at);
  };
  EXPECT_EQ(strip(ReadFileToString(kGoldenDir / "golden_v1_uids" / "manifest.json")),
            strip(ReadFileToString(dir / "manifest.json")));
}

TEST(FormatGoldenTest, Regenerate) {
  if (!std::getenv("LIBSHARD_REGENERATE_GOLDEN")) GTEST_SKIP() << "set LIBSHARD_REGENERATE_GOLDEN=1";
  WriteGolden(kGoldenDir / "golden_v1_uids", false);
  std::filesystem::remove(kGoldenDir / "golden_v1_uids" / ".libshard.lock");
}

}  // namespace
}  // namespace libshard::testing
