// Dataset: Open validation, corruption detection with precise messages, loader entry points.
#include "libshard/dataset.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "dataset/dataset_access.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index_common.h"
#include "format/manifest.h"
#include "format/shard_format.h"
#include "format_test_helpers.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

using format::GetU64;
using format::PutU32;
using format::PutU64;

class DatasetTest : public ::testing::Test {
 protected:
  // These tests edit index bytes at version 1 offsets (FORMAT.md §3.1-§3.7); version 2 has its
  // own (dataset_block_index_test.cc).
  void SetUp() override {
    WriteStandard(dir_.path(), kSamples, FastOptions());
    RewriteIndexAsV1(dir_.path());
  }

  std::string Dir() const { return dir_.path().string(); }
  std::filesystem::path Index() const { return dir_ / "index.lsi"; }
  std::filesystem::path Shard(uint32_t k) const { return dir_ / format::ShardFileName(k); }
  Result<std::shared_ptr<Dataset>> Open(DatasetOptions o = {}) const {
    return Dataset::Open(Dir(), o);
  }
  // Edits the index bytes and, when `fix_checksum`, recomputes its checksum (a forged but
  // self-consistent index) and the manifest's copy of it, so only the edit itself can be caught.
  template <typename F>
  void EditIndex(F&& edit, bool fix_checksum = true) {
    std::string s = ReadFileToString(Index());
    const std::string before = s;
    edit(s);
    auto* p = reinterpret_cast<std::byte*>(s.data());
    if (fix_checksum) {
      PutU64(p + format::kIndexChecksumOffset,
             format::Xxh3WithHole({p, s.size()}, format::kIndexChecksumOffset));
      std::string m = ReadFileToString(dir_ / "manifest.json");
      const std::string old_hex = format::Hex16(GetU64(
          reinterpret_cast<const std::byte*>(before.data()) + format::kIndexChecksumOffset));
      const std::string new_hex = format::Hex16(GetU64(p + format::kIndexChecksumOffset));
      m.replace(m.find(old_hex), 16, new_hex);
      WriteStringToFile(dir_ / "manifest.json", m);
    }
    WriteStringToFile(Index(), s);
  }
  static std::byte* At(std::string& s, uint64_t off) {
    return reinterpret_cast<std::byte*>(s.data()) + off;
  }
  static uint64_t RecordOffset(const std::string& s, uint64_t i) {
    return GetU64(reinterpret_cast<const std::byte*>(s.data()) + 48) + 128 * i;
  }
  static uint64_t TensorEntryOffset(const std::string& s, uint64_t i, uint64_t f) {
    return GetU64(reinterpret_cast<const std::byte*>(s.data()) + 56) + 16 * (3 * i + f);
  }

  static constexpr uint64_t kSamples = 5;
  TempDir dir_;
};

TEST_F(DatasetTest, OpensAndDescribesItself) {
  auto ds = Open();
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), kSamples);
  EXPECT_EQ((*ds)->path(), std::filesystem::canonical(dir_.path()).string());
  ASSERT_EQ((*ds)->shards().size(), 1u);
  EXPECT_EQ((*ds)->shards()[0].path, Shard(0).string());
  EXPECT_EQ((*ds)->shards()[0].samples, kSamples);
  uint64_t raw = 0;
  for (uint64_t i = 0; i < kSamples; ++i) raw += (*ds)->location(i).raw_size;
  EXPECT_EQ((*ds)->total_raw_bytes(), raw);
  EXPECT_EQ((*ds)->total_stored_bytes(), std::filesystem::file_size(Shard(0)));
  // The manifest's provenance, as Open read it (what `libshard info` shows).
  EXPECT_EQ((*ds)->provenance().created_by, "libshard tests");
  EXPECT_EQ((*ds)->provenance().created_at.size(), 20u) << (*ds)->provenance().created_at;
}

TEST_F(DatasetTest, MissingDirectoryAndManifest) {
  ExpectError(Dataset::Open((dir_ / "nope").string()).status(), StatusCode::kNotFound,
              {"nope", "no such directory"});
  std::filesystem::remove(dir_ / "manifest.json");
  ExpectError(Open().status(), StatusCode::kNotFound, {Dir(), "no manifest.json"});
}

TEST_F(DatasetTest, FlippedSampleByteIsCaughtByVerifyAndRead) {
  uint64_t offset = 0;
  {
    auto ds = Open();
    ASSERT_TRUE(ds.ok());
    offset = (*ds)->location(3).offset;
  }
  FlipByte(Shard(0), offset + 17);
  auto ds = Open();
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();  // sample bytes are not read at Open
  const std::vector<std::string> where = {Shard(0).string(), "sample 3",
                                          "offset " + std::to_string(offset), "checksum mismatch",
                                          "dump/data_3.pt", "re-run libshard pack"};
  ExpectError((*ds)->Verify(3), StatusCode::kCorruption, where);
  ExpectError((*ds)->Read(3).status(), StatusCode::kCorruption, where);
  EXPECT_TRUE((*ds)->Verify(2).ok());
  EXPECT_TRUE((*ds)->Verify(4).ok());
  // Without verification the damaged bytes come back as they are.
  auto unverified = Open({.verify_checksums = false});
  ASSERT_TRUE(unverified.ok());
  EXPECT_TRUE((*unverified)->Read(3).ok());
}

TEST_F(DatasetTest, TruncatedShardFailsOpenNamingTheShard) {
  TruncateFile(Shard(0), std::filesystem::file_size(Shard(0)) - 4096);
  ExpectError(Open().status(), StatusCode::kCorruption,
              {Shard(0).string(), "truncated", "recorded in the index"});
}

TEST_F(DatasetTest, MissingShardFailsOpen) {
  std::filesystem::remove(Shard(0));
  ExpectError(Open().status(), StatusCode::kNotFound, {Shard(0).string(), "missing"});
}

TEST_F(DatasetTest, DamagedShardHeaderFailsOpen) {
  FlipByte(Shard(0), 100);
  ExpectError(Open().status(), StatusCode::kCorruption, {Shard(0).string(), "checksum"});
}

// Shards are opened several at a time (Dataset::Open): with many shards, several of them damaged
// in different ways, the error is the first damaged shard's in index order, every time.
TEST(DatasetManyShardsTest, TheFirstDamagedShardInIndexOrderIsReported) {
  TempDir dir;
  WriterOptions o = FastOptions();
  o.shard_size = 1;  // a shard per sample
  WriteStandard(dir.path(), 24, o);
  auto ds = Dataset::Open(dir.path().string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->shards().size(), 24u);
  for (size_t k = 0; k < 24; ++k)
    EXPECT_EQ((*ds)->shards()[k].path, (dir / format::ShardFileName(k)).string());
  FlipByte(dir / format::ShardFileName(17), 100);
  std::filesystem::remove(dir / format::ShardFileName(21));
  FlipByte(dir / format::ShardFileName(5), 200);
  for (int run = 0; run < 5; ++run)
    ExpectError(Dataset::Open(dir.path().string()).status(), StatusCode::kCorruption,
                {format::ShardFileName(5), "checksum"});
}

TEST_F(DatasetTest, EditedIndexFailsTheChecksum) {
  EditIndex([&](std::string& s) { *At(s, RecordOffset(s, 2) + 8) ^= std::byte{1}; },
            /*fix_checksum=*/false);
  ExpectError(Open().status(), StatusCode::kCorruption,
              {Index().string(), "offset 120", "index checksum mismatch"});
}

TEST_F(DatasetTest, TruncatedIndexFails) {
  TruncateFile(Index(), 100);
  ExpectError(Open().status(), StatusCode::kCorruption, {Index().string(), "truncated"});
}

TEST_F(DatasetTest, ReservedBitsAreRejected) {
  EditIndex([&](std::string& s) { PutU32(At(s, RecordOffset(s, 1) + 36), 1u << 5); });
  ExpectError(Open().status(), StatusCode::kCorruption,
              {Index().string(), "sample 1", "unknown flag bits"});
}

TEST_F(DatasetTest, ReservedHeaderBytesAreRejected) {
  EditIndex([&](std::string& s) { *At(s, 110) = std::byte{7}; });
  ExpectError(Open().status(), StatusCode::kCorruption,
              {Index().string(), "offset 110", "reserved header byte"});
  // (The header flags are reserved too.)
}

TEST_F(DatasetTest, ReservedRecordBytesAreRejected) {
  EditIndex([&](std::string& s) { *At(s, RecordOffset(s, 4) + 120) = std::byte{1}; });
  ExpectError(Open().status(), StatusCode::kCorruption, {"sample 4", "reserved bytes"});
}

TEST_F(DatasetTest, HeaderFlagsAreRejected) {
  // Bit 0 says shard uids are present (FORMAT.md §3.1); the other bits are reserved.
  EditIndex([&](std::string& s) { PutU32(At(s, 12), 1u << 1); });
  ExpectError(Open().status(), StatusCode::kCorruption, {"offset 12", "unknown header flags"});
}

// FORMAT.md §8: the index is read into memory at Open, so what happens to the file afterwards
// (truncated, rewritten) cannot crash a reader (a mapped index raised SIGBUS) or change what it
// returns (a small truncated index gave shape-(0,) tensors and an empty source).
TEST_F(DatasetTest, IndexChangedWhileOpenDoesNotChangeWhatIsRead) {
  auto ds = Open();
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const uint64_t size = std::filesystem::file_size(Index());
  for (int round = 0; round < 2; ++round) {
    if (round == 0) TruncateFile(Index(), 0);
    else WriteStringToFile(Index(), std::string(size, '\x5a'));
    for (uint64_t i = 0; i < kSamples; ++i) {
      auto s = (*ds)->Read(i);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ExpectSampleEq(*s, StandardSample(i));
      auto src = (*ds)->source(i);
      ASSERT_TRUE(src.ok());
      EXPECT_EQ(*src, StandardSample(i).input.source);
      EXPECT_EQ((*ds)->tensor(i, 2).shape, (std::vector<uint64_t>{1, 3 + (i * 5) % 17, 24}));
    }
  }
  // A new Open sees the damage.
  EXPECT_FALSE(Open().ok());
}

// A manifest.json member nested 200,000 deep overflowed nlohmann::json's recursive parser.
TEST_F(DatasetTest, DeeplyNestedManifestIsCorruptionNotACrash) {
  const std::string m = ReadFileToString(dir_ / "manifest.json");
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (const char* member : {"\"version\": 1", "\"created_by\": "}) {
    std::string edited = m;
    const size_t at = edited.find(member);
    ASSERT_NE(at, std::string::npos) << member;
    if (std::string(member).find("version") != std::string::npos) {
      edited.replace(at, std::string(member).size(), "\"version\": " + deep);
    } else {
      edited.insert(at + std::string(member).size(), deep + ", \"x\": ");
    }
    WriteStringToFile(dir_ / "manifest.json", edited);
    ExpectError(Open().status(), StatusCode::kCorruption,
                {(dir_ / "manifest.json").string(), "JSON nested deeper than 64 levels"});
  }
  // Brackets inside strings do not count.
  std::string in_string = m;
  in_string.insert(in_string.find("\"created_by\": \"") + 15, std::string(1000, '['));
  WriteStringToFile(dir_ / "manifest.json", in_string);
  EXPECT_TRUE(format::CheckJsonNesting(in_string, "m").ok());
}

// A FIFO in place of a dataset file blocked open(2) forever. The open runs on a thread; if it
// ever blocks again the test opens the FIFO's other end to release it and fails instead of
// hanging.
TEST_F(DatasetTest, FifoInPlaceOfADatasetFileIsRefused) {
  for (const std::string name : {"manifest.json", "index.lsi", "shard-00000.lss"}) {
    SCOPED_TRACE(name);
    TempDir copy;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path()))
      std::filesystem::copy_file(e.path(), copy / e.path().filename().string());
    const std::filesystem::path fifo = copy / name;
    std::filesystem::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    std::promise<Status> done;
    std::future<Status> result = done.get_future();
    std::thread opener([&] { done.set_value(Dataset::Open(copy.path().string()).status()); });
    if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // releases the blocked open
      opener.join();
      if (w >= 0) ::close(w);
      FAIL() << "Dataset::Open blocked on a FIFO";
    }
    opener.join();
    ExpectError(result.get(), StatusCode::kInvalidArgument,
                {fifo.string(), "FIFO", "not a regular file"});
  }
}

TEST_F(DatasetTest, IndexVersion5IsUnsupported) {
  EditIndex([&](std::string& s) { PutU32(At(s, 8), 5); });
  ExpectError(Open().status(), StatusCode::kUnsupported, {Index().string(), "version 5"});
}

TEST_F(DatasetTest, ManifestVersion5IsUnsupported) {
  std::string m = ReadFileToString(dir_ / "manifest.json");
  m.replace(m.rfind("\"version\": 1"), 12, "\"version\": 5");
  WriteStringToFile(dir_ / "manifest.json", m);
  ExpectError(Open().status(), StatusCode::kUnsupported, {"manifest.json", "version 5"});
}

TEST_F(DatasetTest, ManifestVersionMustMatchTheIndex) {
  std::string m = ReadFileToString(dir_ / "manifest.json");
  m.replace(m.rfind("\"version\": 1"), 12, "\"version\": 2");
  WriteStringToFile(dir_ / "manifest.json", m);
  ExpectError(Open().status(), StatusCode::kCorruption,
              {"manifest.json", "version 2 (index version 1)"});
}

TEST_F(DatasetTest, ManifestMustAgreeWithIndex) {
  std::string m = ReadFileToString(dir_ / "manifest.json");
  const std::string samples = "\"samples\": 5";
  m.replace(m.rfind(samples), samples.size(), "\"samples\": 6");
  WriteStringToFile(dir_ / "manifest.json", m);
  ExpectError(Open().status(), StatusCode::kCorruption, {"manifest.json", "disagrees", "index.lsi"});
}

TEST_F(DatasetTest, GarbageManifestIsCorruption) {
  WriteStringToFile(dir_ / "manifest.json", "{\"format\": \"libshard\", ");
  ExpectError(Open().status(), StatusCode::kCorruption, {"manifest.json", "not valid JSON"});
  WriteStringToFile(dir_ / "manifest.json", "[1, 2]");
  ExpectError(Open().status(), StatusCode::kCorruption, {"manifest.json"});
}

TEST_F(DatasetTest, NbytesThatDisagreeWithTheShapeAreRejected) {
  EditIndex([&](std::string& s) {
    uint64_t at = TensorEntryOffset(s, 2, 2) + 8;
    PutU64(At(s, at), GetU64(At(s, at)) + 20);
  });
  // Sample 2 is L = 13: hidden_state [1,13,24] bfloat16 = 624 bytes.
  ExpectError(Open().status(), StatusCode::kCorruption,
              {Index().string() + ": sample 2: tensor 'hidden_state' nbytes 644 != shape "
                                  "[1,13,24] x bfloat16 = 624 bytes; the index is damaged"});
}

TEST_F(DatasetTest, SampleOutsideItsShardIsRejected) {
  EditIndex([&](std::string& s) {
    uint64_t at = RecordOffset(s, 4);
    PutU64(At(s, at), GetU64(At(s, at)) + 4096 * 10);
  });
  ExpectError(Open().status(), StatusCode::kCorruption,
              {"sample 4", "extend past the end of shard-00000.lss"});
}

TEST_F(DatasetTest, MisalignedSampleIsRejected) {
  EditIndex([&](std::string& s) {
    uint64_t at = RecordOffset(s, 1);
    PutU64(At(s, at), GetU64(At(s, at)) + 64);
  });
  ExpectError(Open().status(), StatusCode::kCorruption, {"sample 1", "multiple of 4096"});
}

TEST_F(DatasetTest, ShardOutOfRangeIsRejected) {
  EditIndex([&](std::string& s) { PutU32(At(s, RecordOffset(s, 0) + 32), 9); });
  ExpectError(Open().status(), StatusCode::kCorruption, {"sample 0", "shard 9 out of range"});
}

TEST_F(DatasetTest, DecodeAndMakeSampleForLoaders) {
  auto ds = Open();
  ASSERT_TRUE(ds.ok());
  const uint64_t i = 3;
  const SampleLocation loc = (*ds)->location(i);
  // A loader reads the stored bytes itself (uncompressed: stored == raw, decoded in place).
  std::string shard = ReadFileToString(Shard(loc.shard));
  auto buf = std::shared_ptr<std::byte[]>(new (std::align_val_t{4096}) std::byte[loc.raw_size + 64],
                                          [](std::byte* p) { ::operator delete[](p, std::align_val_t{4096}); });
  std::memcpy(buf.get(), shard.data() + loc.offset, loc.stored_size);
  using internal::DatasetAccess;  // the loader's plumbing
  ASSERT_TRUE(
      DatasetAccess::Decode(**ds, i, {buf.get(), loc.stored_size}, {buf.get(), loc.raw_size}).ok());
  auto s = DatasetAccess::MakeSample(**ds, i, buf.get(), 0, loc.raw_size, buf);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectSampleEq(*s, StandardSample(i));
  EXPECT_EQ(s->index(), i);

  // Only hidden_state, from a buffer that holds just its bytes.
  const TensorLocation t = (*ds)->tensor(i, 2);
  EXPECT_EQ(t.shape, (Shape{1, 18, 24}));  // sample 3: L = 18
  EXPECT_EQ(t.offset % kTensorAlignment, 0u);
  const size_t field = 2;
  auto part =
      DatasetAccess::MakeSample(**ds, i, buf.get() + t.offset, t.offset, t.nbytes, buf, {&field, 1});
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  ASSERT_EQ(part->tensors().size(), 1u);
  EXPECT_EQ(part->tensors()[0].name, "hidden_state");
  EXPECT_EQ(part->tensors()[0].data, buf.get() + t.offset);
  // Asking for a tensor outside the buffer is refused.
  const size_t first = 0;
  ExpectError(DatasetAccess::MakeSample(**ds, i, buf.get() + t.offset, t.offset, t.nbytes, buf,
                                        {&first, 1})
                  .status(),
              StatusCode::kInvalidArgument, {"input_ids", "outside the buffer"});
  ExpectError(DatasetAccess::Decode(**ds, i, {buf.get(), 1}, {buf.get(), loc.raw_size}),
              StatusCode::kInvalidArgument, {"Decode needs"});
}

TEST(DatasetCompressedTest, DamagedFrameIsCorruptionNotACrash) {
  TempDir dir;
  WriterOptions o = FastOptions();
  o.compression = Compression::kZstd;
  WriteStandard(dir.path(), 3, o, /*compressible=*/true);
  auto ds = Dataset::Open(dir.path().string(), {.verify_checksums = false});
  ASSERT_TRUE(ds.ok());
  const SampleLocation loc = (*ds)->location(1);
  ASSERT_TRUE(loc.flags & kSampleFlagZstd);
  for (uint64_t k = 0; k < loc.stored_size; k += 7)
    FlipByte(dir / "shard-00000.lss", loc.offset + k, 0xff);
  Status st = (*ds)->Read(1).status();
  ExpectError(st, StatusCode::kCorruption, {"shard-00000.lss", "sample 1"});
  auto verified = Dataset::Open(dir.path().string());
  ASSERT_TRUE(verified.ok());
  ExpectError((*verified)->Read(1).status(), StatusCode::kCorruption, {"checksum mismatch"});
  ExpectSampleEq(*(*verified)->Read(2), StandardSample(2, true));
}

TEST(DatasetConcurrencyTest, ConcurrentReads) {
  TempDir dir;
  WriterOptions o = FastOptions();
  o.compression = Compression::kZstd;
  WriteStandard(dir.path(), 8, o, true);
  auto ds = Dataset::Open(dir.path().string());
  ASSERT_TRUE(ds.ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        uint64_t i = (t + rep) % 8;
        auto s = (*ds)->Read(i);
        if (!s.ok() || s->Find("hidden_state")->nbytes != (*ds)->tensor(i, 2).nbytes) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace libshard::testing
