// The index of sample blocks, versions 2 to 4 (FORMAT.md §3.8, §3.9, §3.10; format/index.h): round trips through
// EncodeIndex and the three-step parser, what is stored per sample (the size target), and forged
// or damaged bytes refused with the file, block and sample named.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

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

TEST_F(IndexDamageTest, TruncatedOrExtendedFileIsRefused) {
  ExpectError(Index::ParseHeader({bytes_.data(), 128}, bytes_.size() - 1, "idx").status(),
              StatusCode::kCorruption, {"idx", "truncated or extended"});
}

}  // namespace
}  // namespace libshard::testing
