// The index of sample blocks, versions 2 to 4 (FORMAT.md §3.8, §3.9, §3.10; format/index.h): round trips through
// EncodeIndex and the three-step parser, what is stored per sample (the size target), and forged
// or damaged bytes refused with the file, block and sample named.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "format/block_table.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/legacy/index_v1.h"
#include "format/index.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"
#include "format_test_helpers.h"
#include "testutil/index_v1_encoder.h"

namespace libshard::testing {
namespace {

using format::IndexSample;
using format::Index;

// EAGLE-3's four fields: input_ids, loss_mask [L]; hidden_state [1, L, H]; aux [1, L, 3H].
Schema Eagle3Schema() {
  Schema s;
  s.fields = {{"input_ids", DType::kInt64, 1, 0},
              {"loss_mask", DType::kInt64, 1, 0},
              {"hidden_state", DType::kBFloat16, 3, 1},
              {"aux_hidden_state", DType::kBFloat16, 3, 1}};
  s.length_field = 0;
  return s;
}

std::vector<std::byte> ToBytes(const std::string& s) {
  return {format::AsBytes(s), format::AsBytes(s) + s.size()};
}

// ParseHeader, then Parse of the head and lengths it locates.
Result<Index> ParseAll(const std::vector<std::byte>& b) {
  LIBSHARD_ASSIGN_OR_RETURN(
      format::IndexLayout l,
      Index::ParseHeader({b.data(), std::min<size_t>(b.size(), 128)}, b.size(), "idx"));
  return Index::Parse(std::vector<std::byte>(b.begin(), b.begin() + l.head_size),
                        std::vector<std::byte>(b.begin() + l.lengths_offset,
                                               b.begin() + l.lengths_offset + l.lengths_size),
                        b.size(), "idx");
}

Result<format::IndexBlock> Block(const Index& v, const std::vector<std::byte>& b,
                                   uint64_t k) {
  const uint64_t off = v.block_offset(k), size = v.block_size(k);
  return v.ParseBlock(k, std::vector<std::byte>(b.begin() + off, b.begin() + off + size));
}

// EAGLE-3 samples as a pack of real dumps records them: lengths 200..4000, H = 4096, samples
// back to back in 4 GiB shards, full provenance (paths in a few directories, sizes, mtimes,
// content hashes), no metadata.
std::vector<IndexSample> EagleSamples(uint64_t n, std::vector<format::IndexShard>* shards) {
  const Schema schema = Eagle3Schema();
  std::mt19937_64 rng(7);
  std::vector<IndexSample> samples;
  uint64_t shard = 0, offset = 4096;
  shards->clear();
  for (uint64_t i = 0; i < n; ++i) {
    IndexSample s;
    const uint64_t l = 200 + rng() % 3800, h = 4096;
    s.dims = {l, l, 1, l, h, 1, l, 3 * h};
    format::PayloadLayout layout;
    EXPECT_TRUE(format::ComputeLayout(schema, s.dims, &layout).ok());
    s.tensor_offsets = layout.offsets;
    s.tensor_sizes = layout.sizes;
    if (offset + layout.raw_size > (uint64_t{4} << 30)) {
      shards->push_back({format::ShardFileName(static_cast<uint32_t>(shard)), offset, 0, shard + 1});
      ++shard;
      offset = 4096;
    }
    s.record.shard = static_cast<uint32_t>(shard);
    s.record.offset = offset;
    s.record.stored_size = s.record.raw_size = layout.raw_size;
    s.record.checksum = rng();
    s.record.length = l;
    s.record.source_bytes = layout.raw_size + 1100 + rng() % 200;
    s.record.source_mtime_ns = int64_t{1764547200000000000} + static_cast<int64_t>(rng() % 86400000000000);
    s.record.source_hash = rng();
    char path[96];
    std::snprintf(path, sizeof path, "ultrachat/shard_%03llu/hidden_states_%07llu.pt",
                  static_cast<unsigned long long>(i / 50000), static_cast<unsigned long long>(i));
    s.source_path = path;
    for (int f = 0; f < 4; ++f) s.field_checksums.push_back(rng() & 0xffffffffu);  // §3.9
    offset = format::AlignUp(offset + layout.raw_size, 4096);
    samples.push_back(std::move(s));
  }
  shards->push_back({format::ShardFileName(static_cast<uint32_t>(shard)), offset, 0, shard + 1});
  return samples;
}

void ExpectEntriesEqual(const Index& v, const std::vector<std::byte>& b,
                        const std::vector<IndexSample>& want) {
  ASSERT_EQ(v.sample_count(), want.size());
  for (uint64_t k = 0; k < v.block_count(); ++k) {
    auto block = Block(v, b, k);
    ASSERT_TRUE(block.ok()) << block.status().ToString();
    for (uint64_t i = block->first(); i < block->first() + block->count(); ++i) {
      SCOPED_TRACE("sample " + std::to_string(i));
      const IndexSample got = v.Entry(*block, i);
      const IndexSample& w = want[i];
      EXPECT_EQ(got.record.offset, w.record.offset);
      EXPECT_EQ(got.record.stored_size, w.record.stored_size);
      EXPECT_EQ(got.record.raw_size, w.record.raw_size);
      EXPECT_EQ(got.record.checksum, w.record.checksum);
      EXPECT_EQ(got.record.shard, w.record.shard);
      EXPECT_EQ(got.record.flags, w.record.flags);
      EXPECT_EQ(got.record.length, w.record.length);
      EXPECT_EQ(got.record.source_bytes, w.record.source_bytes);
      EXPECT_EQ(got.record.source_mtime_ns, w.record.source_mtime_ns);
      EXPECT_EQ(got.record.source_hash, w.record.source_hash);
      EXPECT_EQ(got.dims, w.dims);
      EXPECT_EQ(got.tensor_offsets, w.tensor_offsets);
      EXPECT_EQ(got.tensor_sizes, w.tensor_sizes);
      EXPECT_EQ(got.metadata, w.metadata);
      EXPECT_EQ(got.source_path, w.source_path);
      if (v.has_field_checksums()) {
        EXPECT_EQ(got.field_checksums, w.field_checksums);
      } else {
        EXPECT_TRUE(got.field_checksums.empty());
      }
      EXPECT_EQ(v.length(i), w.record.length);
    }
  }
}

TEST(IndexTest, EagleSchemaWithProvenanceIsAtMost64BytesASample) {
  std::vector<format::IndexShard> shards;
  const auto samples = EagleSamples(20000, &shards);
  const std::string v2 = format::EncodeIndex(Eagle3Schema(), shards, samples);
  const std::string v1 = EncodeIndexV1(Eagle3Schema(), shards, samples);
  const double per_v2 = static_cast<double>(v2.size()) / samples.size();
  const double per_v1 = static_cast<double>(v1.size()) / samples.size();
  RecordProperty("bytes_per_sample_v2", std::to_string(per_v2));
  RecordProperty("bytes_per_sample_v1", std::to_string(per_v1));
  std::printf("EAGLE-3 index with provenance: v1 %.1f bytes/sample, v3 (field checksums) %.1f "
              "bytes/sample\n", per_v1, per_v2);
  EXPECT_LE(per_v2, 64.0);
  EXPECT_GT(per_v1, 250.0);
  const auto b = ToBytes(v2);
  auto v = ParseAll(b);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ExpectEntriesEqual(*v, b, samples);
}

// Dims that vary otherwise than the length get a column; constant dims and dims equal to the
// length get none; paths restart every 16 records; metadata and empty paths round-trip; a block
// size that does not divide N leaves a short last block.
TEST(IndexTest, RoundTripOfEveryKindOfValue) {
  Schema schema;
  schema.fields = {{"tokens", DType::kInt32, 1, 0},
                   {"image", DType::kUInt8, 3, -1},  // [3, h, w]: 3 constant, h and w vary
                   {"scalar", DType::kFloat32, 0, -1}};
  schema.length_field = 0;
  std::mt19937_64 rng(3);
  std::vector<IndexSample> samples;
  uint64_t offset = 4096;
  for (uint64_t i = 0; i < 1000; ++i) {
    IndexSample s;
    const uint64_t l = rng() % 300;
    s.dims = {l, 3, 1 + rng() % 70000, 1 + rng() % 5};
    format::PayloadLayout layout;
    ASSERT_TRUE(format::ComputeLayout(schema, s.dims, &layout).ok());
    s.tensor_offsets = layout.offsets;
    s.tensor_sizes = layout.sizes;
    s.record.offset = offset;
    s.record.raw_size = layout.raw_size;
    s.record.flags = i % 3 == 0 ? format::kFlagZstd : 0;
    s.record.stored_size = s.record.flags ? 1 + rng() % layout.raw_size : layout.raw_size;
    s.record.checksum = rng();
    s.record.length = l;
    s.record.source_mtime_ns = -1 - static_cast<int64_t>(i);  // before 1970: the u64 bits
    if (i % 5 != 0) s.source_path = "dir/" + std::to_string(i % 7) + "/file_" + std::to_string(i);
    if (i % 4 == 0) {
      Metadata m = {{"id", int64_t(i)}, {"name", std::string("s") + std::to_string(i)}};
      ASSERT_TRUE(format::EncodeMetadata(m, &s.metadata).ok());
    }
    offset = format::AlignUp(offset + s.record.stored_size + 1, 4096);
    samples.push_back(std::move(s));
  }
  std::vector<format::IndexShard> shards = {{"shard-00000.lss", offset, 0, 0}};
  for (uint32_t block_samples : {1u, 16u, 64u, 4096u}) {
    SCOPED_TRACE("block_samples " + std::to_string(block_samples));
    const auto b = ToBytes(format::EncodeIndex(schema, shards, samples, {}, block_samples));
    auto v = ParseAll(b);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->block_count(), (1000 + block_samples - 1) / block_samples);
    EXPECT_EQ(v->shards()[0].sample_count, 1000u);
    ExpectEntriesEqual(*v, b, samples);
    std::vector<uint64_t> lengths;
    v->Lengths(&lengths);
    for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(lengths[i], samples[i].record.length);
  }
}

TEST(IndexTest, FieldCodecsRecordStoredRegionSizes) {
  const Schema schema = Eagle3Schema();
  std::vector<format::IndexShard> shards;
  auto samples = EagleSamples(100, &shards);
  std::vector<format::FieldCodec> codecs(4);
  codecs[2] = {2, {}};
  codecs[3] = {4, {1, 2, 3, 4, 5, 6, 7, 8}};
  std::mt19937_64 rng(5);
  for (IndexSample& s : samples) {
    s.field_stored_sizes = {0, 0, s.tensor_sizes[2] / 2 + rng() % 100,
                            s.tensor_sizes[3] / 3 + rng() % 100};
    std::vector<uint64_t> offsets;
    ASSERT_TRUE(format::ComputeStoredLayout(codecs, s.tensor_sizes, s.field_stored_sizes,
                                            &offsets, &s.record.stored_size));
  }
  const auto b = ToBytes(format::EncodeIndex(schema, shards, samples, codecs));
  auto v = ParseAll(b);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->codecs(), codecs);
  auto block = Block(*v, b, 0);
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  for (uint64_t i = 0; i < samples.size(); ++i) {
    std::vector<uint64_t> stored;
    v->FieldStoredSizes(*block, i, &stored);
    EXPECT_EQ(stored, samples[i].field_stored_sizes);
    EXPECT_EQ(v->Record(*block, i).stored_size, samples[i].record.stored_size);  // derived
  }
}

class IndexDamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    samples_ = EagleSamples(300, &shards_);
    bytes_ = ToBytes(format::EncodeIndex(Eagle3Schema(), shards_, samples_, {}, 128));
    auto v = ParseAll(bytes_);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
  }
  // Re-seals the head checksum (a forged but self-consistent head).
  void ResealHead() {
    auto l = Index::ParseHeader({bytes_.data(), 128}, bytes_.size(), "idx");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    format::PutU64(bytes_.data() + 120,
                   format::Xxh3WithHole({bytes_.data(), l->head_size}, 120));
  }
  std::vector<format::IndexShard> shards_;
  std::vector<IndexSample> samples_;
  std::vector<std::byte> bytes_;
};

TEST_F(IndexDamageTest, ForgedSampleCountIsRefusedFromTheHeaderAlone) {
  format::PutU64(bytes_.data() + 16, uint64_t{1} << 40);
  ExpectError(Index::ParseHeader({bytes_.data(), 128}, bytes_.size(), "idx").status(),
              StatusCode::kCorruption, {"idx", "offset 16", "cannot fit"});
}

TEST_F(IndexDamageTest, HeadBytesAreCoveredByTheChecksum) {
  bytes_[200] ^= std::byte{1};
  ExpectError(ParseAll(bytes_).status(), StatusCode::kCorruption,
              {"idx", "offset 120", "index checksum mismatch"});
}

TEST_F(IndexDamageTest, LengthsAreCoveredByTheirChecksum) {
  auto l = Index::ParseHeader({bytes_.data(), 128}, bytes_.size(), "idx");
  ASSERT_TRUE(l.ok());
  bytes_[l->lengths_offset + 3] ^= std::byte{1};
  ExpectError(ParseAll(bytes_).status(), StatusCode::kCorruption, {"idx", "lengths checksum"});
}

TEST_F(IndexDamageTest, ADamagedBlockFailsOnlyWhenUsed) {
  auto v = ParseAll(bytes_);
  ASSERT_TRUE(v.ok());
  bytes_[v->block_offset(1) + 5] ^= std::byte{1};
  auto again = ParseAll(bytes_);
  ASSERT_TRUE(again.ok()) << "a block is not read at open";
  EXPECT_TRUE(Block(*again, bytes_, 0).ok());
  EXPECT_TRUE(Block(*again, bytes_, 2).ok());
  ExpectError(Block(*again, bytes_, 1).status(), StatusCode::kCorruption,
              {"idx", "block 1", "offset " + std::to_string(v->block_offset(1)),
               "checksum mismatch"});
}

TEST_F(IndexDamageTest, RecordRulesAreCheckedWhenTheBlockIsLoaded) {
  // A forged record with a valid block checksum: shard out of range.
  auto v = ParseAll(bytes_);
  ASSERT_TRUE(v.ok());
  const uint64_t b = 1, off = v->block_offset(b), size = v->block_size(b);
  const uint64_t k = 5;  // record 5 of block 1: sample 133
  bytes_[off + k * v->record_width()] = std::byte{0x7f};  // the shard column comes first
  format::PutU64(bytes_.data() + 128 + 32 * 4 + 16 * 8 + 40 * shards_.size() + 16 * b + 8,
                 format::Xxh3(bytes_.data() + off, size));
  ResealHead();
  auto again = ParseAll(bytes_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectError(Block(*again, bytes_, b).status(), StatusCode::kCorruption,
              {"idx", "sample 133", "block 1", "shard 127 out of range"});
}

TEST_F(IndexDamageTest, ReservedAndUnknownValuesAreRefused) {
  {
    std::vector<std::byte> saved = bytes_;
    bytes_[100] = std::byte{1};  // reserved header byte (checked before the checksum)
    ExpectError(ParseAll(bytes_).status(), StatusCode::kCorruption,
                {"idx", "offset 100", "reserved"});
    bytes_ = saved;
  }
  {
    format::PutU32(bytes_.data() + 8, 5);
    ExpectError(ParseAll(bytes_).status(), StatusCode::kUnsupported, {"idx", "version 5"});
  }
}

// Index version 3 (FORMAT.md §3.9): the field checksums are recorded only when every sample has
// them; version 2 is still written on request, without them; a version 2 header with the field
// checksum flag is refused (the flag is version 3's).
TEST(IndexV3Test, FieldChecksumsOnlyWhenEverySampleHasThem) {
  std::vector<format::IndexShard> shards;
  auto samples = EagleSamples(50, &shards);
  const auto all = ToBytes(format::EncodeIndex(Eagle3Schema(), shards, samples, {}, 16));
  auto v = ParseAll(all);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->version(), 3u);
  EXPECT_TRUE(v->has_field_checksums());
  ExpectEntriesEqual(*v, all, samples);

  const auto v2 = ToBytes(format::EncodeIndex(Eagle3Schema(), shards, samples, {}, 16,
                                                format::kIndexVersion2));
  auto p2 = ParseAll(v2);
  ASSERT_TRUE(p2.ok()) << p2.status().ToString();
  EXPECT_EQ(p2->version(), 2u);
  EXPECT_FALSE(p2->has_field_checksums());
  EXPECT_EQ(p2->record_width() + 16, v->record_width());  // 4 fields x 4 bytes
  ExpectEntriesEqual(*p2, v2, samples);

  samples[17].field_checksums.clear();  // one sample without: none recorded
  const auto some = ToBytes(format::EncodeIndex(Eagle3Schema(), shards, samples, {}, 16));
  auto p3 = ParseAll(some);
  ASSERT_TRUE(p3.ok()) << p3.status().ToString();
  EXPECT_EQ(p3->version(), 3u);
  EXPECT_FALSE(p3->has_field_checksums());

  std::vector<std::byte> forged = v2;
  format::PutU32(forged.data() + 12, format::GetU32(forged.data() + 12) | 2u);
  ExpectError(ParseAll(forged).status(), StatusCode::kCorruption,
              {"idx", "offset 12", "unknown header flags"});
}

// The field checksum columns are covered by the block checksum and sized into the minimal file
// bound: a forged count is still refused from the header alone.
TEST(IndexV3Test, FieldChecksumColumnsAreCheckedLikeTheOthers) {
  std::vector<format::IndexShard> shards;
  auto samples = EagleSamples(40, &shards);
  auto bytes = ToBytes(format::EncodeIndex(Eagle3Schema(), shards, samples, {}, 16));
  auto v = ParseAll(bytes);
  ASSERT_TRUE(v.ok());
  const uint64_t off = v->block_offset(1);
  // The last field checksum column of record 0 of block 1: the last 4 bytes of the record.
  bytes[off + v->record_width() - 1] ^= std::byte{1};
  auto again = ParseAll(bytes);
  ASSERT_TRUE(again.ok());
  ExpectError(Block(*again, bytes, 1).status(), StatusCode::kCorruption,
              {"idx", "block 1", "checksum mismatch"});
  format::PutU64(bytes.data() + 16, uint64_t{1} << 40);
  ExpectError(Index::ParseHeader({bytes.data(), 128}, bytes.size(), "idx").status(),
              StatusCode::kCorruption, {"idx", "offset 16", "cannot fit"});
}

// ---- Index version 4 (FORMAT.md §3.10): a block table per sample in the tables part ----

// Each sample's block table as the libshard writer's rule gives it (§3.10.5): hidden_state and
// aux_hidden_state in ~1 MiB row blocks, input_ids and loss_mask (under 1 MiB) without blocks.
std::string Eagle3Table(const IndexSample& s, uint64_t seed) {
  const auto rows = format::SampleFieldRows(Eagle3Schema(), s.dims, {});
  format::BlockTable t;
  t.fields.resize(rows.size());
  std::mt19937_64 rng(seed);
  for (size_t f = 0; f < rows.size(); ++f) {
    const uint64_t br = std::max<uint64_t>(1, format::kRowBlockBytes / rows[f].row_bytes());
    if (br >= rows[f].rows) continue;
    t.fields[f].block_rows = static_cast<uint32_t>(br);
    for (uint64_t b = 0; b < format::BlockCount(rows[f].rows, t.fields[f].block_rows); ++b)
      t.fields[f].checksums.push_back(static_cast<uint32_t>(rng()));
  }
  return format::EncodeBlockTable(t);
}

std::vector<IndexSample> EagleSamplesWithTables(uint64_t n,
                                                std::vector<format::IndexShard>* shards) {
  std::vector<IndexSample> samples = EagleSamples(n, shards);
  for (uint64_t i = 0; i < n; ++i) samples[i].block_table = Eagle3Table(samples[i], i);
  return samples;
}

// Reads sample i's table from the index bytes, checked (§3.10.3).
Result<format::BlockTable> TableOf(const Index& v, const std::vector<std::byte>& b, uint64_t i) {
  LIBSHARD_ASSIGN_OR_RETURN(format::IndexBlock block, Block(v, b, v.block_of(i)));
  const Index::TableRef ref = v.Table(block, i);
  std::vector<uint64_t> dims;
  v.Dims(block, i, &dims);
  return v.CheckTable(i, ref, {b.data() + ref.offset, ref.size}, dims,
                      v.Record(block, i).flags);
}

TEST(IndexV4Test, BlockTablesRoundTripAndCostAFewBytesASample) {
  std::vector<format::IndexShard> shards;
  const auto samples = EagleSamplesWithTables(2000, &shards);
  const auto bytes = ToBytes(format::EncodeIndex(Eagle3Schema(), shards, samples));
  auto v = ParseAll(bytes);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->version(), 4u);
  EXPECT_TRUE(v->has_field_checksums());
  EXPECT_TRUE(v->has_block_tables());
  ExpectEntriesEqual(*v, bytes, samples);
  uint64_t table_bytes = 0;
  for (uint64_t i = 0; i < samples.size(); i += 7) {
    auto t = TableOf(*v, bytes, i);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(format::EncodeBlockTable(*t), *samples[i].block_table) << i;
  }
  for (const IndexSample& s : samples) table_bytes += s.block_table->size();
  EXPECT_EQ(bytes.size() - v->tables_offset(), table_bytes);
  // The records grow by the three table columns only (FORMAT.md §3.10.4): about 9 bytes.
  auto v3 = samples;
  for (IndexSample& s : v3) s.block_table.reset();
  auto p3 = ParseAll(ToBytes(format::EncodeIndex(Eagle3Schema(), shards, v3)));
  ASSERT_TRUE(p3.ok());
  EXPECT_EQ(p3->version(), 3u);  // not every sample has a table: version 3
  EXPECT_LE(v->record_width() - p3->record_width(), 10u);
  EXPECT_GE(v->record_width() - p3->record_width(), 4u);
}

TEST(IndexV4Test, ASampleWithoutATableHasNoneAndTheOthersKeepTheirs) {
  std::vector<format::IndexShard> shards;
  auto samples = EagleSamplesWithTables(40, &shards);
  samples[3].block_table = "";  // no field with blocks
  const auto bytes = ToBytes(format::EncodeIndex(Eagle3Schema(), shards, samples, {}, 16));
  auto v = ParseAll(bytes);
  ASSERT_TRUE(v.ok());
  auto t3 = TableOf(*v, bytes, 3);
  ASSERT_TRUE(t3.ok()) << t3.status().ToString();
  EXPECT_TRUE(t3->empty());
  auto t4 = TableOf(*v, bytes, 4);
  ASSERT_TRUE(t4.ok());
  EXPECT_EQ(format::EncodeBlockTable(*t4), *samples[4].block_table);
}

class IndexV4DamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    samples_ = EagleSamplesWithTables(60, &shards_);
    bytes_ = ToBytes(format::EncodeIndex(Eagle3Schema(), shards_, samples_, {}, 16));
    auto v = ParseAll(bytes_);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    tables_ = v->tables_offset();
    width_ = v->record_width();
  }
  // Re-seals block b's checksum and then the head's (a forged but self-consistent index).
  void Reseal(uint64_t b) {
    auto v = ParseAll(bytes_);  // the head may be refused; the directory is at a fixed place
    const uint64_t dir = 128 + 32 * 4 + 16 * 8 + 40 * shards_.size();
    const uint64_t off = format::GetU64(bytes_.data() + dir + 16 * b);
    const uint64_t end = format::GetU64(bytes_.data() + dir + 16 * (b + 1));
    format::PutU64(bytes_.data() + dir + 16 * b + 8, format::Xxh3(bytes_.data() + off, end - off));
    auto l = Index::ParseHeader({bytes_.data(), 128}, bytes_.size(), "idx");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    format::PutU64(bytes_.data() + 120, format::Xxh3WithHole({bytes_.data(), l->head_size}, 120));
  }
  // Record k of block b: its table columns (the last of the record).
  std::byte* TableColumns(const Index& v, uint64_t b, uint64_t k) {
    const uint64_t w = std::to_integer<uint8_t>(bytes_[96]) + std::to_integer<uint8_t>(bytes_[97]);
    return bytes_.data() + v.block_offset(b) + (k + 1) * width_ - w - 4;
  }
  std::vector<format::IndexShard> shards_;
  std::vector<IndexSample> samples_;
  std::vector<std::byte> bytes_;
  uint64_t tables_ = 0;
  uint64_t width_ = 0;
};

TEST_F(IndexV4DamageTest, HeaderFieldsOfVersion4AreChecked) {
  const std::vector<std::byte> saved = bytes_;
  format::PutU64(bytes_.data() + 88, bytes_.size() + 1);  // before the checksum: refused first
  ExpectError(ParseAll(bytes_).status(), StatusCode::kCorruption, {"idx", "offset 88", "past the end"});
  bytes_ = saved;
  bytes_[96] = std::byte{9};
  ExpectError(ParseAll(bytes_).status(), StatusCode::kCorruption, {"idx", "offset 96", "width"});
  bytes_ = saved;
  format::PutU32(bytes_.data() + 12, 1);  // version 4 without field checksums
  ExpectError(ParseAll(bytes_).status(), StatusCode::kCorruption,
              {"idx", "offset 12", "version 4 without field checksums"});
  bytes_ = saved;
  bytes_[110] = std::byte{1};  // still reserved
  ExpectError(ParseAll(bytes_).status(), StatusCode::kCorruption, {"idx", "offset 110", "reserved"});
  bytes_ = saved;
  bytes_[200] ^= std::byte{1};  // tables_offset and the widths are in the head: its checksum
  ExpectError(ParseAll(bytes_).status(), StatusCode::kCorruption, {"idx", "index checksum"});
}

TEST_F(IndexV4DamageTest, Version3HeadersKeepTheBytesReserved) {
  auto v3 = samples_;
  for (IndexSample& s : v3) s.block_table.reset();
  auto bytes = ToBytes(format::EncodeIndex(Eagle3Schema(), shards_, v3, {}, 16));
  for (uint64_t at : {88, 95, 96, 97}) {
    auto forged = bytes;
    forged[at] = std::byte{1};
    ExpectError(ParseAll(forged).status(), StatusCode::kCorruption,
                {"idx", "offset " + std::to_string(at < 96 ? 88 : at), "reserved"});
  }
}

TEST_F(IndexV4DamageTest, ATableOutsideTheTablesPartIsRefusedWithItsRecord) {
  auto v = ParseAll(bytes_);
  ASSERT_TRUE(v.ok());
  const uint8_t ow = std::to_integer<uint8_t>(bytes_[96]);
  std::byte* col = TableColumns(*v, 1, 2);  // sample 18
  for (uint8_t k = 0; k < ow; ++k) col[k] = std::byte{0xff};  // offset past the part
  Reseal(1);
  auto again = ParseAll(bytes_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectError(Block(*again, bytes_, 1).status(), StatusCode::kCorruption,
              {"idx", "sample 18", "outside the tables part"});
}

TEST_F(IndexV4DamageTest, ATableSizeMustBeWordsAndZeroMeansNone) {
  auto v = ParseAll(bytes_);
  ASSERT_TRUE(v.ok());
  const uint8_t ow = std::to_integer<uint8_t>(bytes_[96]), sw = std::to_integer<uint8_t>(bytes_[97]);
  {
    std::byte* col = TableColumns(*v, 2, 0);  // sample 32: size 1 byte less
    uint64_t size = 0;
    for (uint8_t k = 0; k < sw; ++k) size |= uint64_t{std::to_integer<uint8_t>(col[ow + k])} << (8 * k);
    ASSERT_GT(size, 0u);
    --size;
    for (uint8_t k = 0; k < sw; ++k) col[ow + k] = std::byte{static_cast<uint8_t>(size >> (8 * k))};
    Reseal(2);
    auto again = ParseAll(bytes_);
    ASSERT_TRUE(again.ok());
    ExpectError(Block(*again, bytes_, 2).status(), StatusCode::kCorruption,
                {"idx", "sample 32", "whole number of words"});
  }
  SetUp();
  {
    v = ParseAll(bytes_);
    std::byte* col = TableColumns(*v, 2, 0);
    for (uint8_t k = 0; k < sw; ++k) col[ow + k] = std::byte{0};  // size 0, checksum kept
    Reseal(2);
    auto again = ParseAll(bytes_);
    ASSERT_TRUE(again.ok());
    ExpectError(Block(*again, bytes_, 2).status(), StatusCode::kCorruption,
                {"idx", "sample 32", "without a block table has a table offset or checksum"});
  }
}

// A table's bytes are covered by its checksum (FORMAT.md §3.10.1) and checked against the dims
// when used; a damaged table fails its sample's slices, not the index.
TEST_F(IndexV4DamageTest, ADamagedTableFailsWhenUsedNamingTheSample) {
  bytes_[tables_ + 5] ^= std::byte{1};  // sample 0's table (the first in the part)
  auto v = ParseAll(bytes_);
  ASSERT_TRUE(v.ok()) << "tables are not read at open";
  EXPECT_TRUE(Block(*v, bytes_, 0).ok()) << "nor with their records";
  ExpectError(TableOf(*v, bytes_, 0).status(), StatusCode::kCorruption,
              {"idx", "sample 0", "block table", "checksum mismatch"});
  EXPECT_TRUE(TableOf(*v, bytes_, 1).ok());
}

// The table parser (§3.10.2) on forged words: every rule refused with the field named.
TEST(BlockTableTest, ForgedTablesAreRefused) {
  const std::vector<format::FieldRows> rows = {{100, 1, 8, false}, {100, 64, 2, true}};
  auto words = [](std::initializer_list<uint32_t> w) {
    std::string s;
    for (uint32_t x : w) s.append(reinterpret_cast<const char*>(&x), 4);  // little-endian host
    return s;
  };
  auto parse = [&](const std::string& t, bool zstd = false) {
    return format::ParseBlockTable({format::AsBytes(t), t.size()}, rows, zstd);
  };
  // Field 0: 50 rows a block (2 checksums); field 1: 40 rows a chunk (3 chunks: head + 3 pairs).
  const std::string good = words({50, 11, 12, 40, 99, 5, 21, 6, 22, 7, 23});
  auto t = parse(good);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->fields[0].checksums, (std::vector<uint32_t>{11, 12}));
  EXPECT_EQ(t->fields[1].head_checksum, 99u);
  EXPECT_EQ(t->fields[1].coded_sizes, (std::vector<uint32_t>{5, 6, 7}));
  EXPECT_EQ(format::EncodeBlockTable(*t), good);
  ExpectError(parse(words({100, 1, 0})).status(), StatusCode::kCorruption,
              {"field 0", "block_rows 100"});
  ExpectError(parse(words({50, 11})).status(), StatusCode::kCorruption, {"field 0", "2 blocks"});
  ExpectError(parse(good + words({0})).status(), StatusCode::kCorruption, {"past its last field"});
  ExpectError(parse(words({0, 0})).status(), StatusCode::kCorruption, {"without a field"});
  ExpectError(parse(good.substr(0, 5)).status(), StatusCode::kCorruption, {"whole number"});
  ExpectError(parse(good, /*zstd=*/true).status(), StatusCode::kCorruption, {"whole-sample zstd"});
  ExpectError(parse(words({0xffffffffu})).status(), StatusCode::kCorruption, {"field 0"});
  EXPECT_TRUE(parse("").ok());  // no table: no blocks
}

TEST_F(IndexDamageTest, TruncatedOrExtendedFileIsRefused) {
  ExpectError(Index::ParseHeader({bytes_.data(), 128}, bytes_.size() - 1, "idx").status(),
              StatusCode::kCorruption, {"idx", "truncated or extended"});
}

}  // namespace
}  // namespace libshard::testing
