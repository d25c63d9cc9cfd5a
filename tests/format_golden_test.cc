// Format stability: datasets checked in under tests/data/golden_v1*/ to golden_v4*/ must keep
// reading, and the writer must keep producing the same bytes as golden_v4 (index version 4,
// FORMAT.md §3.10; versions 1 to 3 are frozen: readers keep reading them forever).
//
// golden_v1 and golden_v1_zstd were written before the shard-uid revision (FORMAT.md §4.1: shard
// uid 0, index flags 0); they are frozen and never regenerated: readers must keep accepting them
// unchanged. golden_v1_uids is what the writer produces now (with a fixed shard_uid_seed).
//
// golden_v1_uids and golden_v1_append (golden_v1_uids after an append: index.a.lsi) are what the
// writer produced before index version 2; they are frozen too. golden_v2, golden_v2_zstd,
// golden_v2_codecs, golden_v2_append and golden_v1_journal are what it produced before index
// version 3 (field checksums); frozen as well. golden_v3, golden_v3_zstd, golden_v3_codecs,
// golden_v3_planes2, golden_v3_append and golden_v3_journal (a journal whose header flags say
// that its samples carry field checksums, §6) are what it produced before index version 4 (row
// blocks); frozen too. golden_v4, golden_v4_zstd, golden_v4_planes2, golden_v4_fp8_planes (codec
// 6, `--compress auto --store-dtype float8_e4m3fn`), golden_v4_append and golden_v4_journal (its
// samples carry block tables, §6) are the writer's output now, written with 64-byte row blocks
// (codec::ScopedWriterRowBlockBytes) so that these small samples have several blocks a field
// (§3.10.5 with a smaller target: the format allows any block_rows). golden_by_hand is not: it is written
// from FORMAT.md alone by tests/data/make_golden_by_hand.py, so the reader is checked against the
// spec independently of the writer; golden_by_hand_v2 (tests/data/make_golden_blocked_by_hand.py)
// is the same dataset with an index of version 2, written from FORMAT.md §3.8 alone,
// golden_by_hand_v3 (the same script) with one of version 3 (§3.9), and golden_by_hand_v4 with
// one of version 4 (§3.10: row blocks of two rows).
//
// golden_v2_codecs is golden_v2 written with field codecs chosen by `--compress auto` (FORMAT.md
// §4.3: zstd per field for every non-16-bit dtype, planes for bfloat16/float16). golden_v3_codecs
// is the same with index version 3, written before codec 5: frozen, it keeps codec 2 datasets
// reading. golden_v3_planes2 is what `auto` writes now (planes2, codec 5, for bfloat16/float16,
// FORMAT.md §4.3.7).
//
// golden_v3_fp8_entropy (codec 4, lossy fp8 hidden states) is frozen: see
// CheckedInDatasetsStillRead.
//
// Regenerate golden_v4, golden_v4_zstd, golden_v4_planes2, golden_v4_fp8_planes, golden_v4_append
// and golden_v4_journal (only when the format changes, never to make a failing test pass):
//   LIBSHARD_REGENERATE_GOLDEN=1 build/tests/format_golden_test --gtest_filter='*Regenerate*'
// No golden directory holds a writer's lock file (.libshard.lock, FORMAT.md §2.1): Regenerate
// removes it, and a test that writes to a golden copies it first (GoldensHoldNoLockFile).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "codec/row_blocks.h"
#include "dataset/dataset_access.h"
#include "format/bytes.h"
#include "format/legacy/index_v1.h"
#include "format/journal.h"
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
// The golden writer's row blocks (FORMAT.md §3.10.5 with a smaller target): several a field.
constexpr uint64_t kGoldenRowBlockBytes = 64;

WriterOptions GoldenOptions(bool zstd, bool codecs = false, bool fp8 = false) {
  WriterOptions o;
  if (codecs) o.field_codecs = FieldCodecPolicy::kAuto;  // golden_v2_codecs (FORMAT.md §4.3)
  o.store_fp8 = fp8;  // golden_v4_fp8_planes: codec 6 with field compression (§4.3.8)
  o.fsync = false;
  o.shard_uid_seed = 0x601d;  // reproducible shard uids
  o.shard_size = 2 * 4096;  // several shards
  o.compression = zstd ? Compression::kZstd : Compression::kNone;
  o.source_root = "/golden";
  o.created_by = "libshard format_golden_test";
  return o;
}

void WriteGolden(const std::filesystem::path& dir, bool zstd, bool codecs = false,
                 bool fp8 = false) {
  std::filesystem::remove_all(dir);
  codec::ScopedWriterRowBlockBytes blocks(kGoldenRowBlockBytes);
  auto w = Writer::Create(dir.string(), GoldenSchema(), GoldenOptions(zstd, codecs, fp8));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = 0; i < kGoldenSamples; ++i)
    ASSERT_TRUE((*w)->Append(GoldenSample(i).input).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

void ExpectGoldenContents(const std::filesystem::path& dir, bool zstd) {
  SCOPED_TRACE(dir.filename().string());
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
    // Row ranges (FORMAT.md §3.10): whatever the version, the rows of the whole read.
    for (RowRange rows : {RowRange{0, 1}, RowRange{1, 4}, RowRange{3, 7}, RowRange{5, 100},
                          RowRange{2, 2}, RowRange{50, 60}})
      ExpectRowRangeRead(**ds, i, rows);
  }
  EXPECT_EQ(any_compressed, zstd);
}

TEST(FormatGoldenTest, CheckedInDatasetsStillRead) {
  ExpectGoldenContents(kGoldenDir / "golden_v1", false);
  ExpectGoldenContents(kGoldenDir / "golden_v1_zstd", true);
  ExpectGoldenContents(kGoldenDir / "golden_v1_uids", false);
  ExpectGoldenContents(kGoldenDir / "golden_v2", false);
  ExpectGoldenContents(kGoldenDir / "golden_v2_zstd", true);
  ExpectGoldenContents(kGoldenDir / "golden_v2_codecs", false);
  ExpectGoldenContents(kGoldenDir / "golden_v3", false);
  ExpectGoldenContents(kGoldenDir / "golden_v3_zstd", true);
  ExpectGoldenContents(kGoldenDir / "golden_v3_codecs", false);
  ExpectGoldenContents(kGoldenDir / "golden_v3_planes2", false);
  ExpectGoldenContents(kGoldenDir / "golden_v4", false);
  ExpectGoldenContents(kGoldenDir / "golden_v4_zstd", true);
  ExpectGoldenContents(kGoldenDir / "golden_v4_planes2", false);
  // `auto` before codec 5 chose codec 2 where it now chooses codec 5.
  std::vector<uint8_t> auto_before = ChooseFieldCodecs(GoldenSchema(), FieldCodecPolicy::kAuto, false);
  ASSERT_EQ(std::count(auto_before.begin(), auto_before.end(), 5), 2);  // hidden, half
  std::replace(auto_before.begin(), auto_before.end(), uint8_t{5}, uint8_t{2});
  for (const char* name :
       {"golden_v2_codecs", "golden_v3_codecs", "golden_v3_planes2", "golden_v4_planes2"}) {
    auto ds = Dataset::Open((kGoldenDir / name).string());
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    EXPECT_EQ((*ds)->field_codecs(),
              std::string_view(name).ends_with("planes2")
                  ? ChooseFieldCodecs(GoldenSchema(), FieldCodecPolicy::kAuto, false)
                  : auto_before)
        << name;
  }
  // golden_v4_fp8_planes: codec 6 (fp8-planes, lossy) for the 16-bit float sequence fields of
  // rank 2 or more (hidden, half), the auto codecs for the others; the lossless fields read bit
  // for bit, and row ranges (decoding only the chunks they cover) are the rows of the whole read.
  {
    auto ds = Dataset::Open((kGoldenDir / "golden_v4_fp8_planes").string());
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    const std::vector<uint8_t> codecs = (*ds)->field_codecs();
    EXPECT_EQ(codecs, ChooseFieldCodecs(GoldenSchema(), FieldCodecPolicy::kAuto,
                                        /*store_fp8=*/true));
    EXPECT_EQ(std::count(codecs.begin(), codecs.end(), 6), 2);
    EXPECT_TRUE((*ds)->has_row_blocks());
    ASSERT_EQ((*ds)->size(), kGoldenSamples);
    for (uint64_t i = 0; i < kGoldenSamples; ++i) {
      OwnedSample want = GoldenSample(i);
      auto s = (*ds)->Read(i);  // sample, field and block checksums verified
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_TRUE((*ds)->Verify(i).ok());
      for (size_t f = 0; f < want.input.tensors.size(); ++f) {
        const TensorView* t = s->Find(want.input.tensors[f].name);
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(t->shape, want.input.tensors[f].shape);
        if (codecs[f] != 6 && t->nbytes > 0)  // lossless: bit for bit
          EXPECT_EQ(std::memcmp(t->data, want.bytes[f].data(), t->nbytes), 0) << t->name;
      }
      for (RowRange rows : {RowRange{0, 1}, RowRange{1, 4}, RowRange{3, 7}, RowRange{5, 100}})
        ExpectRowRangeRead(**ds, i, rows);
    }
  }
  // golden_v3_fp8_entropy: an EAGLE-3 directory (tests/python/conftest.py write_eagle_dir(root, 6))
  // packed with `--compress auto --store-dtype float8_e4m3fn` before codec 6, so its hidden
  // states are codec 4 (fp8-entropy); frozen, it keeps codec 4 datasets reading (test_codecs.py
  // compares its values with what codec 6 decodes the same sources to).
  {
    auto ds = Dataset::Open((kGoldenDir / "golden_v3_fp8_entropy").string());
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    EXPECT_EQ((*ds)->field_codecs(), (std::vector<uint8_t>{1, 1, 4, 4}));
    ASSERT_EQ((*ds)->size(), 6u);
    for (uint64_t i = 0; i < (*ds)->size(); ++i) {
      auto s = (*ds)->Read(i);  // sample and field checksums verified
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      const TensorView* h = s->Find("hidden_state");
      ASSERT_NE(h, nullptr);
      EXPECT_EQ(h->dtype, DType::kBFloat16);
    }
  }
  // Field checksums (§3.9): in every version 3 and 4 golden, equal to what the bytes give, and
  // in no older one; row blocks (§3.10) in every version 4 golden; Verify checks every level.
  for (const char* name : {"golden_v1", "golden_v1_zstd", "golden_v1_uids", "golden_v2",
                           "golden_v2_zstd", "golden_v2_codecs", "golden_v3", "golden_v3_zstd",
                           "golden_v3_codecs", "golden_v3_planes2", "golden_v3_append",
                           "golden_v4", "golden_v4_zstd", "golden_v4_planes2",
                           "golden_v4_fp8_planes", "golden_v4_append"}) {
    SCOPED_TRACE(name);
    auto ds = Dataset::Open((kGoldenDir / name).string());
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    const uint32_t version = static_cast<uint32_t>(std::string_view(name)[8] - '0');
    EXPECT_EQ((*ds)->index_version(), version);
    EXPECT_EQ((*ds)->has_field_checksums(), version >= 3);
    EXPECT_EQ((*ds)->has_row_blocks(), version >= 4);
    uint64_t tables = 0;
    for (uint64_t i = 0; i < (*ds)->size(); ++i) {
      EXPECT_TRUE((*ds)->Verify(i).ok()) << i;
      auto computed = (*ds)->ComputeFieldChecksums(i);
      ASSERT_TRUE(computed.ok()) << computed.status().ToString();
      EXPECT_EQ(computed->size(), GoldenSchema().fields.size());
      if (version >= 3) EXPECT_EQ(*computed, *(*ds)->field_checksums(i)) << i;
      auto table = internal::DatasetAccess::BlockTableBytes(**ds, i);
      ASSERT_TRUE(table.ok()) << table.status().ToString();
      EXPECT_EQ(table->has_value(), version >= 4);
      if (table->has_value() && !(*table)->empty()) ++tables;
    }
    // Every version 4 golden but the whole-sample zstd one has samples with row blocks.
    if (version >= 4) EXPECT_EQ(tables > 0, std::string_view(name) != "golden_v4_zstd");
  }
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

// Every file of the checked-in `golden` dataset has the same bytes in `fresh`, the manifest
// except for its timestamp.
void ExpectSameFiles(const std::filesystem::path& golden, const std::filesystem::path& fresh) {
  for (const auto& e : std::filesystem::directory_iterator(golden)) {
    const std::string name = e.path().filename().string();
    if (name == "manifest.json") continue;  // holds created_at
    if (name.starts_with(".")) continue;     // e.g. the writer's lock file, not dataset bytes
    EXPECT_EQ(ReadFileToString(e.path()), ReadFileToString(fresh / name)) << name << " changed";
  }
  // The manifest differs only in its timestamp.
  auto strip = [](std::string m) {
    size_t at = m.find("\"created_at\"");
    return m.erase(at, m.find('\n', at) - at);
  };
  EXPECT_EQ(strip(ReadFileToString(golden / "manifest.json")),
            strip(ReadFileToString(fresh / "manifest.json")));
}

TEST(FormatGoldenTest, WriterStillProducesTheSameBytes) {
  TempDir dir;
  WriteGolden(dir.path(), false);
  ExpectSameFiles(kGoldenDir / "golden_v4", dir.path());
  TempDir zstd;
  WriteGolden(zstd.path(), true);
  ExpectSameFiles(kGoldenDir / "golden_v4_zstd", zstd.path());
  TempDir codecs;
  WriteGolden(codecs.path(), false, /*codecs=*/true);
  ExpectSameFiles(kGoldenDir / "golden_v4_planes2", codecs.path());
  TempDir fp8;
  WriteGolden(fp8.path(), false, /*codecs=*/true, /*fp8=*/true);
  ExpectSameFiles(kGoldenDir / "golden_v4_fp8_planes", fp8.path());
}

// No checked-in golden holds a writer's lock file: a test that opens one for writing copies it
// first, and Regenerate removes the lock its writes leave.
TEST(FormatGoldenTest, GoldensHoldNoLockFile) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(kGoldenDir))
    EXPECT_NE(e.path().filename(), ".libshard.lock") << e.path();
}

// ---- golden_by_hand: written from FORMAT.md alone by tests/data/make_golden_by_hand.py (struct
// and xxhash, nothing from libshard), with expected.json beside it. Reading it proves that reader
// and spec agree independently of the writer. Regenerate with that script, never with libshard.

uint64_t HexU64(const nlohmann::json& j) { return std::stoull(j.get<std::string>(), nullptr, 16); }

std::string ToHex(const std::byte* p, uint64_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint64_t k = 0; k < n; ++k) {
    s += kDigits[static_cast<uint8_t>(p[k]) >> 4];
    s += kDigits[static_cast<uint8_t>(p[k]) & 15];
  }
  return s;
}

MetaValue ExpectedMetaValue(const nlohmann::json& e) {
  switch (e["type"].get<int>()) {
    case 1: return e["value"].get<bool>();
    case 2: return e["value"].get<int64_t>();
    case 3: return e["value"].get<double>();
    default: return e["value"].get<std::string>();
  }
}

// golden_by_hand_v2 holds the same samples and shard with an index of version 2 written from
// FORMAT.md §3.8 alone (tests/data/make_golden_blocked_by_hand.py); both must read exactly as
// expected.json says.
void ExpectHandWrittenDataset(const std::filesystem::path& dir) {
  SCOPED_TRACE(dir.filename().string());
  const nlohmann::json want = nlohmann::json::parse(ReadFileToString(dir / "expected.json"));
  auto ds = Dataset::Open(dir.string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  Schema schema;
  schema.fields = {{"tokens", DType::kInt64, 1, 0}, {"hidden", DType::kBFloat16, 2, 0}};
  schema.length_field = 0;
  EXPECT_EQ((*ds)->schema(), schema);
  EXPECT_EQ((*ds)->provenance().source_root, "/by/hand");
  EXPECT_EQ((*ds)->provenance().sources, 2u);
  EXPECT_EQ((*ds)->provenance().created_at, "2026-01-02T03:04:05Z");

  const std::string index_bytes = ReadFileToString(dir / "index.lsi");
  EXPECT_EQ(format::GetU64(format::AsBytes(index_bytes) + format::kIndexChecksumOffset),
            HexU64(want["index_xxh3"]));
  EXPECT_EQ(index_bytes.size(), want["index_size"].get<uint64_t>());

  ASSERT_EQ((*ds)->shards().size(), want["shards"].size());
  for (size_t k = 0; k < want["shards"].size(); ++k) {
    const nlohmann::json& s = want["shards"][k];
    const ShardInfo& got = (*ds)->shards()[k];
    EXPECT_EQ(std::filesystem::path(got.path).filename(), s["file"].get<std::string>());
    EXPECT_EQ(got.size, s["size"].get<uint64_t>());
    EXPECT_EQ(got.samples, s["samples"].get<uint64_t>());
    EXPECT_EQ(got.uid, HexU64(s["uid"]));
  }

  ASSERT_EQ((*ds)->size(), want["samples"].size());
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    const nlohmann::json& w = want["samples"][i];
    const SampleLocation loc = (*ds)->location(i);
    EXPECT_EQ(loc.shard, w["shard"].get<uint32_t>());
    EXPECT_EQ(loc.flags, w["flags"].get<uint32_t>());
    EXPECT_EQ(loc.offset, w["offset"].get<uint64_t>());
    EXPECT_EQ(loc.stored_size, w["stored_size"].get<uint64_t>());
    EXPECT_EQ(loc.raw_size, w["raw_size"].get<uint64_t>());
    EXPECT_EQ(loc.checksum, HexU64(w["checksum"]));
    EXPECT_EQ(loc.length, w["length"].get<uint64_t>());
    EXPECT_EQ((*ds)->length(i), w["length"].get<uint64_t>());

    auto sample = (*ds)->Read(i);
    ASSERT_TRUE(sample.ok()) << sample.status().ToString();
    ASSERT_EQ(sample->tensors().size(), w["tensors"].size());
    for (size_t f = 0; f < w["tensors"].size(); ++f) {
      const nlohmann::json& t = w["tensors"][f];
      const TensorView& got = sample->tensors()[f];
      EXPECT_EQ(got.name, t["name"].get<std::string>());
      EXPECT_EQ(DTypeName(got.dtype), t["dtype"].get<std::string>());
      EXPECT_EQ(got.shape, t["shape"].get<Shape>());
      EXPECT_EQ(got.nbytes, t["nbytes"].get<uint64_t>());
      EXPECT_EQ(ToHex(got.data, got.nbytes), t["hex"].get<std::string>()) << got.name;
      const TensorLocation tl = (*ds)->tensor(i, f);
      EXPECT_EQ(tl.offset, t["offset"].get<uint64_t>());
      EXPECT_EQ(tl.nbytes, t["nbytes"].get<uint64_t>());
      EXPECT_EQ(tl.shape, t["shape"].get<Shape>());
    }
    Metadata meta;
    for (const nlohmann::json& e : w["metadata"])
      meta.push_back({e["key"].get<std::string>(), ExpectedMetaValue(e)});
    EXPECT_EQ(sample->metadata(), meta);
    auto m = (*ds)->metadata(i);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(*m, meta);

    auto src = (*ds)->source(i);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    EXPECT_EQ(src->path, w["source"]["path"].get<std::string>());
    EXPECT_EQ(src->size, w["source"]["size"].get<uint64_t>());
    EXPECT_EQ(src->mtime_ns, w["source"]["mtime_ns"].get<int64_t>());
    EXPECT_EQ(src->content_hash, HexU64(w["source"]["content_hash"]));
    EXPECT_TRUE((*ds)->Verify(i).ok());
    // Index version 3 (FORMAT.md §3.9): a checksum per field, as the script computed it.
    EXPECT_EQ((*ds)->has_field_checksums(), w.contains("field_checksums"));
    if (w.contains("field_checksums")) {
      auto sums = (*ds)->field_checksums(i);
      ASSERT_TRUE(sums.ok()) << sums.status().ToString();
      ASSERT_EQ(sums->size(), w["field_checksums"].size());
      for (size_t f = 0; f < sums->size(); ++f)
        EXPECT_EQ((*sums)[f], HexU64(w["field_checksums"][f])) << f;
      auto computed = (*ds)->ComputeFieldChecksums(i);
      ASSERT_TRUE(computed.ok()) << computed.status().ToString();
      EXPECT_EQ(*computed, *sums);
    }
    // Index version 4 (FORMAT.md §3.10): the block table the script wrote, and row ranges read
    // by its blocks.
    EXPECT_EQ((*ds)->has_row_blocks(), w.contains("block_table"));
    if (w.contains("block_table")) {
      auto table = internal::DatasetAccess::BlockTableBytes(**ds, i);
      ASSERT_TRUE(table.ok()) << table.status().ToString();
      ASSERT_TRUE(table->has_value());
      EXPECT_EQ(ToHex(format::AsBytes(**table), (*table)->size()),
                w["block_table"].get<std::string>());
    }
    for (RowRange rows : {RowRange{0, 1}, RowRange{1, 3}, RowRange{2, 5}, RowRange{4, 9}})
      ExpectRowRangeRead(**ds, i, rows);
  }
}

TEST(FormatGoldenTest, HandWrittenDatasetReads) {
  ExpectHandWrittenDataset(kGoldenDir / "golden_by_hand");
  ExpectHandWrittenDataset(kGoldenDir / "golden_by_hand_v2");
  ExpectHandWrittenDataset(kGoldenDir / "golden_by_hand_v3");
  ExpectHandWrittenDataset(kGoldenDir / "golden_by_hand_v4");
}

// ---- golden_v1_journal: `_journal.lsj` of an interrupted write (FORMAT.md §6): the golden
// dataset's first samples, one journal entry each, then the writer destroyed without Finish.

constexpr uint64_t kJournalSamples = 3;

// Leaves an interrupted write of GoldenSample(0..kJournalSamples) in `dir`.
void WriteInterruptedGolden(const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  WriterOptions o = GoldenOptions(false);
  o.journal_every_bytes = 1;  // a journal entry after every sample
  codec::ScopedWriterRowBlockBytes blocks(kGoldenRowBlockBytes);
  auto w = Writer::Create(dir.string(), GoldenSchema(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = 0; i < kJournalSamples; ++i)
    ASSERT_TRUE((*w)->Append(GoldenSample(i).input).ok());
}  // destroyed without Finish: the journal and the shard temporaries stay

// The parsed index of a checked-in golden dataset; `bytes` keeps its bytes.
format::legacy::IndexV1View ParseGoldenIndex(const std::filesystem::path& file, std::string* bytes) {
  *bytes = ReadFileToString(file);
  auto v = format::legacy::IndexV1View::Parse(
      {reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()}, file.string());
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return v.ok() ? std::move(*v) : format::legacy::IndexV1View{};
}

// Everything a journal or another index records about a sample, except where in the blob its
// metadata and source path lie (§6 zeroes those offsets).
void ExpectSameEntry(const format::IndexSample& got, const format::IndexSample& want) {
  const format::SampleRecord& g = got.record;
  const format::SampleRecord& w = want.record;
  EXPECT_EQ(g.offset, w.offset);
  EXPECT_EQ(g.stored_size, w.stored_size);
  EXPECT_EQ(g.raw_size, w.raw_size);
  EXPECT_EQ(g.checksum, w.checksum);
  EXPECT_EQ(g.shard, w.shard);
  EXPECT_EQ(g.flags, w.flags);
  EXPECT_EQ(g.length, w.length);
  EXPECT_EQ(g.meta_size, w.meta_size);
  EXPECT_EQ(g.source_size, w.source_size);
  EXPECT_EQ(g.source_bytes, w.source_bytes);
  EXPECT_EQ(g.source_mtime_ns, w.source_mtime_ns);
  EXPECT_EQ(g.source_hash, w.source_hash);
  EXPECT_EQ(got.dims, want.dims);
  EXPECT_EQ(got.tensor_offsets, want.tensor_offsets);
  EXPECT_EQ(got.tensor_sizes, want.tensor_sizes);
  EXPECT_EQ(got.metadata, want.metadata);
  EXPECT_EQ(got.source_path, want.source_path);
  EXPECT_EQ(got.field_checksums, want.field_checksums);
  if (got.block_table && want.block_table) EXPECT_EQ(*got.block_table, *want.block_table);
}

TEST(FormatGoldenTest, CheckedInJournalParses) {
  const std::string journal = ReadFileToString(kGoldenDir / "golden_v1_journal" / "_journal.lsj");
  auto j = format::ParseJournal(
      {reinterpret_cast<const std::byte*>(journal.data()), journal.size()}, "_journal.lsj");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->schema, GoldenSchema());
  EXPECT_EQ(j->valid_size, journal.size());  // no torn tail
  ASSERT_EQ(j->samples.size(), kJournalSamples);
  // The same samples, written with the same options, as the finished golden_v1_uids records them.
  std::string index_bytes;
  const format::legacy::IndexV1View index =
      ParseGoldenIndex(kGoldenDir / "golden_v1_uids" / "index.lsi", &index_bytes);
  for (uint64_t i = 0; i < kJournalSamples; ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    ExpectSameEntry(j->samples[i], index.Entry(i));
    EXPECT_EQ(j->samples[i].source_path, GoldenSample(i).input.source.path);
  }
}

// A journal of this revision (header flags bit 0, FORMAT.md §6): its samples carry the field
// checksums that golden_v3 records for them.
TEST(FormatGoldenTest, CheckedInJournalWithFieldChecksumsParses) {
  const std::string journal = ReadFileToString(kGoldenDir / "golden_v3_journal" / "_journal.lsj");
  auto j = format::ParseJournal(
      {reinterpret_cast<const std::byte*>(journal.data()), journal.size()}, "_journal.lsj");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_TRUE(j->field_checksums);
  ASSERT_EQ(j->samples.size(), kJournalSamples);
  auto ds = Dataset::Open((kGoldenDir / "golden_v3").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  for (uint64_t i = 0; i < kJournalSamples; ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    EXPECT_EQ(j->samples[i].field_checksums, *(*ds)->field_checksums(i));
  }
}

// A journal of this revision (header flags bits 0 and 1, FORMAT.md §6): its samples carry the
// field checksums and block tables that golden_v4 records for them.
TEST(FormatGoldenTest, CheckedInJournalWithBlockTablesParses) {
  const std::string journal = ReadFileToString(kGoldenDir / "golden_v4_journal" / "_journal.lsj");
  auto j = format::ParseJournal(
      {reinterpret_cast<const std::byte*>(journal.data()), journal.size()}, "_journal.lsj");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_TRUE(j->field_checksums);
  EXPECT_TRUE(j->block_tables);
  ASSERT_EQ(j->samples.size(), kJournalSamples);
  auto ds = Dataset::Open((kGoldenDir / "golden_v4").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  for (uint64_t i = 0; i < kJournalSamples; ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    EXPECT_EQ(j->samples[i].field_checksums, *(*ds)->field_checksums(i));
    auto table = internal::DatasetAccess::BlockTableBytes(**ds, i);
    ASSERT_TRUE(table.ok() && table->has_value());
    EXPECT_EQ(j->samples[i].block_table, **table);
    format::JournalHeader h;
    h.schema = j->schema;
    h.field_checksums = h.block_tables = true;
    EXPECT_TRUE(format::CheckJournalSample(h, j->samples[i]).ok());
  }
}

TEST(FormatGoldenTest, WriterStillProducesTheSameJournal) {
  TempDir dir;
  WriteInterruptedGolden(dir / "ds");
  EXPECT_EQ(ReadFileToString(dir / "ds" / "_journal.lsj"),
            ReadFileToString(kGoldenDir / "golden_v4_journal" / "_journal.lsj"));
}

// The journal of a write interrupted before row blocks (golden_v3_journal: field checksums, no
// block tables) resumes, and the finished index is then of version 3 (not every sample has a
// table, §3.10.1), with field checksums, reading as golden_v3 does.
TEST(FormatGoldenTest, JournalWithoutBlockTablesResumesAsVersion3) {
  TempDir dir;
  WriteInterruptedGolden(dir / "ds");
  std::filesystem::copy_file(kGoldenDir / "golden_v3_journal" / "_journal.lsj",
                             dir / "ds" / "_journal.lsj",
                             std::filesystem::copy_options::overwrite_existing);
  {
    codec::ScopedWriterRowBlockBytes blocks(kGoldenRowBlockBytes);
    auto w = Writer::Resume((dir / "ds").string(), GoldenOptions(false));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = (*w)->samples_written(); i < kGoldenSamples; ++i)
      ASSERT_TRUE((*w)->Append(GoldenSample(i).input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto ds = Dataset::Open((dir / "ds").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->index_version(), 3u);
  EXPECT_TRUE((*ds)->has_field_checksums());
  EXPECT_FALSE((*ds)->has_row_blocks());
  ASSERT_EQ((*ds)->size(), kGoldenSamples);
  for (uint64_t i = 0; i < kGoldenSamples; ++i) {
    auto s = (*ds)->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, GoldenSample(i));
  }
}

// The journal of a write interrupted before field checksums (golden_v1_journal, no header flag)
// resumes, and the finished index then has none (not every sample has them, §3.9), reading as
// golden_v1_uids does.
TEST(FormatGoldenTest, OldJournalResumesWithoutFieldChecksums) {
  TempDir dir;
  WriteInterruptedGolden(dir / "ds");
  std::filesystem::copy_file(kGoldenDir / "golden_v1_journal" / "_journal.lsj",
                             dir / "ds" / "_journal.lsj",
                             std::filesystem::copy_options::overwrite_existing);
  auto w = Writer::Resume((dir / "ds").string(), GoldenOptions(false));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = (*w)->samples_written(); i < kGoldenSamples; ++i)
    ASSERT_TRUE((*w)->Append(GoldenSample(i).input).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto ds = Dataset::Open((dir / "ds").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->index_version(), 3u);
  EXPECT_FALSE((*ds)->has_field_checksums());
  ASSERT_EQ((*ds)->size(), kGoldenSamples);
  for (uint64_t i = 0; i < kGoldenSamples; ++i) {
    auto s = (*ds)->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, GoldenSample(i));
  }
}

// ---- golden_v1_append: golden_v1_uids, then OpenForAppend and more samples (FORMAT.md §7): the
// new index is index.a.lsi, the old shards are kept as they are and new ones follow.

constexpr uint64_t kAppendedSamples = 2;

void WriteAppendedGolden(const std::filesystem::path& dir) {
  WriteGolden(dir, false);
  codec::ScopedWriterRowBlockBytes blocks(kGoldenRowBlockBytes);
  auto w = Writer::OpenForAppend(dir.string(), GoldenOptions(false));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = kGoldenSamples; i < kGoldenSamples + kAppendedSamples; ++i)
    ASSERT_TRUE((*w)->Append(GoldenSample(i).input).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

TEST(FormatGoldenTest, CheckedInAppendedDatasetReads) {
  const std::filesystem::path dir = kGoldenDir / "golden_v1_append";
  EXPECT_TRUE(std::filesystem::exists(dir / "index.a.lsi"));
  EXPECT_FALSE(std::filesystem::exists(dir / "index.lsi"));  // removed after the commit
  auto ds = Dataset::Open(dir.string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->schema(), GoldenSchema());
  ASSERT_EQ((*ds)->size(), kGoldenSamples + kAppendedSamples);
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    OwnedSample want = GoldenSample(i);
    auto s = (*ds)->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, want);
    EXPECT_EQ(*(*ds)->source(i), want.input.source);
    EXPECT_EQ((*ds)->length(i), 2 + 3 * i);
  }
  // Append never moves data: the first samples and shards are recorded as before.
  std::string old_bytes, new_bytes;
  const format::legacy::IndexV1View old_index =
      ParseGoldenIndex(kGoldenDir / "golden_v1_uids" / "index.lsi", &old_bytes);
  const format::legacy::IndexV1View new_index = ParseGoldenIndex(dir / "index.a.lsi", &new_bytes);
  ASSERT_EQ(new_index.sample_count(), kGoldenSamples + kAppendedSamples);
  ASSERT_EQ(old_index.sample_count(), kGoldenSamples);
  for (uint64_t i = 0; i < kGoldenSamples; ++i) ExpectSameEntry(new_index.Entry(i), old_index.Entry(i));
  ASSERT_GT(new_index.shards().size(), old_index.shards().size());
  for (size_t k = 0; k < new_index.shards().size(); ++k) {
    const format::IndexShard& s = new_index.shards()[k];
    EXPECT_NE(s.uid, 0u) << s.name;
    if (k < old_index.shards().size()) {
      EXPECT_EQ(s.name, old_index.shards()[k].name);
      EXPECT_EQ(s.uid, old_index.shards()[k].uid);
      EXPECT_EQ(s.file_size, old_index.shards()[k].file_size);
      EXPECT_EQ(ReadFileToString(dir / s.name),
                ReadFileToString(kGoldenDir / "golden_v1_uids" / s.name));
    }
  }
}

TEST(FormatGoldenTest, WriterStillProducesTheSameAppend) {
  TempDir dir;
  WriteAppendedGolden(dir / "ds");
  ExpectSameFiles(kGoldenDir / "golden_v4_append", dir / "ds");
}

// Append keeps index version 4: the old samples' block tables are carried over as stored.
TEST(FormatGoldenTest, AppendKeepsTheRowBlocks) {
  auto before = Dataset::Open((kGoldenDir / "golden_v4").string());
  auto after = Dataset::Open((kGoldenDir / "golden_v4_append").string());
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ((*after)->index_version(), 4u);
  for (uint64_t i = 0; i < kGoldenSamples; ++i) {
    auto a = internal::DatasetAccess::BlockTableBytes(**before, i);
    auto b = internal::DatasetAccess::BlockTableBytes(**after, i);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b) << i;
  }
  for (uint64_t i = 0; i < (*after)->size(); ++i)
    for (RowRange rows : {RowRange{1, 3}, RowRange{4, 9}}) ExpectRowRangeRead(**after, i, rows);
}

TEST(FormatGoldenTest, CheckedInV2AppendedDatasetReads) {
 for (const char* name : {"golden_v2_append", "golden_v3_append", "golden_v4_append"}) {
  SCOPED_TRACE(name);
  auto ds = Dataset::Open((kGoldenDir / name).string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->size(), kGoldenSamples + kAppendedSamples);
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    OwnedSample want = GoldenSample(i);
    auto s = (*ds)->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, want);
    EXPECT_EQ(*(*ds)->source(i), want.input.source);
  }
 }
}

// Append onto a version 1 dataset rewrites its index as the current version in the same commit
// (FORMAT.md §3.8.8), without field checksums (the old samples have none, §3.9); the old samples
// read as before and their shards are untouched.
TEST(FormatGoldenTest, AppendOntoVersion1WritesTheCurrentVersion) {
  TempDir dir;
  std::filesystem::copy(kGoldenDir / "golden_v1_uids", dir / "ds");
  {
    auto w = Writer::OpenForAppend((dir / "ds").string(), GoldenOptions(false));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = kGoldenSamples; i < kGoldenSamples + kAppendedSamples; ++i)
      ASSERT_TRUE((*w)->Append(GoldenSample(i).input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  const std::string index = ReadFileToString(dir / "ds" / "index.a.lsi");
  EXPECT_EQ(format::GetU32(reinterpret_cast<const std::byte*>(index.data()) + 8), 3u);
  EXPECT_NE(ReadFileToString(dir / "ds" / "manifest.json").find("\"version\": 3"),
            std::string::npos);
  auto ds = Dataset::Open((dir / "ds").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_FALSE((*ds)->has_field_checksums());
  ASSERT_EQ((*ds)->size(), kGoldenSamples + kAppendedSamples);
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    auto s = (*ds)->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, GoldenSample(i));
  }
  for (const auto& e : std::filesystem::directory_iterator(kGoldenDir / "golden_v1_uids"))
    if (e.path().extension() == ".lss")
      EXPECT_EQ(ReadFileToString(e.path()), ReadFileToString(dir / "ds" / e.path().filename()));
}

TEST(FormatGoldenTest, Regenerate) {
  if (!std::getenv("LIBSHARD_REGENERATE_GOLDEN")) GTEST_SKIP() << "set LIBSHARD_REGENERATE_GOLDEN=1";
  WriteGolden(kGoldenDir / "golden_v4", false);
  std::filesystem::remove(kGoldenDir / "golden_v4" / ".libshard.lock");
  WriteGolden(kGoldenDir / "golden_v4_zstd", true);
  std::filesystem::remove(kGoldenDir / "golden_v4_zstd" / ".libshard.lock");
  WriteGolden(kGoldenDir / "golden_v4_planes2", false, /*codecs=*/true);
  std::filesystem::remove(kGoldenDir / "golden_v4_planes2" / ".libshard.lock");
  WriteGolden(kGoldenDir / "golden_v4_fp8_planes", false, /*codecs=*/true, /*fp8=*/true);
  std::filesystem::remove(kGoldenDir / "golden_v4_fp8_planes" / ".libshard.lock");
  WriteAppendedGolden(kGoldenDir / "golden_v4_append");
  std::filesystem::remove(kGoldenDir / "golden_v4_append" / ".libshard.lock");
  // Only the journal of the interrupted write is kept (its shard temporaries are not format).
  TempDir tmp;
  WriteInterruptedGolden(tmp / "ds");
  std::filesystem::create_directories(kGoldenDir / "golden_v4_journal");
  std::filesystem::copy_file(tmp / "ds" / "_journal.lsj",
                             kGoldenDir / "golden_v4_journal" / "_journal.lsj",
                             std::filesystem::copy_options::overwrite_existing);
}

}  // namespace
}  // namespace libshard::testing
