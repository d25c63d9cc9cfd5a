// The version-1 index reader (read only, format/legacy/; inputs from the frozen test encoder),
// manifest, journal and metadata parsers on forged and random input (FORMAT.md §3, §5, §6).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/legacy/index_v1.h"
#include "format/index.h"
#include "format/journal.h"
#include "format/manifest.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "testutil/index_v1_encoder.h"
#include "testutil/testutil.h"

// Records the largest allocation made through operator new while tracking is on, so tests can
// prove that forged counts are rejected before anything proportional to them is allocated.
namespace {
std::atomic<bool> g_tracking{false};
std::atomic<size_t> g_largest{0};
}  // namespace

void* operator new(size_t n) {
  if (g_tracking.load(std::memory_order_relaxed)) {
    size_t cur = g_largest.load();
    while (n > cur && !g_largest.compare_exchange_weak(cur, n)) {
    }
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace libshard::testing {
namespace {

using format::GetU64;
using format::legacy::IndexV1View;
using format::PutU32;
using format::PutU64;

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A valid index of `n` EAGLE-like samples in one shard, built with the encoder.
std::string ValidIndex(uint64_t n = 3) {
  Schema schema = EagleSchema();
  std::vector<format::IndexSample> samples;
  uint64_t offset = 4096;
  for (uint64_t i = 0; i < n; ++i) {
    format::IndexSample s;
    const uint64_t len = 4 + i;
    s.dims = {len, len, 1, len, 8};
    format::PayloadLayout layout;
    EXPECT_TRUE(format::ComputeLayout(schema, s.dims, &layout).ok());
    s.tensor_offsets = layout.offsets;
    s.tensor_sizes = layout.sizes;
    s.record.offset = offset;
    s.record.stored_size = s.record.raw_size = layout.raw_size;
    s.record.length = len;
    s.source_path = "src/" + std::to_string(i) + ".pt";
    EXPECT_TRUE(format::EncodeMetadata({{"k", int64_t(i)}}, &s.metadata).ok());
    offset += format::AlignUp(layout.raw_size, 4096);
    samples.push_back(std::move(s));
  }
  return EncodeIndexV1(schema, {{"shard-00000.lss", offset, n}}, samples);
}

void FixChecksum(std::string& s) {
  auto* p = reinterpret_cast<std::byte*>(s.data());
  PutU64(p + format::kIndexChecksumOffset,
         format::Xxh3WithHole({p, s.size()}, format::kIndexChecksumOffset));
}

Status ParseTracked(const std::string& s, size_t* largest) {
  g_largest = 0;
  g_tracking = true;
  Status st = IndexV1View::Parse(Bytes(s), "idx").status();
  g_tracking = false;
  *largest = g_largest;
  return st;
}

TEST(IndexV1Test, ValidIndexParses) {
  std::string s = ValidIndex();
  auto v = IndexV1View::Parse(Bytes(s), "idx");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->sample_count(), 3u);
  EXPECT_EQ(v->schema(), EagleSchema());
  EXPECT_EQ(v->source_path(2), "src/2.pt");
  EXPECT_EQ(v->shape(1, 2), (Shape{1, 5, 8}));
  EXPECT_EQ(v->record(1).length, 5u);
  Metadata m;
  ASSERT_TRUE(format::DecodeMetadata(v->metadata_bytes(2), &m).ok());
  EXPECT_EQ(m, (Metadata{{"k", int64_t{2}}}));
  // Every header field is where FORMAT.md §3.1 says.
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  EXPECT_EQ(std::string(s.data(), 8), std::string("LSHDIDX\0", 8));
  EXPECT_EQ(format::GetU32(p + 8), 1u);
  EXPECT_EQ(GetU64(p + 16), 3u);
  EXPECT_EQ(format::GetU32(p + 24), 3u);
  EXPECT_EQ(format::GetU32(p + 28), 1u);
  EXPECT_EQ(GetU64(p + 32), 128u);
  EXPECT_EQ(GetU64(p + 40), 128u + 3 * 32);
  EXPECT_EQ(GetU64(p + 48), 128u + 3 * 32 + 32);
  EXPECT_EQ(GetU64(p + 88), s.size());
  EXPECT_EQ(format::GetI32(p + 96), 0);
}

// A version 1 index whose source path holds a NUL byte is refused as the current index refuses
// one, so `libshard upgrade` never rewrites a version 1 index into one the reader refuses (found
// by index_fuzz, fuzz/regressions/index_fuzz/v1_nul_in_source_path).
TEST(IndexV1Test, NulByteInSourcePathIsRejected) {
  std::string s = ValidIndex();
  const size_t at = s.find("src/1.pt");
  ASSERT_NE(at, std::string::npos);
  s[at + 4] = '\0';
  FixChecksum(s);
  auto v = IndexV1View::Parse(Bytes(s), "idx");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kCorruption) << v.status().ToString();
  EXPECT_NE(v.status().message().find("sample 1"), std::string::npos) << v.status().ToString();
  EXPECT_NE(v.status().message().find("NUL"), std::string::npos) << v.status().ToString();
}

TEST(IndexV1Test, ForgedSampleCountIsRejectedWithoutAllocating) {
  for (uint64_t forged : {uint64_t{1} << 60, kMaxSamples, uint64_t{1} << 32, uint64_t{4}}) {
    std::string s = ValidIndex();
    PutU64(reinterpret_cast<std::byte*>(s.data()) + 16, forged);
    FixChecksum(s);
    size_t largest = 0;
    Status st = ParseTracked(s, &largest);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << forged;
    EXPECT_LT(largest, size_t{1} << 16) << "allocated " << largest << " bytes for count " << forged;
  }
}

// Index version 2 (FORMAT.md §3.8.1): Dataset::Open reads the 128-byte header first and refuses
// counts the file cannot hold before it allocates the head or the lengths.
TEST(IndexV1Test, ForgedVersion2CountsAreRejectedBeforeOpenAllocates) {
  TempDir dir;
  WriteStandard(dir.path(), 3, FastOptions());
  const std::filesystem::path index = dir / "index.lsi";
  const std::string good = ReadFileToString(index);
  ASSERT_EQ(format::GetU32(format::AsBytes(good) + 8), format::kIndexVersion);
  for (auto [at, forged] : std::vector<std::pair<size_t, uint64_t>>{
           {16, uint64_t{1} << 40},            // sample count
           {40, uint64_t{1} << 50},            // strings size
           {40, ~uint64_t{0} - 64},            // strings size that overflows the head size
           {84, uint64_t{4096} * 16}}) {       // dims per sample (u32)
    std::string s = good;
    if (at == 84) {
      format::PutU32(reinterpret_cast<std::byte*>(s.data()) + at, static_cast<uint32_t>(forged));
    } else {
      PutU64(reinterpret_cast<std::byte*>(s.data()) + at, forged);
    }
    WriteStringToFile(index, s);
    g_largest = 0;
    g_tracking = true;
    Status st = Dataset::Open(dir.path().string()).status();
    g_tracking = false;
    ExpectError(st, StatusCode::kCorruption, {index.string(), "cannot fit"});
    EXPECT_LT(g_largest.load(), size_t{1} << 20) << "allocated " << g_largest << " for " << at;
  }
}

TEST(IndexV1Test, ForgedRankIsRejectedWithoutAllocating) {
  std::string s = ValidIndex();
  PutU32(reinterpret_cast<std::byte*>(s.data()) + 128 + 32 * 2 + 4, 1000);  // hidden_state rank
  FixChecksum(s);
  size_t largest = 0;
  Status st = ParseTracked(s, &largest);
  ExpectError(st, StatusCode::kCorruption, {"idx", "field 2", "rank 1000 exceeds the limit 16"});
  EXPECT_LT(largest, size_t{1} << 16);
}

TEST(IndexV1Test, ForgedFieldAndShardCountsAreRejected) {
  for (size_t at : {size_t{24}, size_t{28}}) {
    std::string s = ValidIndex();
    PutU32(reinterpret_cast<std::byte*>(s.data()) + at, 0xFFFFFFFFu);
    FixChecksum(s);
    size_t largest = 0;
    EXPECT_EQ(ParseTracked(s, &largest).code(), StatusCode::kCorruption);
    EXPECT_LT(largest, size_t{1} << 16);
  }
}

TEST(IndexV1Test, ForgedBlobAndDimsAreRejected) {
  {
    std::string s = ValidIndex();
    PutU64(reinterpret_cast<std::byte*>(s.data()) + 80, uint64_t{1} << 62);  // blob_size
    FixChecksum(s);
    EXPECT_EQ(IndexV1View::Parse(Bytes(s), "idx").status().code(), StatusCode::kCorruption);
  }
  {
    // A huge dim: nbytes overflows.
    std::string s = ValidIndex(1);
    const uint64_t dims_at = GetU64(reinterpret_cast<const std::byte*>(s.data()) + 64);
    PutU64(reinterpret_cast<std::byte*>(s.data()) + dims_at + 8 * 4, uint64_t{1} << 62);
    FixChecksum(s);
    ExpectError(IndexV1View::Parse(Bytes(s), "idx").status(), StatusCode::kCorruption,
                {"sample 0", "hidden_state", "overflows"});
  }
  {
    // A field name range outside the blob.
    std::string s = ValidIndex(1);
    PutU64(reinterpret_cast<std::byte*>(s.data()) + 128 + 16, uint64_t{1} << 40);
    FixChecksum(s);
    ExpectError(IndexV1View::Parse(Bytes(s), "idx").status(), StatusCode::kCorruption,
                {"field 0", "name range"});
  }
  {
    // Shard names must be plain file names (no path traversal).
    Schema schema = EagleSchema();
    std::string s = EncodeIndexV1(schema, {{"../etc/passwd", 4096, 0}}, {});
    ExpectError(IndexV1View::Parse(Bytes(s), "idx").status(), StatusCode::kCorruption,
                {"not a plain file name"});
  }
}

TEST(IndexV1Test, RandomDamageNeverCrashes) {
  // A poor man's fuzzer that runs in CI (fuzz/index_fuzz.cc is the real one): random byte edits,
  // with the checksum recomputed so the deeper checks are reached.
  const std::string valid = ValidIndex(4);
  uint64_t state = 12345;
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s = valid;
    const int edits = 1 + SplitMix(&state) % 4;
    for (int e = 0; e < edits; ++e) {
      const uint64_t at = SplitMix(&state) % s.size();
      const uint64_t kind = SplitMix(&state) % 3;
      if (kind == 0) s[at] ^= static_cast<char>(1 << (SplitMix(&state) % 8));
      else if (kind == 1) s[at] = static_cast<char>(SplitMix(&state));
      else if (at + 8 <= s.size()) PutU64(reinterpret_cast<std::byte*>(s.data()) + at, SplitMix(&state) >> (SplitMix(&state) % 64));
    }
    if (SplitMix(&state) % 8 == 0) s.resize(SplitMix(&state) % s.size());
    if (s.size() >= 128) FixChecksum(s);
    auto v = IndexV1View::Parse(Bytes(s), "idx");
    if (v.ok()) {
      ++accepted;
      // Whatever was accepted must be safe to use.
      for (uint64_t i = 0; i < v->sample_count(); ++i) {
        (void)v->Entry(i);
        EXPECT_TRUE(format::DecodeMetadata(v->metadata_bytes(i), nullptr).ok());
      }
    }
  }
  EXPECT_LT(accepted, 20000);
}

TEST(FormatMetadataTest, RoundTripAndErrors) {
  Metadata m = {{"b", true}, {"i", int64_t{-3}}, {"d", 2.5}, {"s", std::string("x\0y", 3)}};
  std::string enc;
  ASSERT_TRUE(format::EncodeMetadata(m, &enc).ok());
  // u32 count, then per entry u16 key_len, key, u8 type, value (FORMAT.md §3.4).
  EXPECT_EQ(enc.size(), 4u + (2 + 1 + 1 + 1) + (2 + 1 + 1 + 8) + (2 + 1 + 1 + 8) + (2 + 1 + 1 + 4 + 3));
  EXPECT_EQ(enc.substr(0, 8), std::string("\x04\0\0\0\x01\0b\x01", 8));
  Metadata out;
  ASSERT_TRUE(format::DecodeMetadata(Bytes(enc), &out).ok());
  EXPECT_EQ(out, m);
  std::string bad = enc;
  bad[7] = 9;  // unknown type
  ExpectError(format::DecodeMetadata(Bytes(bad), nullptr), StatusCode::kCorruption,
              {"byte 8", "unknown value type 9"});
  bad = enc;
  bad[8] = 2;  // bool that is not 0/1
  ExpectError(format::DecodeMetadata(Bytes(bad), nullptr), StatusCode::kCorruption, {"bool"});
  ExpectError(format::DecodeMetadata(Bytes(enc + "x"), nullptr), StatusCode::kCorruption,
              {"trailing"});
  std::string huge("\xff\xff\xff\xff", 4);
  ExpectError(format::DecodeMetadata(Bytes(huge), nullptr), StatusCode::kCorruption,
              {"entry count"});
  ExpectError(format::EncodeMetadata({{"", int64_t{1}}}, &enc), StatusCode::kInvalidArgument,
              {"key"});
}

// Found by fuzz/metadata_fuzz (fuzz/regressions/metadata_fuzz/): the decoder accepted what the
// encoder refuses, so a duplicate key silently shadowed a value and the metadata could not be
// written back (merge, unpack + pack).
TEST(FormatMetadataTest, DecoderRefusesWhatTheEncoderRefuses) {
  std::string one;
  ASSERT_TRUE(format::EncodeMetadata({{"k", int64_t{1}}}, &one).ok());
  std::string twice = one + one.substr(4);  // the entry again
  twice[0] = 2;
  ExpectError(format::DecodeMetadata(Bytes(twice), nullptr), StatusCode::kCorruption,
              {"byte 19", "key 'k' appears twice"});
  const std::string long_key(kMaxNameBytes + 1, 'k');
  std::string overlong("\x01\0\0\0", 4);
  overlong += static_cast<char>(long_key.size() & 0xff);
  overlong += static_cast<char>(long_key.size() >> 8);
  overlong += long_key + std::string("\x01\x01", 2);
  ExpectError(format::DecodeMetadata(Bytes(overlong), nullptr), StatusCode::kCorruption,
              {"key of 1025 bytes exceeds 1024"});
  ExpectError(format::EncodeMetadata({{long_key, true}}, &one), StatusCode::kInvalidArgument,
              {"key"});
}

TEST(FormatPayloadTest, CanonicalLayoutAndShuffle) {
  Schema schema = EagleSchema();
  format::PayloadLayout layout;
  ASSERT_TRUE(format::ComputeLayout(schema, std::vector<uint64_t>{3, 3, 1, 3, 5}, &layout).ok());
  EXPECT_EQ(layout.offsets, (std::vector<uint64_t>{0, 64, 128}));
  EXPECT_EQ(layout.sizes, (std::vector<uint64_t>{24, 24, 30}));
  EXPECT_EQ(layout.raw_size, 158u);
  std::vector<std::byte> raw(layout.raw_size), shuffled(layout.raw_size), back(layout.raw_size);
  for (size_t k = 0; k < raw.size(); ++k) raw[k] = static_cast<std::byte>(k);
  format::ShufflePayload(schema, layout, raw.data(), shuffled.data(), false);
  // bf16 tensor at 128: 15 low bytes (128, 130, ...) then 15 high bytes.
  EXPECT_EQ(shuffled[128], std::byte{128});
  EXPECT_EQ(shuffled[129], std::byte{130});
  EXPECT_EQ(shuffled[128 + 15], std::byte{129});
  EXPECT_EQ(shuffled[5], std::byte{5});  // int64 untouched
  format::ShufflePayload(schema, layout, shuffled.data(), back.data(), true);
  EXPECT_EQ(back, raw);
  ExpectError(format::ComputeLayout(schema, std::vector<uint64_t>{3, 3, 1, uint64_t{1} << 40, 1 << 20}, &layout),
              StatusCode::kInvalidArgument, {"hidden_state"});
}

TEST(FormatJournalTest, TornTailIsIgnored) {
  Schema schema = EagleSchema();
  std::vector<format::IndexSample> samples(3);
  for (uint64_t i = 0; i < 3; ++i) {
    samples[i].record.offset = 4096 * (i + 1);
    samples[i].record.checksum = 77 + i;
    samples[i].dims = {i, i, 1, i, 8};
    samples[i].tensor_offsets = {0, 64, 128};
    samples[i].tensor_sizes = {8 * i, 8 * i, 16 * i};
    samples[i].source_path = "p" + std::to_string(i);
    samples[i].metadata = "meta";
  }
  std::string j = format::EncodeJournalHeader(schema);
  j += format::EncodeJournalSamples(schema, 0, std::span(samples).first(2));
  const size_t good = j.size();
  j += format::EncodeJournalSamples(schema, 2, std::span(samples).subspan(2));
  auto all = format::ParseJournal(Bytes(j), "j");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->schema, schema);
  ASSERT_EQ(all->samples.size(), 3u);
  EXPECT_EQ(all->samples[2].record.checksum, 79u);
  EXPECT_EQ(all->samples[1].source_path, "p1");
  EXPECT_EQ(all->samples[1].dims, samples[1].dims);
  EXPECT_EQ(all->valid_size, j.size());
  for (size_t cut = good; cut < j.size(); cut += 5) {
    auto torn = format::ParseJournal(Bytes(j.substr(0, cut)), "j");
    ASSERT_TRUE(torn.ok());
    EXPECT_EQ(torn->samples.size(), 2u);
    EXPECT_EQ(torn->valid_size, good);
  }
  std::string flipped = j;
  flipped[good + 30] ^= 1;
  EXPECT_EQ(format::ParseJournal(Bytes(flipped), "j")->samples.size(), 2u);
  ExpectError(format::ParseJournal(Bytes(j.substr(0, 10)), "j").status(), StatusCode::kCorruption,
              {"no valid journal header"});
}

TEST(FormatManifestTest, RoundTripAndStrictness) {
  format::Manifest m;
  m.schema = EagleSchema();
  m.index_size = 1234;
  m.index_xxh3 = 0x0123456789abcdefull;
  m.shards = {{"shard-00000.lss", 8192, 2}};
  m.total_samples = 2;
  m.total_raw_bytes = 100;
  m.total_stored_bytes = 8192;
  m.source_root = "/data";
  m.sources = 2;
  m.created_by = "test";
  m.created_at = "2025-01-01T00:00:00Z";
  const std::string text = format::EncodeManifest(m);
  EXPECT_NE(text.find("\"xxh3\": \"0123456789abcdef\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"length_field\": \"input_ids\""), std::string::npos) << text;
  auto back = format::ParseManifest(text, "m");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->schema, m.schema);
  EXPECT_EQ(back->shards, m.shards);
  EXPECT_EQ(back->index_xxh3, m.index_xxh3);
  EXPECT_EQ(back->created_at, m.created_at);
  std::string unknown = text;
  unknown.insert(1, "\"surprise\": 1,");
  ExpectError(format::ParseManifest(unknown, "m").status(), StatusCode::kCorruption,
              {"unknown member 'surprise'"});
  std::string traversal = text;
  traversal.replace(traversal.find("shard-00000.lss"), 15, "../../etc/hosts");
  ExpectError(format::ParseManifest(traversal, "m").status(), StatusCode::kCorruption,
              {"plain file name"});
  std::string negative = text;
  negative.replace(negative.find("\"size\": 8192"), 12, "\"size\": -1");
  ExpectError(format::ParseManifest(negative, "m").status(), StatusCode::kCorruption,
              {"shards[0].size"});
}

// FORMAT.md §3.7 fixes the order of the checks; with two faults the one earlier in that order is
// reported. Each case pairs faults that the parser once checked the other way round.
TEST(IndexV1Test, ChecksFollowTheSpecOrder) {
  auto edit = [](auto&& change) {
    std::string s = ValidIndex();
    auto* p = reinterpret_cast<std::byte*>(s.data());
    change(p);
    FixChecksum(s);
    return IndexV1View::Parse(Bytes(s), "idx").status();
  };
  auto record = [](std::byte* p, uint64_t i) {
    return p + GetU64(p + format::legacy::kV1HeaderSamplesOffset) + format::kSampleRecordSize * i;
  };
  // Field names (with their ranges) before length_field.
  ExpectError(edit([](std::byte* p) {
                PutU64(p + format::kIndexHeaderSize + format::legacy::kV1FieldNameOffset, uint64_t{1} << 40);
                format::PutI32(p + format::legacy::kV1HeaderLengthField, 7);
              }),
              StatusCode::kCorruption, {"field 0", "name range"});
  // Within a record: shard in range before the reserved bytes.
  ExpectError(edit([&](std::byte* p) {
                PutU32(record(p, 1) + format::kRecordShard, 9);
                p[record(p, 1) - p + format::kRecordReserved] = std::byte{1};
              }),
              StatusCode::kCorruption, {"sample 1", "shard 9 out of range"});
  // Bounds in the shard before the flags.
  ExpectError(edit([&](std::byte* p) {
                PutU64(record(p, 1) + format::kRecordOffset, uint64_t{1} << 30);
                PutU32(record(p, 1) + format::kRecordFlags, 0x80);
              }),
              StatusCode::kCorruption, {"sample 1", "extend past the end of shard-00000.lss"});
  // Flags before the reserved bytes, and those before the blob ranges.
  ExpectError(edit([&](std::byte* p) {
                PutU32(record(p, 2) + format::kRecordFlags, 0x80);
                p[record(p, 2) - p + format::kRecordReserved + 23] = std::byte{1};
              }),
              StatusCode::kCorruption, {"sample 2", "unknown flag bits"});
  ExpectError(edit([&](std::byte* p) {
                p[record(p, 2) - p + format::kRecordReserved] = std::byte{1};
                PutU64(record(p, 2) + format::kRecordSourceSize, uint64_t{1} << 20);
              }),
              StatusCode::kCorruption, {"sample 2", "reserved bytes"});
}

}  // namespace
}  // namespace libshard::testing
