// Tests for the read-ahead (libshard/read_ahead.h): samples served from reads made ahead in the
// announced order with the bytes Dataset::Read returns; the rule for entries passed over,
// unannounced and never-asked samples (nothing wedges, also in a tiny arena and with samples the
// caller keeps); corruption detected; bad indices and options refused; concurrent Gets.
#include "libshard/read_ahead.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<Dataset> WriteDataset(const fs::path& dir, uint64_t n, bool zstd = false) {
  WriterOptions o = testing::FastOptions();
  o.shard_size = 256 << 10;
  if (zstd) o.compression = Compression::kZstd;
  auto w = Writer::Create(dir.string(), testing::EagleSchema(), o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  for (uint64_t i = 0; i < n; ++i) {
    testing::OwnedSample s = testing::MakeEagleSample(i, 5 + (i * 37) % 131, 256, zstd);
    EXPECT_TRUE((*w)->Append(s.input).ok());
  }
  EXPECT_TRUE((*w)->Finish().ok());
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

LoaderOptions Small(uint64_t budget = 2 << 20) {
  LoaderOptions o = DefaultReadAheadOptions();
  o.memory_budget = budget;
  o.queue_depth = 8;
  o.read_size = 16 << 10;
  return o;
}

void ExpectSame(const Sample& got, const Dataset& ds, uint64_t index) {
  ASSERT_EQ(got.index(), index);
  auto want = ds.Read(index);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_EQ(got.tensors().size(), want->tensors().size());
  for (const TensorView& w : want->tensors()) {
    const TensorView* g = got.Find(w.name);
    ASSERT_NE(g, nullptr) << w.name;
    EXPECT_EQ(g->shape, w.shape);
    ASSERT_EQ(g->nbytes, w.nbytes);
    EXPECT_EQ(std::memcmp(g->data, w.data, w.nbytes), 0) << "sample " << index << " " << w.name;
  }
}

Sample GetOk(ReadAhead& ra, const Dataset& ds, uint64_t index) {
  auto got = ra.Get(index);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  if (!got.ok()) return Sample();
  ExpectSame(*got, ds, index);
  return std::move(got).value();
}

// Waits until the engine has read `bytes` (its reads of what was announced are done).
void WaitForReads(const ReadAhead& ra, uint64_t bytes) {
  for (int i = 0; i < 500 && ra.stats().bytes_read < bytes; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

uint64_t StoredBytes(const Dataset& ds, const std::vector<uint64_t>& indices) {
  uint64_t total = 0;
  for (uint64_t i : indices) total += ds.location(i).stored_size;
  return total;
}

TEST(ReadAheadTest, AnnouncedOrderIsServedFromReadsMadeAhead) {
  for (const bool zstd : {false, true}) {
    testing::TempDir dir;
    const uint64_t n = 40;
    auto ds = WriteDataset(dir.path() / "ds", n, zstd);
    ASSERT_NE(ds, nullptr);
    auto ra = ReadAhead::Create(ds, Small());
    ASSERT_TRUE(ra.ok()) << ra.status().ToString();
    std::vector<uint64_t> order;
    for (uint64_t i = 0; i < n; ++i) order.push_back((i * 7) % n);
    ASSERT_TRUE((*ra)->Announce(order).ok());
    for (uint64_t i : order) GetOk(**ra, *ds, i);
    const ReadAheadStats s = (*ra)->stats();
    EXPECT_EQ(s.announced, n);
    EXPECT_EQ(s.hits + s.waits, n) << "zstd " << zstd;
    EXPECT_EQ(s.misses, 0u);
    EXPECT_EQ(s.skipped + s.evicted + s.held, 0u);
    EXPECT_GE(s.bytes_read, StoredBytes(*ds, order));
    EXPECT_LE(s.arena_peak, s.arena_budget);
  }
}

TEST(ReadAheadTest, ReadsCompleteBeforeTheGetAreHits) {
  testing::TempDir dir;
  auto ds = WriteDataset(dir.path() / "ds", 12);
  ASSERT_NE(ds, nullptr);
  auto ra = ReadAhead::Create(ds, Small());
  ASSERT_TRUE(ra.ok());
  const std::vector<uint64_t> order = {4, 1, 9, 0};
  ASSERT_TRUE((*ra)->Announce(order).ok());
  WaitForReads(**ra, StoredBytes(*ds, order));
  for (uint64_t i : order) GetOk(**ra, *ds, i);
  EXPECT_EQ((*ra)->stats().hits, order.size());
  // The engine goes on when more is announced after it reached the end.
  const std::vector<uint64_t> more = {11, 2};
  ASSERT_TRUE((*ra)->Announce(more).ok());
  WaitForReads(**ra, StoredBytes(*ds, order) + StoredBytes(*ds, more));
  for (uint64_t i : more) GetOk(**ra, *ds, i);
  EXPECT_EQ((*ra)->stats().hits, order.size() + more.size());
}

TEST(ReadAheadTest, UnannouncedPassedOverAndLateGets) {
  testing::TempDir dir;
  const uint64_t n = 30;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  auto ra = ReadAhead::Create(ds, Small());
  ASSERT_TRUE(ra.ok());
  GetOk(**ra, *ds, 17);  // never announced: read synchronously
  EXPECT_EQ((*ra)->stats().misses, 1u);
  const std::vector<uint64_t> order = {0, 1, 2, 3, 4, 5};
  ASSERT_TRUE((*ra)->Announce(order).ok());
  WaitForReads(**ra, StoredBytes(*ds, order));
  GetOk(**ra, *ds, 3);  // passes 0, 1, 2 over; read already, they stay for a late Get
  GetOk(**ra, *ds, 1);
  GetOk(**ra, *ds, 4);
  ReadAheadStats s = (*ra)->stats();
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.held, 3u);  // 0 and 2 passed over, 5 ahead
  GetOk(**ra, *ds, 1);    // taken already: read synchronously
  EXPECT_EQ((*ra)->stats().misses, 2u);
  // An entry far ahead passes over entries not read yet: they are never read.
  std::vector<uint64_t> far;
  for (uint64_t i = 6; i < n; ++i) far.push_back(i);
  auto tiny = ReadAhead::Create(ds, Small(64 << 10));
  ASSERT_TRUE(tiny.ok());
  ASSERT_TRUE((*tiny)->Announce(far).ok());
  GetOk(**tiny, *ds, n - 1);
  s = (*tiny)->stats();
  EXPECT_GT(s.skipped, 0u);
  EXPECT_EQ(s.held, 0u);
  EXPECT_LT(s.bytes_read, StoredBytes(*ds, far));
}

// Announced entries never asked for, and samples the caller keeps, never block a Get: a tiny
// arena, several rounds of announcements of which only some are asked for, every sample kept.
TEST(ReadAheadTest, NeverAskedAndKeptSamplesDoNotWedge) {
  testing::TempDir dir;
  const uint64_t n = 50;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  auto ra = ReadAhead::Create(ds, Small(160 << 10));
  ASSERT_TRUE(ra.ok());
  std::vector<Sample> kept;
  uint64_t gets = 0;
  for (uint64_t round = 0; round < 4; ++round) {
    std::vector<uint64_t> order;
    for (uint64_t i = 0; i < n; ++i) order.push_back((i + round * 11) % n);
    ASSERT_TRUE((*ra)->Announce(order).ok());
    for (size_t k = 0; k < order.size(); k += 3) {  // two of three never asked for
      Sample s = GetOk(**ra, *ds, order[k]);
      ++gets;
      if (round == 3) kept.push_back(std::move(s));  // the caller keeps every sample
    }
  }
  const ReadAheadStats s = (*ra)->stats();
  EXPECT_EQ(s.hits + s.waits + s.misses, gets);
  EXPECT_GT(s.hits + s.waits, 0u);
  EXPECT_GT(s.skipped + s.evicted, 0u);
  EXPECT_LE(s.arena_peak, s.arena_budget);
}

TEST(ReadAheadTest, CorruptionIsTheErrorOfItsGet) {
  testing::TempDir dir;
  const uint64_t n = 12;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  const SampleLocation loc = ds->location(5);
  testing::FlipByte(ds->shards()[loc.shard].path, loc.offset + loc.stored_size / 2);
  auto ra = ReadAhead::Create(ds, Small());
  ASSERT_TRUE(ra.ok());
  ASSERT_TRUE((*ra)->Announce(std::vector<uint64_t>{4, 5, 6}).ok());
  GetOk(**ra, *ds, 4);
  auto bad = (*ra)->Get(5);
  testing::ExpectError(bad.status(), StatusCode::kCorruption,
                       {ds->shards()[loc.shard].path, "sample 5", "checksum"});
  EXPECT_EQ((*ra)->stats().checksum_failures, 1u);
  GetOk(**ra, *ds, 6);
}

TEST(ReadAheadTest, BadIndicesAndOptionsAreRefused) {
  testing::TempDir dir;
  const uint64_t n = 8;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  auto ra = ReadAhead::Create(ds, Small());
  ASSERT_TRUE(ra.ok());
  testing::ExpectError((*ra)->Announce(std::vector<uint64_t>{1, 8}), StatusCode::kInvalidArgument,
                       {"index 8", "entry 1", ds->path(), "8 samples", "nothing was announced"});
  EXPECT_EQ((*ra)->stats().announced, 0u);
  testing::ExpectError((*ra)->Get(8).status(), StatusCode::kInvalidArgument, {"8 samples"});
  LoaderOptions o = Small();
  o.fields = {"input_ids"};
  o.batch_size = 4;
  testing::ExpectError(ReadAhead::Create(ds, o).status(), StatusCode::kInvalidArgument,
                       {"fields", "batch_size", "do not apply"});
  o = Small();
  o.queue_depth = 0;
  testing::ExpectError(ReadAhead::Create(ds, o).status(), StatusCode::kInvalidArgument,
                       {"queue_depth"});
  for (const char* name : {"memory_budget", "queue_depth", "read_size", "engine", "io_mode",
                           "pin_memory", "worker_threads", "verify", "slow_wait_warning_seconds"})
    EXPECT_NE(ReadAheadOptionTable().Find(name), nullptr) << name;
  LoaderOptions set = DefaultReadAheadOptions();
  testing::ExpectError(ReadAheadOptionTable().Set(set, "batch_size", OptionValue::Integer(2)),
                       StatusCode::kInvalidArgument, {"read-ahead option", "batch_size"});
}

TEST(ReadAheadTest, StopReadsSynchronously) {
  testing::TempDir dir;
  auto ds = WriteDataset(dir.path() / "ds", 6);
  ASSERT_NE(ds, nullptr);
  auto ra = ReadAhead::Create(ds, Small());
  ASSERT_TRUE(ra.ok());
  ASSERT_TRUE((*ra)->Announce(std::vector<uint64_t>{0, 1, 2}).ok());
  (*ra)->Stop();
  GetOk(**ra, *ds, 1);
  EXPECT_EQ((*ra)->stats().misses, 1u);
  EXPECT_EQ((*ra)->Announce(std::vector<uint64_t>{3}).code(), StatusCode::kAborted);
}

// Two threads asking for the announced order a little out of turn: every sample served once,
// with its bytes; whatever the timing, each Get is a hit, a wait or a miss.
TEST(ReadAheadTest, ConcurrentGets) {
  testing::TempDir dir;
  const uint64_t n = 64;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  auto ra = ReadAhead::Create(ds, Small(512 << 10));
  ASSERT_TRUE(ra.ok());
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < n; ++i) order.push_back((i * 5) % n);
  ASSERT_TRUE((*ra)->Announce(order).ok());
  std::atomic<size_t> next{0};
  const auto worker = [&] {
    while (true) {
      const size_t k = next.fetch_add(1);
      if (k >= order.size()) return;
      auto got = (*ra)->Get(order[k]);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ExpectSame(*got, *ds, order[k]);
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  const ReadAheadStats s = (*ra)->stats();
  EXPECT_EQ(s.hits + s.waits + s.misses, n);
  EXPECT_LE(s.arena_peak, s.arena_budget);
}

}  // namespace
}  // namespace libshard
