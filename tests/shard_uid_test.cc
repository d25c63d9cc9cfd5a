// Shard ownership (FORMAT.md §3.1, §3.4, §4.1): every shard carries a uid in its header that the
// index records, so a shard file of another write is refused at open instead of being served
// with this dataset's names, shapes and metadata.
#include <gtest/gtest.h>

#include <set>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/legacy/index_v1.h"
#include "format/shard_format.h"
#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/merge.h"
#include "libshard/writer.h"
#include "testutil/index_v1_encoder.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

using format::GetU64;
using format::PutU64;

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

WriterOptions SmallShards() {
  WriterOptions o = FastOptions();
  o.shard_size = 3 * 4096;
  return o;
}

// Samples of equal shapes whose bytes depend on `seed`: two writes give shards of equal sizes.
void WriteFixed(const std::filesystem::path& dir, uint64_t seed, uint64_t n) {
  auto w = Writer::Create(dir.string(), EagleSchema(), SmallShards());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = 0; i < n; ++i) {
    OwnedSample s = MakeEagleSample(seed + i, 8, 24);
    s.input.source.path = "s" + std::to_string(seed) + "_" + std::to_string(i) + ".pt";
    ASSERT_TRUE((*w)->Append(s.input).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

uint64_t HeaderUid(const std::filesystem::path& shard) {
  std::string h = ReadFileToString(shard).substr(0, format::kShardHeaderSize);
  uint64_t uid = 0;
  EXPECT_TRUE(format::CheckShardHeader(Bytes(h), shard.string(), &uid).ok());
  return uid;
}

TEST(ShardUidTest, ShardHeaderRoundTrip) {
  const std::string h = format::EncodeShardHeader(7, 0x0123456789abcdefull);
  ASSERT_EQ(h.size(), format::kShardHeaderSize);
  EXPECT_EQ(GetU64(Bytes(h).data() + 16), 0x0123456789abcdefull);  // §4.1: offset 16
  uint64_t uid = 0;
  ASSERT_TRUE(format::CheckShardHeader(Bytes(h), "x.lss", &uid).ok());
  EXPECT_EQ(uid, 0x0123456789abcdefull);
  // A header of the earlier revision (uid 0) still checks.
  const std::string old = format::EncodeShardHeader(7, 0);
  ASSERT_TRUE(format::CheckShardHeader(Bytes(old), "x.lss", &uid).ok());
  EXPECT_EQ(uid, 0u);
  // Bytes 24.. stay reserved.
  std::string bad = h;
  bad[24] = 1;
  auto* p = reinterpret_cast<std::byte*>(bad.data());
  PutU64(p + 4088, format::Xxh3WithHole({p, bad.size()}, 4088));
  ExpectError(format::CheckShardHeader(Bytes(bad), "x.lss"), StatusCode::kCorruption,
              {"x.lss", "offset 24", "reserved"});
}

TEST(ShardUidTest, SeededUidsAreDistinctAndNonZero) {
  EXPECT_NE(format::ShardUidFromSeed(1, 0), format::ShardUidFromSeed(1, 1));
  EXPECT_NE(format::ShardUidFromSeed(1, 0), format::ShardUidFromSeed(2, 0));
  for (uint32_t k = 0; k < 1000; ++k) EXPECT_NE(format::ShardUidFromSeed(k, k), 0u);
}

Schema OneField() {
  Schema s;
  s.fields = {{"x", DType::kUInt8, 1, 0}};
  s.length_field = 0;
  return s;
}

TEST(ShardUidTest, IndexRecordsUidsBehindFlag) {
  std::vector<format::IndexShard> shards = {{"shard-00000.lss", 4096, 0, 0x1111},
                                            {"shard-00001.lss", 4096, 0, 0x2222}};
  const std::string with = EncodeIndexV1(OneField(), shards, {});
  auto v = format::legacy::IndexV1View::Parse(Bytes(with), "index.lsi");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(v->has_shard_uids());
  EXPECT_EQ(v->shards()[0].uid, 0x1111u);
  EXPECT_EQ(v->shards()[1].uid, 0x2222u);
  const std::byte* h = Bytes(with).data();
  EXPECT_EQ(format::GetU32(h + 12), 1u);  // flags bit 0
  EXPECT_EQ(GetU64(h + 100) % 8, 0u);    // 8-byte aligned within the blob
  for (size_t k = 108; k < 120; ++k) EXPECT_EQ(h[k], std::byte{0}) << k;

  // Without uids (shards of the earlier revision) the header is as before: flags, 100..119 zero.
  for (auto& s : shards) s.uid = 0;
  const std::string without = EncodeIndexV1(OneField(), shards, {});
  auto w = format::legacy::IndexV1View::Parse(Bytes(without), "index.lsi");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE(w->has_shard_uids());
  for (size_t k = 12; k < 16; ++k) EXPECT_EQ(Bytes(without)[k], std::byte{0});
  for (size_t k = 100; k < 120; ++k) EXPECT_EQ(Bytes(without)[k], std::byte{0});
}

// Re-checksums a forged index so that only the forged field can be caught.
std::string Reseal(std::string s) {
  auto* p = reinterpret_cast<std::byte*>(s.data());
  PutU64(p + 120, format::Xxh3WithHole({p, s.size()}, 120));
  return s;
}

TEST(ShardUidTest, IndexRejectsForgedUidFields) {
  std::vector<format::IndexShard> shards = {{"shard-00000.lss", 4096, 0, 0x1111}};
  const std::string good = EncodeIndexV1(OneField(), shards, {});
  auto expect = [](std::string s, std::vector<std::string> parts) {
    ExpectError(format::legacy::IndexV1View::Parse(Bytes(Reseal(std::move(s))), "index.lsi").status(),
                StatusCode::kCorruption, parts);
  };
  std::string s = good;
  PutU64(reinterpret_cast<std::byte*>(s.data()) + 100, GetU64(Bytes(good).data() + 100) + 4);
  expect(s, {"index.lsi", "offset 100", "shard uids", "unaligned or outside the blob"});
  s = good;
  PutU64(reinterpret_cast<std::byte*>(s.data()) + 100, uint64_t{1} << 20);
  expect(s, {"offset 100", "outside the blob"});
  s = good;
  format::PutU32(reinterpret_cast<std::byte*>(s.data()) + 12, 0);  // offset without the flag
  expect(s, {"offset 100", "flag"});
  s = good;
  format::PutU32(reinterpret_cast<std::byte*>(s.data()) + 12, 3);  // bit 1 is reserved
  expect(s, {"offset 12", "unknown header flags"});
  s = good;
  s[110] = 1;  // 108..119 stay reserved
  expect(s, {"offset 110", "reserved"});
}

TEST(ShardUidTest, WriterGivesEveryShardARandomUid) {
  TempDir a, b;
  WriteFixed(a.path(), 0, 6);
  WriteFixed(b.path(), 0, 6);
  auto da = Dataset::Open(a.path().string());
  auto db = Dataset::Open(b.path().string());
  ASSERT_TRUE(da.ok() && db.ok());
  ASSERT_GT((*da)->shards().size(), 1u);
  std::set<uint64_t> seen;
  for (const Dataset* ds : {da->get(), db->get()})
    for (const ShardInfo& s : ds->shards()) {
      EXPECT_NE(s.uid, 0u);
      EXPECT_EQ(s.uid, HeaderUid(s.path));
      EXPECT_TRUE(seen.insert(s.uid).second) << "uid repeated: " << s.path;
    }
}

// Two writers' output mixed in one directory: a shard of B copied over A's shard of the same
// size. Before uids, Open succeeded and A's names and sources came with B's tensors.
TEST(ShardUidTest, ShardOfAnotherDatasetIsRefusedAtOpen) {
  TempDir a, b;
  WriteFixed(a.path(), 0, 6);
  WriteFixed(b.path(), 1000, 6);
  const std::string shard = format::ShardFileName(1);
  ASSERT_EQ(std::filesystem::file_size(a / shard), std::filesystem::file_size(b / shard));
  std::filesystem::copy_file(b / shard, a / shard,
                             std::filesystem::copy_options::overwrite_existing);
  const uint64_t foreign = HeaderUid(a / shard);
  ExpectError(Dataset::Open(a.path().string()).status(), StatusCode::kCorruption,
              {shard, "shard was written for another dataset", format::Hex16(foreign),
               "index expects", "mixes two writers' output",
               "re-run libshard pack into an empty directory"});
}

TEST(ShardUidTest, ResumeKeepsTheContinuedShardsUid) {
  TempDir dir;
  WriterOptions o = SmallShards();
  o.journal_every_bytes = 4096;
  {
    auto w = Writer::Create(dir.path().string(), EagleSchema(), o);
    ASSERT_TRUE(w.ok());
    for (uint64_t i = 0; i < 4; ++i)
      ASSERT_TRUE((*w)->Append(MakeEagleSample(i, 8, 24).input).ok());
  }  // destroyed without Finish: an interrupted write
  const std::filesystem::path tmp = dir / (format::ShardFileName(1) + ".tmp");
  ASSERT_TRUE(std::filesystem::exists(tmp));
  const uint64_t uid_before = HeaderUid(tmp);
  ASSERT_NE(uid_before, 0u);
  auto r = Writer::Resume(dir.path().string(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const uint64_t next = (*r)->samples_written();
  ASSERT_GT(next, 2u);  // the resume continues shard 1
  for (uint64_t i = next; i < 8; ++i)
    ASSERT_TRUE((*r)->Append(MakeEagleSample(i, 8, 24).input).ok());
  ASSERT_TRUE((*r)->Finish().ok());
  r->reset();
  auto ds = Dataset::Open(dir.path().string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->shards()[1].uid, uid_before);
  for (uint64_t i = 0; i < 8; ++i) ExpectSampleEq(*(*ds)->Read(i), MakeEagleSample(i, 8, 24));
}

TEST(ShardUidTest, AppendKeepsUidsAndMergeRecordsThem) {
  TempDir a, b, out;
  WriteFixed(a.path(), 0, 4);
  WriteFixed(b.path(), 100, 4);
  std::vector<uint64_t> uids;
  {
    auto ds = Dataset::Open(a.path().string());
    ASSERT_TRUE(ds.ok());
    for (const ShardInfo& s : (*ds)->shards()) uids.push_back(s.uid);
  }
  {
    auto w = Writer::OpenForAppend(a.path().string(), SmallShards());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = 0; i < 3; ++i)
      ASSERT_TRUE((*w)->Append(MakeEagleSample(50 + i, 8, 24).input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto appended = Dataset::Open(a.path().string());
  ASSERT_TRUE(appended.ok()) << appended.status().ToString();
  ASSERT_GT((*appended)->shards().size(), uids.size());
  for (size_t k = 0; k < (*appended)->shards().size(); ++k) {
    const uint64_t uid = (*appended)->shards()[k].uid;
    if (k < uids.size()) {
      EXPECT_EQ(uid, uids[k]) << k;
    } else {
      EXPECT_NE(uid, 0u) << k;
    }
  }

  ASSERT_TRUE(MergeDatasets(out.path().string(), {a.path().string(), b.path().string()}).ok());
  auto merged = Dataset::Open(out.path().string());
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  auto pb = Dataset::Open(b.path().string());
  ASSERT_TRUE(pb.ok());
  std::vector<uint64_t> want;
  for (const Dataset* ds : {appended->get(), pb->get()})
    for (const ShardInfo& s : ds->shards()) want.push_back(s.uid);
  ASSERT_EQ((*merged)->shards().size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ((*merged)->shards()[k].uid, want[k]) << k;
}

}  // namespace
}  // namespace libshard::testing
