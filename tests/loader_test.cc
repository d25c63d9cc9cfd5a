// Tests for the streaming Loader: identical bytes on both engines and both I/O modes (real disk
// and tmpfs), the buffered fallback on a file system that refuses O_DIRECT, fields/max_len
// subsets, zstd + verification, budget bounds, clear errors (sample larger than the budget,
// checksum failure), Stop(), exact-once coverage over ranks and resume.
#include "libshard/loader.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "loader/streaming_loader.h"
#include "testutil/loader_hooks.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

namespace fs = std::filesystem;
using testing::FastOptions;

// Samples of varied size: 1..~70 KiB of hidden state, so reads split into sub-reads.
testing::OwnedSample VariedSample(uint64_t i, bool compressible = false) {
  return testing::MakeEagleSample(i, 5 + (i * 37) % 131, 256, compressible);
}

std::shared_ptr<Dataset> WriteDataset(const fs::path& dir, uint64_t n, bool zstd = false,
                                      uint64_t shard_size = 1 << 20) {
  WriterOptions o = FastOptions();
  o.shard_size = shard_size;
  if (zstd) o.compression = Compression::kZstd;
  auto w = Writer::Create(dir.string(), testing::EagleSchema(), o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  for (uint64_t i = 0; i < n; ++i) {
    testing::OwnedSample s = VariedSample(i, zstd);
    Status st = (*w)->Append(s.input);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto summary = (*w)->Finish();
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

LoaderOptions SmallOptions() {
  LoaderOptions o;
  o.memory_budget = 2 << 20;
  o.queue_depth = 8;
  o.read_size = 16 << 10;
  o.pin_memory = PinMemory::kOff;
  o.slow_wait_warning_seconds = 30;
  return o;
}

void ExpectSameSample(const Sample& got, const Sample& want) {
  ASSERT_EQ(got.index(), want.index());
  ASSERT_EQ(got.tensors().size(), want.tensors().size());
  for (size_t f = 0; f < want.tensors().size(); ++f) {
    const TensorView& w = want.tensors()[f];
    const TensorView* g = got.Find(w.name);
    ASSERT_NE(g, nullptr) << w.name;
    EXPECT_EQ(g->dtype, w.dtype);
    EXPECT_EQ(g->shape, w.shape) << "sample " << want.index() << " " << w.name;
    ASSERT_EQ(g->nbytes, w.nbytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(g->data) % kTensorAlignment, 0u);
    EXPECT_EQ(std::memcmp(g->data, w.data, w.nbytes), 0)
        << "sample " << want.index() << " tensor " << w.name << " differs";
  }
  EXPECT_EQ(got.metadata(), want.metadata());
}

// Every sample index delivered by `loader` until the end of the epoch, in order.
// Drains one epoch of a single-sample loader: every sample of `ds` exactly once, each with the
// bytes Dataset::Read returns.
void ExpectEpochEqualsDataset(Loader& loader, const Dataset& ds) {
  std::set<uint64_t> seen;
  while (true) {
    auto next = loader.Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    ASSERT_EQ((*next)->samples.size(), 1u);
    const Sample& got = (*next)->samples[0];
    auto want = ds.Read(got.index());
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ExpectSameSample(got, *want);
    EXPECT_TRUE(seen.insert(got.index()).second) << "sample " << got.index() << " twice";
  }
  EXPECT_EQ(seen.size(), ds.size());
}

std::vector<uint64_t> Drain(Loader& loader, uint64_t max_batches = UINT64_MAX) {
  std::vector<uint64_t> seen;
  for (uint64_t b = 0; b < max_batches; ++b) {
    auto next = loader.Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    for (const Sample& s : (*next)->samples) seen.push_back(s.index());
  }
  return seen;
}

// ---- Bytes: both engines x both I/O modes x (real disk, tmpfs) --------------------------------

using EngineParam = std::tuple<IoEngineKind, IoMode, std::string>;

class LoaderBytesTest : public ::testing::TestWithParam<EngineParam> {};

TEST_P(LoaderBytesTest, EverySampleEqualsDatasetRead) {
  const auto& [engine, mode, base] = GetParam();
  testing::TempDir dir(base);
  if (dir.path().empty()) GTEST_SKIP() << base << " unusable";
  const uint64_t n = 41;
  std::shared_ptr<Dataset> ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.engine = engine;
  o.io_mode = mode;
  o.order = Order::Shuffled(3);
  auto loader = Loader::Create(ds, o);
  if (!loader.ok() && engine == IoEngineKind::kIoUring &&
      loader.status().code() == StatusCode::kUnsupported) {
    GTEST_SKIP() << "io_uring refused here: " << loader.status().ToString();
  }
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ExpectEpochEqualsDataset(**loader, *ds);
  const LoaderStats s = (*loader)->stats();
  EXPECT_EQ(s.samples_delivered, n);
  EXPECT_EQ(s.engine, engine == IoEngineKind::kPread ? "pread" : "io_uring");
  if (mode == IoMode::kBuffered) {
    EXPECT_FALSE(s.direct_io);
    EXPECT_NE(s.io_status.find("buffered reads requested"), std::string::npos) << s.io_status;
  }
  if (s.direct_io) EXPECT_EQ(s.io_status, "");
  EXPECT_GE(s.bytes_read, ds->total_stored_bytes() - 4096 * ds->shards().size());
  EXPECT_LE(s.arena_peak, s.arena_budget);
}

INSTANTIATE_TEST_SUITE_P(
    AllEngines, LoaderBytesTest,
    ::testing::Combine(::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kPread),
                       ::testing::Values(IoMode::kAuto, IoMode::kBuffered),
                       ::testing::Values("/var/tmp", "/dev/shm")),
    [](const ::testing::TestParamInfo<EngineParam>& info) {
      std::string name = std::get<0>(info.param) == IoEngineKind::kPread ? "Pread" : "Uring";
      name += std::get<1>(info.param) == IoMode::kBuffered ? "Buffered" : "Direct";
      name += std::get<2>(info.param) == "/dev/shm" ? "Tmpfs" : "Disk";
      return name;
    });

// ---- A file system that refuses O_DIRECT ---------------------------------------------------
// tmpfs accepts O_DIRECT since Linux 6.6, so the /dev/shm cases above no longer reach the
// fallback; NoDirectIoDir gives a directory that really refuses it (a ramfs we mount as root).

class LoaderNoDirectTest : public ::testing::TestWithParam<IoEngineKind> {};

// io_mode kAuto falls back to buffered reads on every shard and still delivers every sample
// exactly once with the bytes Dataset::Read returns.
TEST_P(LoaderNoDirectTest, AutoFallsBackToBufferedWithIdenticalBytes) {
  const IoEngineKind engine = GetParam();
  testing::NoDirectIoDir dir;
  if (dir.path().empty()) GTEST_SKIP() << dir.why_unavailable();
  const uint64_t n = 29;
  // Small shards: several files, each of which must take the fallback.
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", n, /*zstd=*/false, 256 << 10);
  ASSERT_NE(ds, nullptr);
  ASSERT_GT(ds->shards().size(), 1u);
  LoaderOptions o = SmallOptions();
  o.engine = engine;
  o.io_mode = IoMode::kAuto;
  o.order = Order::Shuffled(5);
  auto loader = Loader::Create(ds, o);
  if (!loader.ok() && engine == IoEngineKind::kIoUring &&
      loader.status().code() == StatusCode::kUnsupported) {
    GTEST_SKIP() << "io_uring refused here: " << loader.status().ToString();
  }
  ASSERT_TRUE(loader.ok()) << dir.description() << ": " << loader.status().ToString();
  ExpectEpochEqualsDataset(**loader, *ds);
  const LoaderStats s = (*loader)->stats();
  EXPECT_EQ(s.samples_delivered, n);
  EXPECT_EQ(s.engine, engine == IoEngineKind::kPread ? "pread" : "io_uring");
  EXPECT_FALSE(s.direct_io) << "O_DIRECT reported on " << dir.description();
  // The report says why: the first shard's refusal, and how many more shards share it.
  EXPECT_NE(s.io_status.find(ds->shards()[0].path), std::string::npos) << s.io_status;
  EXPECT_NE(s.io_status.find("refuses O_DIRECT"), std::string::npos) << s.io_status;
  EXPECT_NE(s.io_status.find(std::to_string(ds->shards().size() - 1) + " more shard(s)"),
            std::string::npos)
      << s.io_status;
  EXPECT_GE(s.bytes_read, ds->total_stored_bytes() - 4096 * ds->shards().size());
}

INSTANTIATE_TEST_SUITE_P(BothEngines, LoaderNoDirectTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kPread),
                         [](const ::testing::TestParamInfo<IoEngineKind>& info) {
                           return std::string(info.param == IoEngineKind::kPread ? "Pread"
                                                                                 : "Uring");
                         });

// io_mode kDirect there is a clear error at Create(): it names the shard file and says to use
// buffered mode, instead of silently reading buffered.
TEST(LoaderTest, DirectModeOnFileSystemRefusingDirectIsAClearError) {
  testing::NoDirectIoDir dir;
  if (dir.path().empty()) GTEST_SKIP() << dir.why_unavailable();
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 4);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.engine = IoEngineKind::kPread;
  o.io_mode = IoMode::kDirect;
  auto loader = Loader::Create(ds, o);
  ASSERT_FALSE(loader.ok()) << "io_mode=direct succeeded on " << dir.description();
  testing::ExpectError(loader.status(), StatusCode::kUnsupported,
                       {ds->shards()[0].path, "O_DIRECT", "io_mode auto or buffered"});
}

// ---- Subsets, compression, verification -------------------------------------------------------

TEST(LoaderTest, FieldsAndMaxLenReadOnlyTheSelectedBytes) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 20);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.fields = {"hidden_state", "input_ids"};
  o.max_len = 7;
  o.order = Order::Unshuffled();
  // Unchecked, a prefix read reads only the prefix (checked, it reads each served field whole:
  // PartialReadsCheckTheFieldsTheyServe).
  o.verify_checksums = false;
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  uint64_t count = 0;
  while (true) {
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    const Sample& got = (*next)->samples[0];
    Sample want = *ds->Read(got.index());
    ASSERT_EQ(got.tensors().size(), 2u);
    EXPECT_EQ(got.Find("loss_mask"), nullptr);
    for (const char* name : {"hidden_state", "input_ids"}) {
      const TensorView* g = got.Find(name);
      const TensorView* w = want.Find(name);
      ASSERT_NE(g, nullptr);
      const size_t d = std::string(name) == "hidden_state" ? 1 : 0;
      const uint64_t rows = std::min<uint64_t>(w->shape[d], 7);
      Shape expect_shape = w->shape;
      expect_shape[d] = rows;
      EXPECT_EQ(g->shape, expect_shape) << name;
      ASSERT_EQ(g->nbytes, w->nbytes / w->shape[d] * rows);
      EXPECT_EQ(std::memcmp(g->data, w->data, g->nbytes), 0) << name;
    }
    ++count;
  }
  EXPECT_EQ(count, 20u);
  // Only the selected prefix is read: far less than the dataset.
  EXPECT_LT((*loader)->stats().bytes_read, ds->total_stored_bytes() / 2);
}

TEST(LoaderTest, ZstdSamplesWithVerificationDecodeToTheSameBytes) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 24, /*zstd=*/true);
  ASSERT_NE(ds, nullptr);
  uint64_t compressed = 0;
  for (uint64_t i = 0; i < ds->size(); ++i) compressed += (ds->location(i).flags & kSampleFlagZstd) != 0;
  EXPECT_GT(compressed, 0u) << "the test data should compress";
  LoaderOptions o = SmallOptions();
  o.verify_checksums = true;
  o.worker_threads = 2;
  o.max_len = 9;  // cuts decoded tensors in place
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  uint64_t count = 0;
  while (true) {
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    const Sample& got = (*next)->samples[0];
    Sample want = *ds->Read(got.index());
    const TensorView* g = got.Find("hidden_state");
    const TensorView* w = want.Find("hidden_state");
    const uint64_t rows = std::min<uint64_t>(w->shape[1], 9);
    EXPECT_EQ(g->shape, (Shape{1, rows, 256}));
    EXPECT_EQ(std::memcmp(g->data, w->data, g->nbytes), 0);
    ++count;
  }
  EXPECT_EQ(count, 24u);
  EXPECT_EQ((*loader)->stats().checksum_failures, 0u);
}

// A sample outlives its loader and the loader's dataset, names included: the loader held the
// last reference to the dataset, whose schema the tensors' names view (under ASan a name read
// after the loader is gone was a heap-use-after-free before the sample held the dataset).
TEST(LoaderTest, SamplesKeepTheirTensorNamesAfterTheLoaderAndItsDatasetAreGone) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 4);
  ASSERT_NE(ds, nullptr);
  const Result<Sample> expected = ds->Read(0);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  std::vector<std::string> names;
  for (const TensorView& t : expected->tensors()) names.emplace_back(t.name);
  LoaderOptions o = SmallOptions();
  o.order = Order::Unshuffled();
  auto loader = Loader::Create(std::move(ds), o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto next = (*loader)->Next();
  ASSERT_TRUE(next.ok() && next->has_value()) << next.status().ToString();
  ASSERT_EQ((*next)->samples.size(), 1u);
  const Sample sample = (*next)->samples[0];
  next = Result<std::optional<Batch>>(std::nullopt);
  loader->reset();  // the loader and, with it, the last other reference to the dataset
  ASSERT_EQ(sample.tensors().size(), names.size());
  for (size_t t = 0; t < names.size(); ++t) {
    EXPECT_EQ(std::string(sample.tensors()[t].name), names[t]);
    const TensorView* found = sample.Find(names[t]);
    ASSERT_NE(found, nullptr) << names[t];
    const TensorView* want = expected->Find(names[t]);
    ASSERT_NE(want, nullptr);
    ASSERT_EQ(found->nbytes, want->nbytes);
    EXPECT_EQ(std::memcmp(found->data, want->data, want->nbytes), 0) << names[t];
  }
}

TEST(LoaderTest, DefaultOptionsVerifyChecksums) {
  EXPECT_TRUE(LoaderOptions{}.verify_checksums);
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 8);
  ASSERT_NE(ds, nullptr);
  const SampleLocation loc = ds->location(2);
  testing::FlipByte(ds->shards()[loc.shard].path, loc.offset + loc.stored_size / 2);
  LoaderOptions o = SmallOptions();  // verify_checksums left at its default
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Status failure;
  for (int i = 0; i < 16 && failure.ok(); ++i) {
    auto next = (*loader)->Next();
    if (!next.ok()) failure = next.status();
    else if (!next->has_value()) break;
  }
  EXPECT_EQ(failure.code(), StatusCode::kCorruption) << failure.ToString();
  EXPECT_NE(failure.ToString().find("sample 2"), std::string::npos) << failure.ToString();
}

// Every byte served is checked (FORMAT.md §3.9): a partial read (fields, max_len) of a dataset
// with field checksums checks each served field, reading it whole but not the other fields; damage
// in a field not served is not read and not reported; damage in a served field is found, also
// past the max_len prefix of the field. Without verification only the served bytes are read.
TEST(LoaderTest, PartialReadsCheckTheFieldsTheyServe) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 6);
  ASSERT_NE(ds, nullptr);
  ASSERT_TRUE(ds->has_field_checksums());
  const SampleLocation loc = ds->location(1);
  const size_t hs_field = *ds->schema().Find("hidden_state");
  const TensorLocation hs = ds->tensor(1, hs_field);
  // The last byte of hidden_state: past any max_len prefix.
  testing::FlipByte(ds->shards()[loc.shard].path, loc.offset + hs.offset + hs.nbytes - 1);
  auto run = [&](std::vector<std::string> fields, uint64_t max_len, bool verify,
                 uint64_t* bytes_read) {
    LoaderOptions o = SmallOptions();
    o.fields = std::move(fields);
    o.max_len = max_len;
    o.order = Order::Unshuffled();
    o.verify_checksums = verify;
    auto loader = Loader::Create(ds, o);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    Status st;
    while (true) {
      auto next = (*loader)->Next();
      if (!next.ok()) {
        st = next.status();
        break;
      }
      if (!next->has_value()) break;
    }
    *bytes_read = (*loader)->stats().bytes_read;
    return st;
  };
  uint64_t ids_bytes = 0, hs_bytes = 0, prefix_bytes = 0, unchecked_bytes = 0;
  EXPECT_TRUE(run({"input_ids"}, 0, true, &ids_bytes).ok());  // the damage is not served
  EXPECT_LT(ids_bytes, ds->total_stored_bytes() / 2);
  Status st = run({"hidden_state"}, 0, true, &hs_bytes);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.ToString().find("sample 1"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("field 'hidden_state'"), std::string::npos) << st.ToString();
  st = run({"hidden_state"}, 2, true, &prefix_bytes);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  // Unchecked, a prefix read reads less and serves the (undamaged) prefix.
  EXPECT_TRUE(run({"hidden_state"}, 2, false, &unchecked_bytes).ok());
}

TEST(LoaderTest, ChecksumFailureNamesSampleAndShardAndCanBeSkipped) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 16);
  ASSERT_NE(ds, nullptr);
  const uint64_t bad = 5;
  const SampleLocation loc = ds->location(bad);
  const std::string shard = ds->shards()[loc.shard].path;
  testing::FlipByte(shard, loc.offset + loc.stored_size / 2);

  LoaderOptions o = SmallOptions();
  o.verify_checksums = true;
  o.order = Order::Unshuffled();
  {
    auto loader = Loader::Create(ds, o);
    ASSERT_TRUE(loader.ok());
    Status error;
    for (int b = 0; b < 16 && error.ok(); ++b) {
      auto next = (*loader)->Next();
      if (!next.ok()) error = next.status();
    }
    testing::ExpectError(error, StatusCode::kCorruption,
                         {"sample 5", shard, "offset " + std::to_string(loc.offset), "checksum"});
    EXPECT_EQ((*loader)->stats().checksum_failures, 1u);
  }
  o.on_error = OnError::kSkip;
  testing::RecordingSink sink;
  auto loader = StreamingLoader::Make(ds, o, {nullptr, sink.AsSink()});
  ASSERT_TRUE(loader.ok());
  std::vector<uint64_t> seen = Drain(**loader);
  // Each skip and each stand-in is said once.
  const std::vector<std::string> skips = sink.Matching("skipping sample");
  ASSERT_EQ(skips.size(), 1u) << testing::Join(sink.lines());
  EXPECT_EQ(skips[0].rfind("libshard: skipping sample 5: ", 0), 0u) << skips[0];
  EXPECT_NE(skips[0].find("checksum"), std::string::npos) << skips[0];
  EXPECT_EQ(sink.Matching("libshard: batch 5 lost every sample; sample 4 is repeated in its "
                          "place so this rank keeps its step count")
                .size(),
            1u)
      << testing::Join(sink.lines());
  // Single samples: the skipped sample's step is filled by a repeat of the sample before it, so
  // the rank keeps its step count.
  ASSERT_EQ(seen.size(), 16u);
  EXPECT_EQ((*loader)->batches_per_epoch(), 16u);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), bad), 0);
  EXPECT_EQ(seen[bad], bad - 1);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), bad - 1), 2);
  EXPECT_EQ((*loader)->state().skipped, std::vector<uint64_t>{bad});
  EXPECT_EQ((*loader)->stats().samples_skipped, 1u);
  EXPECT_EQ((*loader)->stats().samples_repeated, 1u);
}

// on_error=skip under DDP: whatever fails, every rank yields batches_per_epoch() batches (a rank
// one step short would leave the others waiting in a collective). A batch that lost some samples
// comes smaller; one that lost all of them is a repeat of the previous batch's first sample;
// only a first batch with nothing before it is dropped.
// The stand-in kept for on_error=skip never holds the stream up: with room for one sample only,
// the loader lets it go instead of waiting for memory it holds itself.
TEST(LoaderTest, SkipStandInYieldsToATightMemoryBudget) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 12);
  ASSERT_NE(ds, nullptr);
  uint64_t largest = 0;
  for (uint64_t i = 0; i < ds->size(); ++i) {
    largest = std::max<uint64_t>(largest, (ds->location(i).stored_size + 4095) / 4096 * 4096);
  }
  LoaderOptions o = SmallOptions();
  o.memory_budget = largest + 4096;  // one sample at a time, whichever it is
  o.on_error = OnError::kSkip;
  o.slow_wait_warning_seconds = 10;  // a stall on held memory becomes an error after 20 s
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint64_t> seen = Drain(**loader);
  EXPECT_EQ(seen.size(), 12u);
  std::sort(seen.begin(), seen.end());
  for (uint64_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
  // A liveness bound, not a speed check: normally milliseconds.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
}

TEST(LoaderTest, SkipKeepsEveryRanksStepCount) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 24);
  ASSERT_NE(ds, nullptr);
  // Unshuffled, world size 2, batches of 2: rank 0 gets {0,1}, {4,5}, {8,9}, ...; rank 1 gets
  // {2,3}, {6,7}, {10,11}, ... Corrupt 4 and 5 (all of rank 0's second batch) and 6 (half of
  // rank 1's second batch).
  for (uint64_t bad : {4, 5, 6}) {
    const SampleLocation loc = ds->location(bad);
    testing::FlipByte(ds->shards()[loc.shard].path, loc.offset + loc.stored_size / 2);
  }
  LoaderOptions o = SmallOptions();
  o.verify_checksums = true;
  o.order = Order::Unshuffled();
  o.batch_size = 2;
  o.world_size = 2;
  o.on_error = OnError::kSkip;
  std::vector<std::vector<std::vector<uint64_t>>> per_rank(2);
  for (uint32_t rank = 0; rank < 2; ++rank) {
    o.rank = rank;
    auto loader = Loader::Create(ds, o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    while (true) {
      auto next = (*loader)->Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      std::vector<uint64_t> batch;
      for (const Sample& s : (*next)->samples) batch.push_back(s.index());
      per_rank[rank].push_back(batch);
    }
    EXPECT_EQ(per_rank[rank].size(), (*loader)->batches_per_epoch()) << "rank " << rank;
    EXPECT_EQ((*loader)->stats().samples_repeated, rank == 0 ? 1u : 0u);
  }
  ASSERT_EQ(per_rank[0].size(), 6u);
  ASSERT_EQ(per_rank[1].size(), 6u);
  EXPECT_EQ(per_rank[0][0], (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(per_rank[0][1], (std::vector<uint64_t>{0}));  // stands in for {4, 5}
  EXPECT_EQ(per_rank[0][2], (std::vector<uint64_t>{8, 9}));
  EXPECT_EQ(per_rank[1][1], (std::vector<uint64_t>{7}));  // {6, 7} without 6

  // Nothing before them to stand in: rank 0's first two batches, both lost, are dropped.
  for (uint64_t bad : {0, 1}) {
    const SampleLocation loc = ds->location(bad);
    testing::FlipByte(ds->shards()[loc.shard].path, loc.offset + loc.stored_size / 2);
  }
  o.rank = 0;
  testing::RecordingSink sink;
  auto loader = StreamingLoader::Make(ds, o, {nullptr, sink.AsSink()});
  ASSERT_TRUE(loader.ok());
  std::vector<uint64_t> seen = Drain(**loader);
  EXPECT_EQ(seen.front(), 8u);
  const std::vector<std::string> dropped = sink.Matching("no earlier sample can stand in");
  ASSERT_EQ(dropped.size(), 2u) << testing::Join(sink.lines());
  EXPECT_EQ(dropped[0],
            "libshard: batch 0 lost every sample and no earlier sample can stand in for it; this "
            "rank delivers one batch fewer this epoch");
  EXPECT_EQ(dropped[1].rfind("libshard: batch 1 lost every sample", 0), 0u) << dropped[1];
  EXPECT_EQ((*loader)->stats().batches_delivered, (*loader)->batches_per_epoch() - 2);
  EXPECT_EQ((*loader)->stats().samples_repeated, 0u);
}

TEST(LoaderTest, SettingNamesParseInOnePlaceAndEnvironmentErrorsNameTheVariable) {
  EXPECT_EQ(*ParseIoEngineKind("auto"), IoEngineKind::kAuto);
  EXPECT_EQ(*ParseIoEngineKind("uring"), IoEngineKind::kIoUring);
  EXPECT_EQ(*ParseIoEngineKind("io_uring"), IoEngineKind::kIoUring);
  EXPECT_EQ(*ParseIoEngineKind("pread"), IoEngineKind::kPread);
  EXPECT_EQ(*ParseIoMode("direct"), IoMode::kDirect);
  EXPECT_EQ(*ParseIoMode("buffered"), IoMode::kBuffered);
  EXPECT_EQ(*ParseOnError("skip"), OnError::kSkip);
  testing::ExpectError(ParseIoEngineKind("aio").status(), StatusCode::kInvalidArgument,
                       {"'aio'", "auto, uring, pread"});
  testing::ExpectError(ParseIoMode("mmap").status(), StatusCode::kInvalidArgument,
                       {"'mmap'", "auto, direct, buffered"});
  testing::ExpectError(ParseOnError("ignore").status(), StatusCode::kInvalidArgument,
                       {"'ignore'", "raise, skip"});

  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 2);
  ASSERT_NE(ds, nullptr);
  for (const char* var : {"LIBSHARD_ENGINE", "LIBSHARD_IO_MODE"}) {
    const char* saved = std::getenv(var);
    const std::string restore = saved == nullptr ? "" : saved;
    ::setenv(var, "bogus", 1);
    auto loader = Loader::Create(ds, SmallOptions());
    if (saved == nullptr) {
      ::unsetenv(var);
    } else {
      ::setenv(var, restore.c_str(), 1);
    }
    testing::ExpectError(loader.status(), StatusCode::kInvalidArgument, {var, "'bogus'"});
  }
}

TEST(LoaderTest, UnknownFieldIsInvalidArgument) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 2);
  LoaderOptions o = SmallOptions();
  o.fields = {"nope"};
  auto loader = Loader::Create(ds, o);
  testing::ExpectError(loader.status(), StatusCode::kInvalidArgument, {"nope", "hidden_state"});
}

// ---- Memory -------------------------------------------------------------------------------------

TEST(LoaderTest, ArenaNeverExceedsBudgetOverSeveralEpochs) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 40);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.memory_budget = 1 << 20;  // the two held batches + the one being read, with room to spare
  o.batch_size = 2;
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    ASSERT_TRUE((*loader)->SetEpoch(epoch).ok());
    std::vector<Batch> held;  // the consumer keeps the last two batches
    std::set<uint64_t> seen;
    while (true) {
      auto next = (*loader)->Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      for (const Sample& s : (*next)->samples) seen.insert(s.index());
      held.push_back(std::move(**next));
      if (held.size() > 2) held.erase(held.begin());
      const LoaderStats s = (*loader)->stats();
      ASSERT_LE(s.arena_in_use, s.arena_budget);
    }
    EXPECT_EQ(seen.size(), 40u);
  }
  const LoaderStats s = (*loader)->stats();
  EXPECT_LE(s.arena_peak, s.arena_budget);
  EXPECT_GT(s.arena_peak, 0u);
}

TEST(LoaderTest, SampleLargerThanBudgetIsAClearError) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 8);
  ASSERT_NE(ds, nullptr);
  uint64_t biggest = 0, which = 0;
  for (uint64_t i = 0; i < ds->size(); ++i) {
    if (ds->location(i).stored_size > biggest) {
      biggest = ds->location(i).stored_size;
      which = i;
    }
  }
  LoaderOptions o = SmallOptions();
  o.memory_budget = 16 << 10;
  o.order = Order::Unshuffled();
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok());
  Status error;
  for (int b = 0; b < 8 && error.ok(); ++b) {
    auto next = (*loader)->Next();
    if (!next.ok()) error = next.status();
  }
  ASSERT_FALSE(error.ok());
  testing::ExpectError(error, StatusCode::kResourceExhausted, {"sample ", "memory_budget"});
  (void)which;
}

TEST(LoaderTest, BatchThatCannotFitIsResourceExhaustedNotAHang) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 16);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.memory_budget = 160 << 10;  // every sample fits, 16 of them at once do not
  o.batch_size = 16;
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok());
  const auto start = std::chrono::steady_clock::now();
  auto next = (*loader)->Next();
  // A liveness bound, not a speed check: normally milliseconds.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  ASSERT_FALSE(next.ok());
  testing::ExpectError(next.status(), StatusCode::kResourceExhausted, {"batch 0", "memory_budget"});
}

// The held-memory warning and error run on a fake clock (testutil/loader_hooks.h): the loader
// believes seconds pass while it waits, and its lines are read from a recording sink.
TEST(LoaderTest, ConsumerHoldingAllMemoryGetsAWarningThenProceedsWhenItReleases) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 12);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.memory_budget = 200 << 10;
  o.order = Order::Unshuffled();
  // The held-memory error would come after 2 x 300 s of the fake clock (6000 waits of at least
  // 1 ms): far more than the releaser needs to react to the warning.
  o.slow_wait_warning_seconds = 300;
  auto clock = std::make_shared<testing::FakeClock>();
  testing::RecordingSink sink;
  auto loader = StreamingLoader::Make(ds, o, {clock, sink.AsSink()});
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  std::vector<Batch> held;
  std::mutex held_mu;
  std::atomic<bool> released{false};
  // Releases what the consumer holds once the loader has warned that it waits for it.
  std::thread releaser([&] {
    if (!sink.WaitForLine("waiting for memory", std::chrono::seconds(120))) return;
    std::lock_guard<std::mutex> lock(held_mu);
    held.clear();
    released = true;
  });
  uint64_t count = 0;
  while (true) {
    auto next = (*loader)->Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    ++count;
    std::lock_guard<std::mutex> lock(held_mu);
    held.push_back(std::move(**next));
    if (released.load()) held.clear();
  }
  releaser.join();
  EXPECT_EQ(count, 12u);
  EXPECT_TRUE(released.load());
  const std::vector<std::string> warnings = sink.Matching("waiting for memory");
  ASSERT_EQ(warnings.size(), 1u) << testing::Join(sink.lines());
  EXPECT_NE(warnings[0].find("libshard: loader waiting for memory: the consumer holds about "),
            std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("memory_budget"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("drop references to samples you no longer need"), std::string::npos)
      << warnings[0];
}

TEST(LoaderTest, ConsumerHoldingEverythingForeverGetsResourceExhausted) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 12);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.memory_budget = 200 << 10;
  o.slow_wait_warning_seconds = 0.5;  // the error after max(1, 2 x 0.5) s with nothing released
  o.order = Order::Unshuffled();
  auto clock = std::make_shared<testing::FakeClock>();
  testing::RecordingSink sink;
  auto loader = StreamingLoader::Make(ds, o, {clock, sink.AsSink()});
  ASSERT_TRUE(loader.ok());
  std::vector<Batch> held;
  Status error;
  for (int b = 0; b < 12 && error.ok(); ++b) {
    auto next = (*loader)->Next();
    if (!next.ok()) {
      error = next.status();
    } else {
      held.push_back(std::move(**next));
    }
  }
  testing::ExpectError(error, StatusCode::kResourceExhausted,
                       {"consumer holds about", "memory_budget", "nothing was released for 1.0 s"});
  held.clear();  // releasing lets the same loader go on
  auto next = (*loader)->Next();
  EXPECT_TRUE(next.ok()) << next.status().ToString();
}

TEST(LoaderTest, SamplesOutliveTheLoader) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 3);
  std::optional<Sample> kept;
  {
    auto loader = Loader::Create(ds, SmallOptions());
    ASSERT_TRUE(loader.ok());
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    kept = (*next)->samples[0];
  }
  ExpectSameSample(*kept, *ds->Read(kept->index()));
}

// ---- Stop -----------------------------------------------------------------------------------

TEST(LoaderTest, StopMidStreamReturnsPromptly) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 60);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.read_size = 4096;  // many small reads in flight
  o.verify_checksums = true;
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->Next().ok());
  std::atomic<bool> aborted{false};
  std::thread consumer([&] {
    while (true) {
      auto next = (*loader)->Next();
      if (!next.ok()) {
        aborted = next.status().code() == StatusCode::kAborted;
        return;
      }
      if (!next->has_value()) {
        if (!(*loader)->SetEpoch((*loader)->state().epoch + 1).ok()) {
          aborted = true;
          return;
        }
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  (*loader)->Stop();
  consumer.join();
  loader->reset();  // the destructor waits for reads in flight
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(aborted.load());
  EXPECT_LT(s, 10.0);  // liveness, not speed: normally milliseconds
}

// ---- Order: coverage over ranks and resume ----------------------------------------------------

TEST(LoaderTest, ExactlyOnceCoverageOverRanks) {
  testing::TempDir dir;
  const uint64_t n = 37;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", n);
  ASSERT_NE(ds, nullptr);
  for (uint32_t world = 1; world <= 8; ++world) {
    for (bool drop_last : {false, true}) {
      std::map<uint64_t, int> count;
      uint64_t per_rank = UINT64_MAX;
      for (uint32_t rank = 0; rank < world; ++rank) {
        LoaderOptions o = SmallOptions();
        o.order = Order::Shuffled(11);
        o.rank = rank;
        o.world_size = world;
        o.drop_last = drop_last;
        auto loader = Loader::Create(ds, o);
        ASSERT_TRUE(loader.ok()) << loader.status().ToString();
        std::vector<uint64_t> seen = Drain(**loader);
        if (per_rank == UINT64_MAX) per_rank = seen.size();
        EXPECT_EQ(seen.size(), per_rank) << "world " << world << " rank " << rank;
        EXPECT_EQ((*loader)->batches_per_epoch(), per_rank);
        for (uint64_t i : seen) ++count[i];
      }
      if (drop_last) {
        EXPECT_EQ(per_rank, n / world);
        for (const auto& [i, c] : count) EXPECT_EQ(c, 1) << "sample " << i;
      } else {
        EXPECT_EQ(per_rank, (n + world - 1) / world);
        EXPECT_EQ(count.size(), n) << "world " << world;
        uint64_t repeats = 0;
        for (const auto& [i, c] : count) repeats += c - 1;
        EXPECT_EQ(repeats, per_rank * world - n);
      }
    }
  }
}

TEST(LoaderTest, ResumeEqualsTheUninterruptedSequence) {
  testing::TempDir dir;
  const uint64_t n = 45;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", n);
  ASSERT_NE(ds, nullptr);
  LoaderOptions base = SmallOptions();
  base.order = Order::Shuffled(5);
  base.epoch = 2;
  base.world_size = 3;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    base.rank = rank;
    std::vector<uint64_t> full = Drain(**Loader::Create(ds, base));
    ASSERT_EQ(full.size(), 15u);
    auto first = Loader::Create(ds, base);
    std::vector<uint64_t> head = Drain(**first, 6);
    const LoaderState state = (*first)->state();
    EXPECT_EQ(state.position, 6u * 3u);
    LoaderOptions resumed = base;
    resumed.order = Order::Shuffled(999);  // ignored: the state wins
    resumed.resume = state;
    std::vector<uint64_t> tail = Drain(**Loader::Create(ds, resumed));
    head.insert(head.end(), tail.begin(), tail.end());
    EXPECT_EQ(head, full) << "rank " << rank;
  }
  // Another world size continues the same global sequence: 3 ranks x 5 steps, then 5 ranks.
  std::multiset<uint64_t> all;
  LoaderState state;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    base.rank = rank;
    auto loader = Loader::Create(ds, base);
    for (uint64_t i : Drain(**loader, 5)) all.insert(i);
    state = (*loader)->state();
  }
  EXPECT_EQ(state.position, 15u);
  for (uint32_t rank = 0; rank < 5; ++rank) {
    LoaderOptions o = base;
    o.world_size = 5;
    o.rank = rank;
    o.resume = state;
    auto loader = Loader::Create(ds, o);
    std::vector<uint64_t> seen = Drain(**loader);
    EXPECT_EQ(seen.size(), 6u);
    for (uint64_t i : seen) all.insert(i);
  }
  EXPECT_EQ(all.size(), n);
  for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(all.count(i), 1u) << "sample " << i;
}

TEST(LoaderTest, FixedAndTokenBatches) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 30);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SmallOptions();
  o.batch_size = 4;
  auto fixed = Loader::Create(ds, o);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ((*fixed)->batches_per_epoch(), 8u);
  auto first = (*fixed)->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->samples.size(), 4u);

  o.batch_size = 0;
  o.max_tokens = 300;
  auto tokens = Loader::Create(ds, o);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  uint64_t total = 0;
  while (true) {
    auto next = (*tokens)->Next();
    ASSERT_TRUE(next.ok());
    if (!next->has_value()) break;
    uint64_t sum = 0;
    for (const Sample& s : (*next)->samples) sum += ds->length(s.index());
    EXPECT_TRUE(sum <= 300 || (*next)->samples.size() == 1) << sum;
    total += (*next)->samples.size();
  }
  EXPECT_EQ(total, 30u);
}

TEST(LoaderTest, StatsReportEngineWaitAndInflight) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 10);
  LoaderOptions o = SmallOptions();
  o.pin_memory = PinMemory::kOn;
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok());
  std::vector<uint64_t> seen = Drain(**loader);
  const LoaderStats s = (*loader)->stats();
  EXPECT_EQ(s.samples_delivered, 10u);
  EXPECT_EQ(s.batches_delivered, 10u);
  EXPECT_GT(s.bytes_delivered, 0u);
  EXPECT_GT(s.elapsed_seconds, 0.0);
  EXPECT_GE(s.wait_seconds, 0.0);
  EXPECT_LE(s.wait_share, 1.0);
  EXPECT_FALSE(s.engine.empty());
  EXPECT_FALSE(s.pin_status.empty());
  // The arena is capped at what the dataset can use: ten small samples need less than
  // the budget asked for, and the cap still holds every sample.
  EXPECT_LT(s.arena_budget, o.memory_budget);
  EXPECT_GE(s.arena_budget, ds->total_stored_bytes());
}

}  // namespace
}  // namespace libshard
