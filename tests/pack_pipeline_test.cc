// libshard::convert::Pack end to end on generated .safetensors sources: bit-exact contents, sample
// order, the byte window, --on-error skip/fail, --part, --append, --resume and schema checks.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/merge.h"
#include "pack/option_parsing.h"
#include "pack/pack.h"
#include "pack/schema_inference.h"
#include "libshard_support/text.h"
#include "pack/torch_file_writer.h"
#include "testutil/testutil.h"

namespace libshard::convert {
namespace {

namespace fs = std::filesystem;

// One EAGLE-3-like sample: input_ids I64 [L], hidden_state BF16 [1, L, H].
struct FakeSample {
  std::vector<int64_t> ids;
  std::vector<uint16_t> hidden;
  uint64_t length = 0;
};

constexpr uint64_t kHidden = 8;

FakeSample MakeSample(uint64_t seed, uint64_t length) {
  std::mt19937_64 rng(seed);
  FakeSample s;
  s.length = length;
  for (uint64_t i = 0; i < length; ++i) s.ids.push_back(static_cast<int64_t>(rng() % 50000));
  for (uint64_t i = 0; i < length * kHidden; ++i) s.hidden.push_back(static_cast<uint16_t>(rng()));
  return s;
}

// Writes a .safetensors file (8-byte LE header size, JSON header, data).
void WriteSafetensors(const fs::path& path, const FakeSample& s, const std::string& hidden_dtype = "BF16",
                      uint64_t hidden = kHidden) {
  const uint64_t ids_bytes = s.ids.size() * 8, hs_bytes = s.length * hidden * 2;
  std::string header = "{\"input_ids\":{\"dtype\":\"I64\",\"shape\":[" + std::to_string(s.length) +
                       "],\"data_offsets\":[0," + std::to_string(ids_bytes) +
                       "]},\"hidden_state\":{\"dtype\":\"" + hidden_dtype + "\",\"shape\":[1," +
                       std::to_string(s.length) + "," + std::to_string(hidden) +
                       "],\"data_offsets\":[" + std::to_string(ids_bytes) + "," +
                       std::to_string(ids_bytes + hs_bytes) + "]}}";
  while (header.size() % 8) header += ' ';
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(s.ids.data()), ids_bytes);
  std::string hs(hs_bytes, '\0');
  std::memcpy(hs.data(), s.hidden.data(), std::min<uint64_t>(hs_bytes, s.hidden.size() * 2));
  bytes += hs;
  fs::create_directories(path.parent_path());
  testing::WriteStringToFile(path, bytes);
}

class PackPipelineTest : public ::testing::Test {
 protected:
  // Sources data_0..data_{n-1} spread over two directories; natural order = index order.
  void MakeSources(uint64_t n, uint64_t first = 0) {
    for (uint64_t i = first; i < first + n; ++i) {
      samples_.resize(std::max<size_t>(samples_.size(), i + 1));
      samples_[i] = MakeSample(i, 1 + (i * 37) % 29);
      WriteSafetensors(Rel(i), samples_[i]);
    }
  }
  fs::path Rel(uint64_t i) const {
    return src_ / ("part_" + std::to_string(i / 10)) / ("data_" + std::to_string(i) + ".safetensors");
  }
  PackOptions Options(const std::string& out) const {
    PackOptions o;
    o.source_root = src_.string();
    o.output = (dir_.path() / out).string();
    o.shard_size = 16 << 10;
    o.fsync = false;
    o.threads = 3;
    return o;
  }
  // Checks that dataset sample k holds source sample expected[k], bit for bit.
  void ExpectDataset(const std::string& out, const std::vector<uint64_t>& expected) {
    auto ds = Dataset::Open((dir_.path() / out).string());
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    ASSERT_EQ((*ds)->size(), expected.size());
    EXPECT_EQ((*ds)->schema().length_field, 0);
    for (uint64_t k = 0; k < expected.size(); ++k) {
      const FakeSample& want = samples_[expected[k]];
      auto s = (*ds)->Read(k);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      const TensorView* ids = s->Find("input_ids");
      const TensorView* hs = s->Find("hidden_state");
      ASSERT_TRUE(ids && hs);
      EXPECT_EQ(hs->shape, (Shape{1, want.length, kHidden}));
      EXPECT_EQ(hs->dtype, DType::kBFloat16);
      ASSERT_EQ(ids->nbytes, want.ids.size() * 8);
      EXPECT_EQ(std::memcmp(ids->data, want.ids.data(), ids->nbytes), 0) << "sample " << k;
      ASSERT_EQ(hs->nbytes, want.hidden.size() * 2);
      EXPECT_EQ(std::memcmp(hs->data, want.hidden.data(), hs->nbytes), 0) << "sample " << k;
      EXPECT_EQ((*ds)->length(k), want.length);
      auto prov = (*ds)->source(k);
      ASSERT_TRUE(prov.ok());
      EXPECT_EQ(prov->path, fs::path(Rel(expected[k])).lexically_relative(src_).generic_string());
      EXPECT_NE(prov->content_hash, 0u);
      EXPECT_EQ(prov->size, fs::file_size(Rel(expected[k])));
    }
  }
  static std::vector<uint64_t> Iota(uint64_t a, uint64_t b) {
    std::vector<uint64_t> v;
    for (uint64_t i = a; i < b; ++i) v.push_back(i);
    return v;
  }

  testing::TempDir dir_;
  fs::path src_ = dir_.path() / "src";
  std::vector<FakeSample> samples_;
};

TEST_F(PackPipelineTest, BitExactInNaturalOrderWithProgress) {
  MakeSources(25);
  PackOptions o = Options("out");
  std::vector<PackProgress> seen;
  o.progress = [&](const PackProgress& p) { seen.push_back(p); };
  auto r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples_added, 25u);
  EXPECT_EQ(r->dataset.samples, 25u);
  EXPECT_GT(r->dataset.shards, 1u);
  EXPECT_GT(r->peak_rss_bytes, 0u);
  EXPECT_TRUE(r->skipped.empty());
  ExpectDataset("out", Iota(0, 25));
  ASSERT_EQ(seen.size(), 26u);
  EXPECT_TRUE(seen.back().finished);
  EXPECT_EQ(seen.back().files_done, 25u);
  EXPECT_EQ(seen[9].files_done, 10u);
  EXPECT_EQ(seen.back().bytes_done, r->bytes_in);
}

TEST_F(PackPipelineTest, TinyWindowAndOneThreadGiveTheSameDataset) {
  MakeSources(12);
  for (unsigned threads : {1u, 4u}) {
    PackOptions o = Options("out" + std::to_string(threads));
    o.threads = threads;
    o.in_flight_bytes = 1;  // admits one sample at a time: must still make progress, in order
    o.compression = Compression::kZstd;
    auto r = Pack(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectDataset("out" + std::to_string(threads), Iota(0, 12));
  }
}

TEST_F(PackPipelineTest, SkipReportsBadSourcesAndFailStops) {
  MakeSources(8);
  testing::TruncateFile(Rel(3), 20);
  testing::WriteStringToFile(Rel(6), "not a tensor file at all");
  PackOptions o = Options("skip");
  o.on_error = OnError::kSkip;
  auto r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->skipped.size(), 2u);
  EXPECT_EQ(r->skipped[0].path, "part_0/data_3.safetensors");
  EXPECT_EQ(r->skipped[1].path, "part_0/data_6.safetensors");
  EXPECT_NE(r->skipped[0].reason.find("data_3.safetensors"), std::string::npos) << r->skipped[0].reason;
  const std::string report = testing::ReadFileToString(dir_.path() / "skip" / "skipped.txt");
  EXPECT_EQ(report.substr(0, report.find('\t')), "part_0/data_3.safetensors");
  EXPECT_NE(report.find("\npart_0/data_6.safetensors\t"), std::string::npos);
  ExpectDataset("skip", {0, 1, 2, 4, 5, 7});

  PackOptions f = Options("fail");
  auto rf = Pack(f);
  ASSERT_FALSE(rf.ok());
  EXPECT_NE(rf.status().message().find("data_3.safetensors"), std::string::npos) << rf.status().message();
  EXPECT_NE(rf.status().message().find("sample 3"), std::string::npos) << rf.status().message();
  EXPECT_FALSE(Dataset::Open((dir_.path() / "fail").string()).ok());
}

TEST_F(PackPipelineTest, FirstSourceBadInSkipModeStillInfersSchema) {
  MakeSources(4);
  testing::WriteStringToFile(Rel(0), "garbage");
  PackOptions o = Options("out");
  o.on_error = OnError::kSkip;
  auto r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->skipped.size(), 1u);
  ExpectDataset("out", {1, 2, 3});
}

TEST_F(PackPipelineTest, SchemaMismatchNamesFileAndDifference) {
  MakeSources(5);
  WriteSafetensors(Rel(2), samples_[2], "F16");
  auto r = Pack(Options("a"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("data_2.safetensors"), std::string::npos);
  EXPECT_NE(r.status().message().find("'hidden_state' is float16, expected bfloat16"), std::string::npos)
      << r.status().message();

  FakeSample wide = samples_[2];
  wide.hidden.resize(wide.length * (kHidden + 1));
  WriteSafetensors(Rel(2), wide, "BF16", kHidden + 1);
  r = Pack(Options("b"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dim 2 differs"), std::string::npos) << r.status().message();
  PackOptions o = Options("c");
  o.allow_varying_dims = true;
  EXPECT_TRUE(Pack(o).ok());
}

TEST_F(PackPipelineTest, PartsMergeToOnePack) {
  MakeSources(17);
  std::vector<std::string> parts;
  for (uint32_t i = 0; i < 4; ++i) {
    PackOptions o = Options("part" + std::to_string(i));
    o.part_index = i;
    o.part_count = 4;
    auto r = Pack(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const PartRange range = PartSlice(17, i, 4);
    EXPECT_EQ(r->samples_added, range.end - range.begin);
    parts.push_back(o.output);
  }
  ASSERT_TRUE(MergeDatasets((dir_.path() / "merged").string(), parts, true).ok());
  ExpectDataset("merged", Iota(0, 17));
}

TEST_F(PackPipelineTest, EmptyPartsStillMerge) {
  MakeSources(2);
  std::vector<std::string> parts;
  for (uint32_t i = 0; i < 3; ++i) {  // part 0 of 3 gets no source
    PackOptions o = Options("part" + std::to_string(i));
    o.part_index = i;
    o.part_count = 3;
    auto r = Pack(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->samples_added, i == 0 ? 0u : 1u);
    parts.push_back(o.output);
  }
  auto empty = Dataset::Open(parts[0]);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty)->size(), 0u);
  EXPECT_EQ((*empty)->schema().fields.size(), 2u);
  const Status st = MergeDatasets((dir_.path() / "merged").string(), parts, true);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectDataset("merged", {0, 1});
}

TEST_F(PackPipelineTest, AppendAddsOnlyNewSources) {
  MakeSources(6);
  ASSERT_TRUE(Pack(Options("out")).ok());
  MakeSources(5, 6);
  PackOptions o = Options("out");
  o.append = true;
  auto r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples_added, 5u);
  EXPECT_EQ(r->already_present, 6u);
  ExpectDataset("out", Iota(0, 11));
  // Without --append an existing dataset is refused.
  auto again = Pack(Options("out"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
}

TEST_F(PackPipelineTest, ResumeWithoutJournalStartsAndOnFinishedDatasetIsANoOp) {
  MakeSources(7);
  PackOptions o = Options("out");
  o.resume = true;
  auto r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples_added, 7u);
  r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples_added, 0u);
  EXPECT_EQ(r->already_present, 7u);
  EXPECT_EQ(r->dataset.samples, 7u);
  ExpectDataset("out", Iota(0, 7));
}

TEST_F(PackPipelineTest, FieldsSelectsTensors) {
  MakeSources(3);
  PackOptions o = Options("out");
  o.fields = {"input_ids"};
  ASSERT_TRUE(Pack(o).ok());
  auto ds = Dataset::Open(o.output);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ((*ds)->schema().fields.size(), 1u);
  EXPECT_EQ((*ds)->schema().fields[0].name, "input_ids");
  o = Options("bad");
  o.fields = {"nope"};
  auto r = Pack(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'nope'"), std::string::npos);
}

// A stored zip of (name, bytes) records as torch.save lays one out; CRC-32s 0 ("not recorded").
std::string StoredZip(const std::vector<std::pair<std::string, std::string>>& records) {
  auto u16 = [](std::string& s, uint64_t v) {
    s += static_cast<char>(v & 0xff);
    s += static_cast<char>((v >> 8) & 0xff);
  };
  auto u32 = [&](std::string& s, uint64_t v) {
    u16(s, v & 0xffff);
    u16(s, v >> 16);
  };
  std::string out, cd;
  for (const auto& [name, data] : records) {
    const uint64_t offset = out.size();
    u32(out, 0x04034b50);
    for (int k = 0; k < 5; ++k) u16(out, k == 0 ? 20 : 0);  // version, flags, method, time, date
    u32(out, 0);
    u32(out, data.size());
    u32(out, data.size());
    u16(out, name.size());
    u16(out, 0);
    out += name + data;
    u32(cd, 0x02014b50);
    for (int k = 0; k < 6; ++k) u16(cd, k < 2 ? 20 : 0);  // versions, flags, method, time, date
    u32(cd, 0);
    u32(cd, data.size());
    u32(cd, data.size());
    u16(cd, name.size());
    for (int k = 0; k < 4; ++k) u16(cd, 0);  // extra, comment, disk, internal attributes
    u32(cd, 0);
    u32(cd, offset);
    cd += name;
  }
  const uint64_t cd_offset = out.size();
  out += cd;
  u32(out, 0x06054b50);
  u16(out, 0);
  u16(out, 0);
  u16(out, records.size());
  u16(out, records.size());
  u32(out, cd.size());
  u32(out, cd_offset);
  u16(out, 0);
  return out;
}

std::string Le32(uint32_t v) {
  std::string b(4, '\0');
  for (int k = 0; k < 4; ++k) b[k] = static_cast<char>((v >> (8 * k)) & 0xff);
  return b;
}

// The bomb: torch.save({"meta": ["a" * (1 << 20)] * 1_000_000}) without the tensor (it is
// refused before tensors matter): 3 MB of pickle naming 1 TB of metadata through the memo.
std::string MetadataBombPt() {
  std::string pkl = "\x80\x02}X" + Le32(4) + "meta](X" + Le32(1 << 20) + std::string(1 << 20, 'a') +
                    "q\x01";
  for (int i = 1; i < 1000000; ++i) pkl += "h\x01";
  pkl += "es.";
  return StoredZip({{"archive/data.pkl", pkl}});
}

// A pickle of four million empty lists: within the interpreter's object bound, but it takes a few
// hundred MB to hold; under a tight address-space limit, a std::bad_alloc in the reader.
std::string ObjectFloodPt() {
  std::string pkl = "\x80\x02(" + std::string(4000000, ']') + "t.";
  return StoredZip({{"archive/data.pkl", pkl}});
}

// The pickle bomb next to a good source, in a child process under an address-space limit (so a
// regression fails the test, not the machine): --on-error skip lists it and packs the good one.
// A source whose reading throws std::bad_alloc on a worker thread (the object flood under the
// limit) is skipped in the same way, named, instead of ending the process with std::terminate.
//
// Under AddressSanitizer the out-of-memory half cannot run: ASan's operator new aborts the process
// on an allocation failure instead of throwing std::bad_alloc, and its shadow reservations make an
// address-space limit meaningless. There the test checks the bomb alone, without the limit.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAllocatorThrowsBadAlloc = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAllocatorThrowsBadAlloc = false;
#else
constexpr bool kAllocatorThrowsBadAlloc = true;
#endif
#else
constexpr bool kAllocatorThrowsBadAlloc = true;
#endif

TEST_F(PackPipelineTest, HostileSourcesNextToAGoodOneAreSkippedNamedAndBounded) {
  MakeSources(1);
  testing::WriteStringToFile(src_ / "part_0" / "data_1.pt", MetadataBombPt());
  if (kAllocatorThrowsBadAlloc)
    testing::WriteStringToFile(src_ / "part_0" / "data_2.pt", ObjectFloodPt());
  const size_t expect_skipped = kAllocatorThrowsBadAlloc ? 2 : 1;
  PackOptions o = Options("out");
  o.on_error = OnError::kSkip;
  o.threads = 2;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Room for the job itself, not for the hostile sources.
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    statm >> pages;
    const uint64_t limit = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) + (uint64_t{160} << 20);
    struct rlimit rl = {limit, limit};
    if (kAllocatorThrowsBadAlloc && setrlimit(RLIMIT_AS, &rl) != 0) _exit(10);
    auto r = Pack(o);
    if (!r.ok()) {
      std::fprintf(stderr, "pack failed: %s\n", r.status().ToString().c_str());
      _exit(11);
    }
    if (r->samples_added != 1 || r->skipped.size() != expect_skipped) _exit(12);
    for (const SkippedSource& s : r->skipped) std::fprintf(stderr, "skipped %s: %s\n", s.path.c_str(), s.reason.c_str());
    if (r->skipped[0].path != "part_0/data_1.pt" ||
        (expect_skipped == 2 && r->skipped[1].path != "part_0/data_2.pt"))
      _exit(13);
    for (const SkippedSource& s : r->skipped) {
      if (s.reason.find(s.path) == std::string::npos) _exit(14);
      if (s.reason.find("Resource exhausted") == std::string::npos) _exit(15);
    }
    // --on-error fail: the bomb stops the job, named.
    auto rf = Pack(Options("fail"));
    if (rf.ok() || rf.status().code() != StatusCode::kResourceExhausted ||
        rf.status().message().find("data_1.pt") == std::string::npos)
      _exit(16);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the pack process died of signal " << WTERMSIG(status)
                                 << " (an exception escaped a worker thread?)";
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const std::string report = testing::ReadFileToString(dir_.path() / "out" / "skipped.txt");
  EXPECT_NE(report.find("part_0/data_1.pt\t"), std::string::npos) << report;
  EXPECT_NE(report.find("FORMAT.md §5"), std::string::npos) << report;
  if (kAllocatorThrowsBadAlloc) {
    EXPECT_NE(report.find("part_0/data_2.pt\t"), std::string::npos) << report;
    EXPECT_NE(report.find("out of memory"), std::string::npos) << report;
  }
  auto ds = Dataset::Open((dir_.path() / "out").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), 1u);

  EXPECT_FALSE(Dataset::Open((dir_.path() / "fail").string()).ok());
}

// A source replaced by a FIFO after the listing: the worker's open must not block (it did,
// forever). One source in flight at a time (window 1 byte), so when source 0 is reported the
// worker is at most at source 1 and the last one is still to be opened. If the open does block,
// the test opens the write end so the job can end, and fails.
TEST_F(PackPipelineTest, SourceReplacedByAFifoAfterListingIsRefusedNotWaitedFor) {
  MakeSources(6);
  PackOptions o = Options("out");
  o.on_error = OnError::kSkip;
  o.threads = 1;
  o.in_flight_bytes = 1;
  const fs::path last = Rel(5);
  bool replaced = false;
  o.progress = [&](const PackProgress& p) {
    if (replaced || p.files_done != 1) return;
    fs::remove(last);
    replaced = ::mkfifo(last.c_str(), 0600) == 0;
  };
  auto job = std::async(std::launch::async, [&] { return Pack(o); });
  if (job.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    const int w = ::open(last.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    ADD_FAILURE() << "pack blocked opening a FIFO";
  }
  auto r = job.get();
  ASSERT_TRUE(replaced);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->skipped.size(), 1u);
  EXPECT_EQ(r->skipped[0].path, "part_0/data_5.safetensors");
  EXPECT_NE(r->skipped[0].reason.find("FIFO"), std::string::npos) << r->skipped[0].reason;
  EXPECT_NE(r->skipped[0].reason.find(last.string()), std::string::npos) << r->skipped[0].reason;
  ExpectDataset("out", {0, 1, 2, 3, 4});
}

// A tensor key whose bytes are not UTF-8 ('x\udce9' pickles to x ED B3 A9) was packed, and the
// dataset then never opened ("schema disagrees": the manifest's JSON had replaced the bytes).
// Field names must be UTF-8 (FORMAT.md §3.2): refused at pack, naming file and key. Non-UTF-8
// metadata string values are bytes and pack byte-exact.
TEST_F(PackPipelineTest, NonUtf8TensorNameIsRefusedAndNonUtf8MetadataIsKept) {
  const std::vector<float> x = {1, 2, 3, 4};
  const TorchTensorRef bad{"x\xed\xb3\xa9", DType::kFloat32, {4}, std::as_bytes(std::span(x))};
  ASSERT_TRUE(WriteTorchFile((src_ / "bad.pt").string(), {bad}, {}).ok());
  auto r = Pack(Options("bad"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad.pt"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("'x\\xed\\xb3\\xa9' is not valid UTF-8"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(Dataset::Open((dir_.path() / "bad").string()).ok());

  fs::remove(src_ / "bad.pt");
  const TorchTensorRef good{"x", DType::kFloat32, {4}, std::as_bytes(std::span(x))};
  const std::string cafe = "caf\xed\xb3\xa9";
  ASSERT_TRUE(
      WriteTorchFile((src_ / "good.pt").string(), {good}, {{"s", MetaValue(cafe)}}).ok());
  auto g = Pack(Options("good"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto ds = Dataset::Open((dir_.path() / "good").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  auto meta = (*ds)->metadata(0);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  ASSERT_EQ(meta->size(), 1u);
  EXPECT_EQ(meta->at(0).key, "s");
  EXPECT_EQ(std::get<std::string>(meta->at(0).value), cafe);
}

// A skip reason can quote bytes of the file (here a zip entry name that is not UTF-8): the
// report and PackSummary get them escaped, so both are UTF-8 text (Python takes the reason as a
// str; it raised UnicodeDecodeError after packing).
TEST_F(PackPipelineTest, SkipReasonsQuotingNonUtf8BytesAreEscaped) {
  MakeSources(1);
  testing::WriteStringToFile(src_ / "part_0" / "data_1.pt", StoredZip({{"\xff\xfe.pkl", "x"}}));
  PackOptions o = Options("out");
  o.on_error = OnError::kSkip;
  auto r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->skipped.size(), 1u);
  const std::string& why = r->skipped[0].reason;
  EXPECT_TRUE(IsValidUtf8(why)) << why;
  EXPECT_NE(why.find("'\\xff\\xfe.pkl'"), std::string::npos) << why;
  const std::string report = testing::ReadFileToString(dir_.path() / "out" / "skipped.txt");
  EXPECT_TRUE(IsValidUtf8(report));
  EXPECT_NE(report.find("\\xff\\xfe.pkl"), std::string::npos) << report;
}

TEST(PackOptionsTest, ValidationIsUsage) {
  PackOptions o;
  EXPECT_EQ(ValidatePackOptions(o).code(), StatusCode::kInvalidArgument);  // no sources
  o.source_root = "/x";
  EXPECT_EQ(ValidatePackOptions(o).code(), StatusCode::kInvalidArgument);  // no output
  o.output = "/y";
  EXPECT_TRUE(ValidatePackOptions(o).ok());
  o.resume = o.append = true;
  EXPECT_FALSE(ValidatePackOptions(o).ok());
  o.append = false;
  o.part_index = 2;
  o.part_count = 2;
  EXPECT_FALSE(ValidatePackOptions(o).ok());
}

TEST(SchemaInferenceTest, Eagle3Convention) {
  std::vector<SourceTensor> t = {
      {"input_ids", DType::kInt64, {100}, 800},
      {"loss_mask", DType::kInt64, {100}, 800},
      {"hidden_state", DType::kBFloat16, {1, 100, 100}, 20000},  // L == H: convention decides
      {"aux_hidden_state", DType::kBFloat16, {1, 100, 300}, 60000},
      {"scale", DType::kFloat32, {}, 4},
      {"proj", DType::kFloat32, {4, 8}, 128},  // no dim equals L: fixed size
  };
  auto r = InferSchema(t, {}, "f.pt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Schema& s = r->schema;
  ASSERT_EQ(s.fields.size(), 6u);
  EXPECT_EQ(s.fields[0].seq_dim, 0);
  EXPECT_EQ(s.fields[1].seq_dim, 0);
  EXPECT_EQ(s.fields[2].seq_dim, 1);
  EXPECT_EQ(s.fields[3].seq_dim, 1);
  EXPECT_EQ(s.fields[4].seq_dim, -1);
  EXPECT_EQ(s.fields[5].seq_dim, -1);
  EXPECT_EQ(s.length_field, 0);

  // Without input_ids: the convention, and the first field with a seq_dim is the length field.
  std::vector<SourceTensor> u = {{"scale", DType::kFloat32, {}, 4},
                                 {"hs", DType::kFloat16, {1, 7, 4}, 56}};
  auto r2 = InferSchema(u, {}, "g.pt");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->schema.fields[1].seq_dim, 1);
  EXPECT_EQ(r2->schema.length_field, 1);
}

TEST(SchemaInferenceTest, MatchReportsDifferences) {
  std::vector<SourceTensor> ref_t = {{"input_ids", DType::kInt64, {5}, 40},
                                     {"hs", DType::kBFloat16, {1, 5, 4}, 40}};
  auto ref = InferSchema(ref_t, {}, "a.pt");
  ASSERT_TRUE(ref.ok());
  std::vector<SourceTensor> ok_t = {{"hs", DType::kBFloat16, {1, 9, 4}, 72},
                                    {"input_ids", DType::kInt64, {9}, 72}};
  auto m = MatchSchema(*ref, ok_t, "b.pt", false, false);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, (std::vector<size_t>{1, 0}));

  auto msg = [&](std::vector<SourceTensor> t, bool extra = false) {
    auto r = MatchSchema(*ref, t, "b.pt", extra, false);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(msg({{"input_ids", DType::kInt64, {9}, 72}}).find("'hs' is missing"), std::string::npos);
  EXPECT_NE(msg({{"input_ids", DType::kInt32, {9}, 36}, {"hs", DType::kBFloat16, {1, 9, 4}, 72}})
                .find("'input_ids' is int32, expected int64"),
            std::string::npos);
  EXPECT_NE(msg({{"input_ids", DType::kInt64, {9}, 72}, {"hs", DType::kBFloat16, {9, 4}, 72}})
                .find("rank 2"),
            std::string::npos);
  EXPECT_NE(msg({{"input_ids", DType::kInt64, {9}, 72}, {"hs", DType::kBFloat16, {2, 9, 4}, 144}})
                .find("dim 0 differs"),
            std::string::npos);
  const std::vector<SourceTensor> extra = {{"input_ids", DType::kInt64, {9}, 72},
                                           {"hs", DType::kBFloat16, {1, 9, 4}, 72},
                                           {"more", DType::kUInt8, {1}, 1}};
  EXPECT_NE(msg(extra).find("'more' is not in the schema"), std::string::npos);
  EXPECT_EQ(msg(extra, true), "ok");
  EXPECT_NE(msg(extra).find("b.pt"), std::string::npos);
  EXPECT_NE(msg(extra).find("a.pt"), std::string::npos);
}

}  // namespace
}  // namespace libshard::convert
