// Writer: round trips, compression, shard rollover, resume, append and merge.
#include "libshard/writer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/dataset_lock.h"
#include "libshard/merge.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

std::shared_ptr<Dataset> OpenOrDie(const std::filesystem::path& dir) {
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

void ExpectStandardContents(const Dataset& ds, uint64_t n, bool compressible = false) {
  ASSERT_EQ(ds.size(), n);
  for (uint64_t i = 0; i < n; ++i) {
    auto s = ds.Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    OwnedSample want = StandardSample(i, compressible);
    ExpectSampleEq(*s, want);
    auto src = ds.source(i);
    ASSERT_TRUE(src.ok());
    EXPECT_EQ(*src, want.input.source);
    EXPECT_EQ(ds.length(i), want.input.tensors[0].shape[0]);
    EXPECT_TRUE(ds.Verify(i).ok());
  }
}

TEST(WriterTest, RoundTripEveryDtypeAndRank) {
  TempDir dir;
  Schema schema;
  for (uint32_t code = 1; code <= kMaxDTypeCode; ++code)
    schema.fields.push_back(Field{"f" + std::to_string(code), static_cast<DType>(code), code % 5,
                                  code % 5 ? 0 : -1});
  schema.length_field = 1;  // f2, rank 2
  // Shapes per sample: sample 0 ordinary, sample 1 with zero-size tensors, sample 2 tiny.
  std::vector<OwnedSample> samples;
  for (uint64_t i = 0; i < 3; ++i) {
    std::vector<Shape> shapes;
    for (const Field& f : schema.fields) {
      Shape s(f.rank);
      for (uint32_t d = 0; d < f.rank; ++d) s[d] = (i == 1 && d == 0) ? 0 : (i == 2 ? 1 : 2 + d + i);
      shapes.push_back(s);
    }
    samples.push_back(MakeSample(schema, shapes, 100 + i));
  }
  {
    auto w = Writer::Create(dir.path().string(), schema, FastOptions());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (auto& s : samples) {
      Status st = (*w)->Append(s.input);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    auto sum = (*w)->Finish();
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(sum->samples, 3u);
    EXPECT_EQ(sum->shards, 1u);
  }
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->schema(), schema);
  for (uint64_t i = 0; i < 3; ++i) {
    auto s = ds->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, samples[i]);
    EXPECT_EQ(ds->length(i), samples[i].input.tensors[1].shape[0]);
    const SampleLocation loc = ds->location(i);
    EXPECT_EQ(loc.offset % kSampleAlignment, 0u);
    EXPECT_EQ(loc.flags, 0u);
  }
  EXPECT_EQ(ds->lengths(), (std::vector<uint64_t>{2, 0, 1}));
}

TEST(WriterTest, OneSampleDataset) {
  TempDir dir;
  WriteStandard(dir.path(), 1, FastOptions());
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  ExpectStandardContents(*ds, 1);
  EXPECT_EQ(ds->shards().size(), 1u);
  EXPECT_EQ(ds->total_stored_bytes(), ds->shards()[0].size);
}

TEST(WriterTest, EmptyDatasetOpens) {
  TempDir dir;
  WriteStandard(dir.path(), 0, FastOptions());
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->size(), 0u);
  EXPECT_TRUE(ds->shards().empty());
  ExpectError(ds->Read(0).status(), StatusCode::kInvalidArgument, {"out of range"});
}

TEST(WriterTest, ZstdWithShuffleRoundTrip) {
  TempDir dir;
  WriterOptions o = FastOptions();
  o.compression = Compression::kZstd;
  WriteStandard(dir.path(), 6, o, /*compressible=*/true);
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  ExpectStandardContents(*ds, 6, true);
  for (uint64_t i = 0; i < 6; ++i) {
    SampleLocation loc = ds->location(i);
    EXPECT_EQ(loc.flags, kSampleFlagZstd | kSampleFlagByteShuffle) << i;
    EXPECT_LT(loc.stored_size, loc.raw_size * 97 / 100) << i;
  }
  EXPECT_LT(ds->total_stored_bytes(), ds->total_raw_bytes() + 4096 * 7);

  // Incompressible data is stored raw even when compression is asked for.
  // (L = 8 leaves no zero gaps between the tensors, so the payload is all random bytes.)
  TempDir raw_dir;
  OwnedSample random = MakeEagleSample(1, 8, 24);
  {
    auto w = Writer::Create(raw_dir.path().string(), EagleSchema(), o);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(random.input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto raw_ds = OpenOrDie(raw_dir.path());
  ASSERT_TRUE(raw_ds);
  EXPECT_EQ(raw_ds->location(0).flags, 0u)
      << raw_ds->location(0).stored_size << " of " << raw_ds->location(0).raw_size;
  EXPECT_EQ(raw_ds->location(0).stored_size, raw_ds->location(0).raw_size);
  ExpectSampleEq(*raw_ds->Read(0), random);
}

TEST(WriterTest, ShardRolloverNeverSplitsASample) {
  TempDir dir;
  WriterOptions o = FastOptions();
  o.shard_size = 3 * 4096;
  const uint64_t n = 12;
  {
    auto w = Writer::Create(dir.path().string(), EagleSchema(), o);
    ASSERT_TRUE(w.ok());
    for (uint64_t i = 0; i < n; ++i) {
      // Sample 5 is far larger than a shard.
      OwnedSample s = i == 5 ? MakeEagleSample(i, 200, 64) : StandardSample(i);
      ASSERT_TRUE((*w)->Append(s.input).ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_GT(ds->shards().size(), 3u);
  uint64_t total = 0;
  for (const ShardInfo& s : ds->shards()) {
    EXPECT_TRUE(s.size <= o.shard_size || s.samples == 1) << s.path << " " << s.size;
    EXPECT_TRUE(std::filesystem::exists(s.path));
    total += s.samples;
  }
  EXPECT_EQ(total, n);
  const uint32_t big_shard = ds->location(5).shard;
  EXPECT_EQ(ds->shards()[big_shard].samples, 1u);
  for (uint64_t i = 0; i < n; ++i) {
    auto s = ds->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectSampleEq(*s, i == 5 ? MakeEagleSample(i, 200, 64) : StandardSample(i));
    if (i > 0) EXPECT_GE(ds->location(i).shard, ds->location(i - 1).shard);
  }
}

TEST(WriterTest, MetadataAndProvenanceRoundTrip) {
  TempDir dir;
  OwnedSample s = StandardSample(7);
  s.input.metadata.push_back({"empty", std::string()});
  s.input.metadata.push_back({"neg", int64_t{-5}});
  s.input.metadata.push_back({"utf8 key é", std::string("v\0x", 3)});
  s.input.source.path = "deep/dir/data_7.pt";
  {
    auto w = Writer::Create(dir.path().string(), EagleSchema(), FastOptions());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(s.input).ok());
    OwnedSample bare = StandardSample(8);
    bare.input.metadata.clear();
    bare.input.source = SourceFileInfo{};
    ASSERT_TRUE((*w)->Append(bare.input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  auto meta = ds->metadata(0);
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(*meta, s.input.metadata);
  auto src = ds->source(0);
  ASSERT_TRUE(src.ok());
  EXPECT_EQ(*src, s.input.source);
  EXPECT_TRUE(ds->metadata(1)->empty());
  EXPECT_EQ(*ds->source(1), SourceFileInfo{});
  ASSERT_TRUE(ds->key(0).ok());
  EXPECT_EQ(*ds->key(0), s.input.source.path);  // key(i) is source(i).path, as in Python
  EXPECT_EQ(*ds->key(1), "");
  std::string manifest = ReadFileToString(dir / "manifest.json");
  EXPECT_NE(manifest.find("\"created_by\": \"libshard tests\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"sources\": 1"), std::string::npos) << manifest;
}

TEST(WriterTest, EncodeRejectsMismatchedSamples) {
  TempDir dir;
  auto w = Writer::Create(dir.path().string(), EagleSchema(), FastOptions());
  ASSERT_TRUE(w.ok());
  {
    OwnedSample s = StandardSample(1);
    s.input.tensors.pop_back();
    ExpectError((*w)->Encode(s.input).status(), StatusCode::kInvalidArgument,
                {"dump/data_1.pt", "hidden_state", "missing"});
  }
  {
    OwnedSample s = StandardSample(1);
    s.input.tensors[1].dtype = DType::kInt32;
    ExpectError((*w)->Encode(s.input).status(), StatusCode::kInvalidArgument,
                {"loss_mask", "dtype int32 != schema dtype int64"});
  }
  {
    OwnedSample s = StandardSample(1);
    s.input.tensors[2].shape = {4, 24};
    ExpectError((*w)->Encode(s.input).status(), StatusCode::kInvalidArgument,
                {"hidden_state", "rank 2 != schema rank 3"});
  }
  {
    OwnedSample s = StandardSample(1);
    s.input.tensors[0].name = "other";
    ExpectError((*w)->Encode(s.input).status(), StatusCode::kInvalidArgument,
                {"'other' is not a field"});
  }
  {
    OwnedSample s = StandardSample(1);
    s.input.metadata.push_back({"turn", int64_t{3}});
    ExpectError((*w)->Encode(s.input).status(), StatusCode::kInvalidArgument, {"turn", "twice"});
  }
}

TEST(WriterTest, FillCallbacksWriteIntoTheAlignedBuffer) {
  TempDir dir;
  OwnedSample want = StandardSample(3);
  SampleInput in = want.input;
  for (size_t f = 0; f < in.tensors.size(); ++f) {
    const std::vector<std::byte>* src = &want.bytes[f];
    in.tensors[f].data = nullptr;
    in.tensors[f].fill = [src](std::span<std::byte> dst) {
      EXPECT_EQ(dst.size(), src->size());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(dst.data()) % kTensorAlignment, 0u);
      std::memcpy(dst.data(), src->data(), dst.size());
      return Status::OK();
    };
  }
  {
    auto w = Writer::Create(dir.path().string(), EagleSchema(), FastOptions());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(in).ok());
    SampleInput failing = in;
    failing.tensors[2].fill = [](std::span<std::byte>) { return Status::IoError("disk on fire"); };
    ExpectError((*w)->Append(failing), StatusCode::kIoError, {"hidden_state", "disk on fire"});
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  ASSERT_EQ(ds->size(), 1u);
  ExpectSampleEq(*ds->Read(0), want);
}

TEST(WriterTest, EncodeIsThreadSafe) {
  TempDir dir;
  WriterOptions o = FastOptions();
  o.compression = Compression::kZstd;
  auto w = Writer::Create(dir.path().string(), EagleSchema(), o);
  ASSERT_TRUE(w.ok());
  const uint64_t n = 16;
  std::vector<OwnedSample> samples;
  for (uint64_t i = 0; i < n; ++i) samples.push_back(StandardSample(i, i % 2 == 0));
  std::vector<std::future<Result<EncodedSample>>> futures;
  for (uint64_t i = 0; i < n; ++i)
    futures.push_back(std::async(std::launch::async, [&, i] { return (*w)->Encode(samples[i].input); }));
  for (auto& f : futures) {
    auto e = f.get();
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE((*w)->AppendEncoded(std::move(*e)).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  for (uint64_t i = 0; i < n; ++i) ExpectSampleEq(*ds->Read(i), samples[i]);
}

TEST(WriterTest, CreateRefusesAnExistingDataset) {
  TempDir dir;
  WriteStandard(dir.path(), 2, FastOptions());
  ExpectError(Writer::Create(dir.path().string(), EagleSchema(), FastOptions()).status(),
              StatusCode::kAlreadyExists, {dir.path().string(), "OpenForAppend"});
}

TEST(WriterTest, UnfinishedWriteNeverOpens) {
  TempDir dir;
  {
    auto w = Writer::Create(dir.path().string(), EagleSchema(), FastOptions());
    ASSERT_TRUE(w.ok());
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*w)->Append(StandardSample(i).input).ok());
  }  // destroyed without Finish
  EXPECT_TRUE(std::filesystem::exists(dir / "shard-00000.lss.tmp"));
  EXPECT_TRUE(std::filesystem::exists(dir / "_journal.lsj"));
  // The advice is in the caller's spelling (DatasetOptions::caller): C++ by default, the CLI's.
  ExpectError(Dataset::Open(dir.path().string()).status(), StatusCode::kNotFound,
              {"no manifest.json", "resume it with Writer::Resume"});
  DatasetOptions cli;
  cli.caller = Caller::kCli;
  ExpectError(Dataset::Open(dir.path().string(), cli).status(), StatusCode::kNotFound,
              {"no manifest.json", "resume it with `libshard pack --resume`"});
  ExpectError(Writer::Create(dir.path().string(), EagleSchema(), FastOptions()).status(),
              StatusCode::kAlreadyExists, {"Resume"});
}

// Writes samples [0, n) with a small shard and journal interval; when `crash_after` >= 0 the
// writer is destroyed after that many samples and the job resumed (optionally after tearing the
// journal's tail), as `libshard pack --resume` does.
void WriteWithCrash(const std::filesystem::path& dir, uint64_t n, int64_t crash_after,
                    bool tear_journal, uint64_t* resumed_from = nullptr) {
  WriterOptions o = FastOptions();
  o.shard_size = 6 * 4096;
  o.journal_every_bytes = 2 * 4096;
  o.compression = Compression::kZstd;
  o.shard_uid_seed = 7;  // the reference and the resumed write must give the same bytes
  uint64_t next = 0;
  if (crash_after >= 0) {
    auto w = Writer::Create(dir.string(), EagleSchema(), o);
    ASSERT_TRUE(w.ok());
    for (; next < static_cast<uint64_t>(crash_after); ++next)
      ASSERT_TRUE((*w)->Append(StandardSample(next, next % 3 == 0).input).ok());
  }
  std::unique_ptr<Writer> w;
  if (crash_after >= 0) {
    if (tear_journal) {
      std::string j = ReadFileToString(dir / "_journal.lsj");
      WriteStringToFile(dir / "_journal.lsj", j + std::string("\x4c\x53\x4a\x45garbage", 11));
    }
    auto r = Writer::Resume(dir.string(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    w = std::move(*r);
    next = w->existing_sources().size();
    EXPECT_LE(next, static_cast<uint64_t>(crash_after));
    for (uint64_t i = 0; i < next; ++i)
      EXPECT_EQ(w->existing_sources()[i], StandardSample(i).input.source);
  } else {
    auto r = Writer::Create(dir.string(), EagleSchema(), o);
    ASSERT_TRUE(r.ok());
    w = std::move(*r);
  }
  if (resumed_from) *resumed_from = next;
  EXPECT_EQ(w->samples_written(), next);
  for (; next < n; ++next)
    ASSERT_TRUE(w->Append(StandardSample(next, next % 3 == 0).input).ok());
  auto sum = w->Finish();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir / "_journal.lsj"));
}

TEST(WriterTest, ResumeAfterCrashEqualsUninterruptedWrite) {
  TempDir ref;
  const uint64_t n = 20;
  WriteWithCrash(ref.path(), n, -1, false);
  for (int64_t crash : {0, 1, 7, 13, 20}) {
    for (bool tear : {false, true}) {
      SCOPED_TRACE("crash after " + std::to_string(crash) + (tear ? ", torn journal" : ""));
      TempDir dir;
      uint64_t resumed_from = 0;
      WriteWithCrash(dir.path(), n, crash, tear, &resumed_from);
      if (crash >= 7) EXPECT_GT(resumed_from, 0u);  // the journal did keep work
      // Same shards and same index, byte for byte.
      auto a = OpenOrDie(ref.path());
      auto b = OpenOrDie(dir.path());
      ASSERT_TRUE(a && b);
      ASSERT_EQ(a->shards().size(), b->shards().size());
      for (size_t k = 0; k < a->shards().size(); ++k)
        EXPECT_EQ(ReadFileToString(a->shards()[k].path), ReadFileToString(b->shards()[k].path)) << k;
      EXPECT_EQ(ReadFileToString(ref / "index.lsi"), ReadFileToString(dir / "index.lsi"));
      for (uint64_t i = 0; i < n; ++i) ExpectSampleEq(*b->Read(i), StandardSample(i, i % 3 == 0));
      for (auto& e : std::filesystem::directory_iterator(dir.path()))
        EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
    }
  }
}

TEST(WriterTest, ResumeWithoutJournalFails) {
  TempDir dir;
  ExpectError(Writer::Resume(dir.path().string(), FastOptions()).status(), StatusCode::kNotFound,
              {"_journal.lsj"});
}

TEST(WriterTest, OpenForAppendAddsNewShards) {
  TempDir dir;
  WriterOptions o = FastOptions();
  o.shard_size = 4 * 4096;
  WriteStandard(dir.path(), 5, o);
  const std::string shard0 = ReadFileToString(dir / "shard-00000.lss");
  auto before = OpenOrDie(dir.path());
  ASSERT_TRUE(before);
  const size_t shards_before = before->shards().size();
  before.reset();
  for (int round = 0; round < 2; ++round) {
    auto w = Writer::OpenForAppend(dir.path().string(), o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    const uint64_t have = (*w)->existing_sources().size();
    EXPECT_EQ(have, 5u + 3u * round);
    EXPECT_EQ((*w)->existing_sources()[2], StandardSample(2).input.source);
    EXPECT_EQ((*w)->schema(), EagleSchema());
    for (uint64_t i = have; i < have + 3; ++i) ASSERT_TRUE((*w)->Append(StandardSample(i).input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
    // Index names alternate so the manifest rename is the only commit point.
    EXPECT_EQ(std::filesystem::exists(dir / "index.a.lsi"), round == 0);
    EXPECT_EQ(std::filesystem::exists(dir / "index.lsi"), round == 1);
  }
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_GT(ds->shards().size(), shards_before);
  EXPECT_EQ(ReadFileToString(dir / "shard-00000.lss"), shard0);  // never rewritten
  ExpectStandardContents(*ds, 11);
}

TEST(WriterTest, MergeEqualsOneWrite) {
  TempDir one, a, b, c, merged;
  WriterOptions o = FastOptions();
  o.shard_size = 4 * 4096;
  WriteStandard(one.path(), 9, o);
  WriteStandard(a.path(), 4, o, false, 0);
  WriteStandard(b.path(), 0, o, false, 4);
  WriteStandard(c.path(), 5, o, false, 4);
  ASSERT_TRUE(MergeDatasets(merged.path().string(),
                            {a.path().string(), b.path().string(), c.path().string()}, true)
                  .ok());
  auto ref = OpenOrDie(one.path());
  auto ds = OpenOrDie(merged.path());
  ASSERT_TRUE(ref && ds);
  ExpectStandardContents(*ds, 9);
  EXPECT_EQ(ds->total_raw_bytes(), ref->total_raw_bytes());
  EXPECT_EQ(ds->lengths(), ref->lengths());
  struct stat st;
  ASSERT_EQ(::stat(ds->shards()[0].path.c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);  // hard-linked, not copied
  // Parts stay intact, and merging again into the same place is refused.
  EXPECT_TRUE(Dataset::Open(a.path().string()).ok());
  ExpectError(MergeDatasets(merged.path().string(), {a.path().string()}, true),
              StatusCode::kAlreadyExists, {merged.path().string()});
  // Copy mode gives the same dataset.
  TempDir copied;
  ASSERT_TRUE(MergeDatasets(copied.path().string(), {a.path().string(), c.path().string()}, false).ok());
  auto ds2 = OpenOrDie(copied.path());
  ASSERT_TRUE(ds2);
  ExpectStandardContents(*ds2, 9);
  ASSERT_EQ(::stat(ds2->shards()[0].path.c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);
}

TEST(WriterTest, MergeRefusesDifferentSchemas) {
  TempDir a, b, out;
  WriteStandard(a.path(), 2, FastOptions());
  Schema other = EagleSchema();
  other.fields[2].dtype = DType::kFloat16;
  {
    auto w = Writer::Create(b.path().string(), other, FastOptions());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  ExpectError(MergeDatasets(out.path().string(), {a.path().string(), b.path().string()}, true),
              StatusCode::kInvalidArgument, {b.path().string(), "different schema"});
}

TEST(WriterTest, MergeByKeyIgnoresPartOrder) {
  TempDir a, b, merged, twice;
  WriteStandard(a.path(), 4, FastOptions(), false, 5);  // dump/data_5..8.pt
  WriteStandard(b.path(), 5, FastOptions(), false, 0);  // dump/data_0..4.pt
  MergeOptions o;
  o.by_key = true;
  ASSERT_TRUE(MergeDatasets(merged.path().string(), {a.path().string(), b.path().string()}, o).ok());
  auto ds = OpenOrDie(merged.path());
  ASSERT_TRUE(ds);
  ExpectStandardContents(*ds, 9);  // in key order, whichever part holds a sample
  // A key in two parts is refused before anything is written.
  ExpectError(MergeDatasets(twice.path().string(), {a.path().string(), a.path().string()}, o),
              StatusCode::kInvalidArgument, {"key 'dump/data_5.pt' occurs in part"});
  EXPECT_FALSE(std::filesystem::exists(twice.path() / "shard-00000.lss"));
}

// order_by_source is the former name of by_key and still orders by key.
TEST(WriterTest, MergeOrderBySourceIsTheFormerNameOfByKey) {
  TempDir a, b, merged;
  WriteStandard(a.path(), 4, FastOptions(), false, 5);  // dump/data_5..8.pt
  WriteStandard(b.path(), 5, FastOptions(), false, 0);  // dump/data_0..4.pt
  MergeOptions o;
  o.order_by_source = true;
  ASSERT_TRUE(MergeDatasets(merged.path().string(), {a.path().string(), b.path().string()}, o).ok());
  auto ds = OpenOrDie(merged.path());
  ASSERT_TRUE(ds);
  ExpectStandardContents(*ds, 9);
}

TEST(WriterTest, AttributesRecordedMergedAndKeptOnAppend) {
  TempDir a, b, c, merged, refused;
  WriterOptions o = FastOptions();
  o.attributes = {{"target_model", std::string("llama")}, {"hidden_size", int64_t{24}}};
  WriteStandard(a.path(), 2, o, false, 0);
  WriteStandard(b.path(), 2, o, false, 2);
  WriterOptions other = o;
  other.attributes["target_model"] = std::string("qwen");
  WriteStandard(c.path(), 2, other, false, 4);
  auto ds = OpenOrDie(a.path());
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->provenance().attributes, o.attributes);
  ASSERT_TRUE(MergeDatasets(merged.path().string(), {a.path().string(), b.path().string()}).ok());
  auto m = OpenOrDie(merged.path());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->provenance().attributes, o.attributes);
  ExpectError(MergeDatasets(refused.path().string(), {a.path().string(), c.path().string()}),
              StatusCode::kInvalidArgument, {"other attributes", "target_model=qwen"});
  // Append keeps the dataset's attributes; a contradicting one is refused.
  ExpectError(Writer::OpenForAppend(a.path().string(), other).status(),
              StatusCode::kInvalidArgument, {"target_model='llama'", "'qwen'"});
  {
    auto w = Writer::OpenForAppend(a.path().string(), FastOptions());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    OwnedSample s = StandardSample(2);
    ASSERT_TRUE((*w)->Append(s.input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto after = OpenOrDie(a.path());
  ASSERT_TRUE(after);
  EXPECT_EQ(after->provenance().attributes, o.attributes);
  EXPECT_EQ(after->size(), 3u);
}

// The refusal a second writer gets while `dir` is held by this process.
void ExpectBusy(const Status& st, const std::filesystem::path& dir) {
  ExpectError(st, StatusCode::kAlreadyExists,
              {dir.string() + " is being written by another process",
               "pid " + std::to_string(::getpid()), "host ", "since 20", "wait for it",
               // A C++ caller (WriterOptions::caller's default) is told its own spelling.
               "continue its work with Writer::Resume;"});
}

TEST(WriterLockTest, OneWriterAtATimePerDirectory) {
  TempDir dir;
  const std::string d = dir.path().string();
  {
    auto first = Writer::Create(d, EagleSchema(), FastOptions());
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_TRUE((*first)->Append(StandardSample(0).input).ok());
    ExpectBusy(Writer::Create(d, EagleSchema(), FastOptions()).status(), dir.path());
    ExpectBusy(Writer::Resume(d, FastOptions()).status(), dir.path());
    ExpectBusy(DatasetLock::Acquire(d).status(), dir.path());
    ASSERT_TRUE((*first)->Append(StandardSample(1).input).ok());
    ASSERT_TRUE((*first)->Finish().ok());
    // Finished: the lock is released although the Writer still exists.
    auto append = Writer::OpenForAppend(d, FastOptions());
    ASSERT_TRUE(append.ok()) << append.status().ToString();
    ExpectBusy(Writer::OpenForAppend(d, FastOptions()).status(), dir.path());
    ExpectBusy(Writer::Resume(d, FastOptions()).status(), dir.path());
    ASSERT_TRUE((*append)->Append(StandardSample(2).input).ok());
  }  // the appender is destroyed without Finish: the lock goes with it
  auto again = Writer::OpenForAppend(d, FastOptions());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE((*again)->Append(StandardSample(2).input).ok());
  ASSERT_TRUE((*again)->Finish().ok());
  auto ds = OpenOrDie(dir.path());  // the lock file is not part of the dataset (FORMAT.md §2.1)
  ASSERT_TRUE(ds);
  ExpectStandardContents(*ds, 3);
  EXPECT_TRUE(std::filesystem::exists(dir / DatasetLock::kFileName));
}

TEST(WriterLockTest, AnInterruptedWriteIsResumableOnceItsWriterIsGone) {
  TempDir dir;
  const std::string d = dir.path().string();
  auto first = Writer::Create(d, EagleSchema(), FastOptions());
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->Append(StandardSample(0).input).ok());
  ExpectBusy(Writer::Resume(d, FastOptions()).status(), dir.path());
  first->reset();  // the interrupted job ends
  auto resumed = Writer::Resume(d, FastOptions());
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
}

TEST(WriterLockTest, AKilledHolderReleasesTheLock) {
  TempDir dir;
  const std::string d = dir.path().string();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = DatasetLock::Acquire(d);
    const char c = lock.ok() ? '1' : '0';
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    ::pause();  // until SIGKILL, never releasing the lock itself
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, '1');
  Status busy = Writer::Create(d, EagleSchema(), FastOptions()).status();
  ExpectError(busy, StatusCode::kAlreadyExists,
              {"is being written by another process", "pid " + std::to_string(child)});
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  auto w = Writer::Create(d, EagleSchema(), FastOptions());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
}

TEST(WriterLockTest, ACallerHeldLockIsSharedWithTheWriter) {
  TempDir dir, other;
  auto lock = DatasetLock::Acquire(dir.path().string());
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  WriterOptions o = FastOptions();
  ExpectBusy(Writer::Create(dir.path().string(), EagleSchema(), o).status(), dir.path());
  o.lock = *lock;
  ExpectError(Writer::Create(other.path().string(), EagleSchema(), o).status(),
              StatusCode::kInvalidArgument, {"WriterOptions.lock", other.path().string()});
  {
    auto w = Writer::Create(dir.path().string(), EagleSchema(), o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Append(StandardSample(0).input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  // The caller still holds it after the Writer let go of its share.
  ExpectBusy(Writer::OpenForAppend(dir.path().string(), FastOptions()).status(), dir.path());
  lock->reset();
  o.lock.reset();
  EXPECT_TRUE(Writer::OpenForAppend(dir.path().string(), FastOptions()).ok());
}

TEST(WriterLockTest, MergeLocksItsOutput) {
  TempDir a, out;
  WriteStandard(a.path(), 2, FastOptions());
  {
    auto lock = DatasetLock::Acquire(out.path().string());
    ASSERT_TRUE(lock.ok());
    ExpectBusy(MergeDatasets(out.path().string(), {a.path().string()}, true), out.path());
    EXPECT_FALSE(std::filesystem::exists(out / "manifest.json"));
  }
  ASSERT_TRUE(MergeDatasets(out.path().string(), {a.path().string()}, true).ok());
  auto ds = OpenOrDie(out.path());
  ASSERT_TRUE(ds);
  ExpectStandardContents(*ds, 2);
}

TEST(WriterLockTest, ASymlinkedLockFileIsRefused) {
  TempDir dir, elsewhere;
  const auto target = elsewhere / "victim";
  WriteStringToFile(target, "keep");
  std::filesystem::create_symlink(target, dir / DatasetLock::kFileName);
  ExpectError(Writer::Create(dir.path().string(), EagleSchema(), FastOptions()).status(),
              StatusCode::kInvalidArgument, {DatasetLock::kFileName, "symbolic link"});
  EXPECT_EQ(ReadFileToString(target), "keep");
}

TEST(WriterLockTest, AppendToAMissingDirectoryCreatesNothing) {
  TempDir dir;
  const auto missing = dir / "nope";
  EXPECT_FALSE(Writer::OpenForAppend(missing.string(), FastOptions()).ok());
  EXPECT_FALSE(Writer::Resume(missing.string(), FastOptions()).ok());
  EXPECT_FALSE(std::filesystem::exists(missing));
}

}  // namespace
}  // namespace libshard::testing
