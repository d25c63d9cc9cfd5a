// Tests for LoaderDiagnostics alone: counters and what follows from them, the exact text of the
// slow-wait warning, the periodic stats line on its interval, and the skip lines, on a fake
// clock with a recording sink.
#include "loader/diagnostics.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testutil/loader_hooks.h"

namespace libshard {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct Fixture {
  std::shared_ptr<testing::FakeClock> clock = std::make_shared<testing::FakeClock>();
  testing::RecordingSink sink;
  int snapshots = 0;
  LoaderStats snapshot;

  std::unique_ptr<LoaderDiagnostics> Make(double stats_interval) {
    auto d = std::make_unique<LoaderDiagnostics>(DiagnosticsHooks{clock, sink.AsSink()},
                                                 stats_interval);
    d->SetSnapshot([this] {
      ++snapshots;
      return snapshot;
    });
    return d;
  }
};

TEST(LoaderDiagnosticsTest, CountersAndRatesFollowTheClock) {
  Fixture f;
  auto d = f.Make(0);
  LoaderStats before;
  d->Fill(&before);
  EXPECT_EQ(before.elapsed_seconds, 0.0);  // no Next() yet
  EXPECT_EQ(before.throughput_gbps, 0.0);

  d->OnNext(f.clock->Now());
  f.clock->Advance(seconds(4));
  d->AddBytesRead(6'000'000'000);
  d->AddBytesDelivered(5'000);
  d->AddWait(1.0);
  d->OnBatchDelivered(3);
  d->OnBatchDelivered(2);
  d->OnChecksumFailure();
  d->OnNext(f.clock->Now());  // only the first Next() starts the clock
  LoaderStats s;
  d->Fill(&s);
  EXPECT_DOUBLE_EQ(s.elapsed_seconds, 4.0);
  EXPECT_EQ(s.bytes_read, 6'000'000'000u);
  EXPECT_DOUBLE_EQ(s.throughput_gbps, 1.5);
  EXPECT_DOUBLE_EQ(s.wait_seconds, 1.0);
  EXPECT_DOUBLE_EQ(s.wait_share, 0.25);
  EXPECT_EQ(s.samples_delivered, 5u);
  EXPECT_EQ(s.batches_delivered, 2u);
  EXPECT_EQ(s.bytes_delivered, 5'000u);
  EXPECT_EQ(s.checksum_failures, 1u);
  EXPECT_TRUE(f.sink.lines().empty());
}

TEST(LoaderDiagnosticsTest, SlowWaitNamesTheBatchTheReadsInFlightAndTheThroughput) {
  Fixture f;
  auto d = f.Make(0);
  f.snapshot.reads_in_flight = 2;
  f.snapshot.inflight = {InflightRead{"/d/shard-000000.bin", 8192, 4 << 20, 17, 12.34},
                         InflightRead{"/d/shard-000001.bin", 4096, 1 << 20, 18, 0.5}};
  f.snapshot.throughput_gbps = 0.123;
  f.snapshot.engine = "io_uring";
  f.snapshot.direct_io = true;
  d->WarnSlowWait(10.25, 7);
  ASSERT_EQ(f.sink.lines().size(), 1u);
  EXPECT_EQ(f.sink.lines()[0],
            "libshard: Next() has waited 10.2 s for batch 7; 2 reads in flight: "
            "/d/shard-000000.bin offset 8192 (4.0 MiB, sample 17, age 12.3 s); "
            "/d/shard-000001.bin offset 4096 (1.0 MiB, sample 18, age 0.5 s); "
            "throughput so far 0.12 GB/s (io_uring, O_DIRECT)");

  f.snapshot = LoaderStats{};
  f.snapshot.engine = "pread";
  d->WarnSlowWait(3, 0);
  EXPECT_EQ(f.sink.lines()[1],
            "libshard: Next() has waited 3.0 s for batch 0; 0 reads in flight; "
            "throughput so far 0.00 GB/s (pread, buffered)");
}

TEST(LoaderDiagnosticsTest, StatsLineComesOncePerInterval) {
  Fixture f;
  auto d = f.Make(5.0);
  d->MaybePrintStats();  // before the first Next(): nothing to say
  EXPECT_EQ(f.snapshots, 0);
  d->OnNext(f.clock->Now());
  f.clock->Advance(milliseconds(4999));
  d->MaybePrintStats();
  EXPECT_TRUE(f.sink.lines().empty());
  f.clock->Advance(milliseconds(1));
  f.snapshot.samples_delivered = 42;
  f.snapshot.bytes_read = 2'500'000'000;
  f.snapshot.throughput_gbps = 0.5;
  f.snapshot.wait_seconds = 1.25;
  f.snapshot.wait_share = 0.25;
  f.snapshot.reads_in_flight = 3;
  f.snapshot.oldest_read_age_seconds = 0.125;
  f.snapshot.arena_in_use = 1 << 20;
  f.snapshot.arena_budget = 64 << 20;
  f.snapshot.arena_peak = 3 << 20;
  f.snapshot.engine = "io_uring";
  f.snapshot.direct_io = true;
  f.snapshot.pinned = false;
  d->MaybePrintStats();
  ASSERT_EQ(f.sink.lines().size(), 1u);
  EXPECT_EQ(f.sink.lines()[0],
            "libshard: stats: 42 samples, 2.50 GB read, 0.50 GB/s, consumer waited 1.2 s (25%), "
            "3 reads in flight (oldest 0.12 s), arena 1.0 MiB of 64.0 MiB (peak 3.0 MiB), "
            "io_uring O_DIRECT, not pinned, 0 checksum failures");
  f.clock->Advance(seconds(4));
  d->MaybePrintStats();
  EXPECT_EQ(f.sink.lines().size(), 1u);
  f.clock->Advance(seconds(1));
  d->MaybePrintStats();
  EXPECT_EQ(f.sink.lines().size(), 2u);

  Fixture off;
  auto quiet = off.Make(0);  // interval 0: never
  quiet->OnNext(off.clock->Now());
  off.clock->Advance(seconds(1000));
  quiet->MaybePrintStats();
  EXPECT_TRUE(off.sink.lines().empty());
}

TEST(LoaderDiagnosticsTest, SkipLinesAreCountedAndSaid) {
  Fixture f;
  auto d = f.Make(0);
  d->OnSkipped(9, Status::Corruption("/d/shard-000000.bin offset 4096: sample 9: checksum"));
  d->OnRepeated(3, 8);
  d->OnBatchDropped(0);
  d->WarnHeldMemory("the consumer holds about 2 samples (1.0 MiB) of the 2.0 MiB memory_budget, "
                    "so batch 4 cannot be read");
  const std::vector<std::string> lines = f.sink.lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rfind("libshard: skipping sample 9: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("checksum"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1],
            "libshard: batch 3 lost every sample; sample 8 is repeated in its place so this rank "
            "keeps its step count");
  EXPECT_EQ(lines[2],
            "libshard: batch 0 lost every sample and no earlier sample can stand in for it; this "
            "rank delivers one batch fewer this epoch");
  EXPECT_EQ(lines[3],
            "libshard: loader waiting for memory: the consumer holds about 2 samples (1.0 MiB) of "
            "the 2.0 MiB memory_budget, so batch 4 cannot be read; drop references to samples "
            "you no longer need or raise memory_budget");
  LoaderStats s;
  d->Fill(&s);
  EXPECT_EQ(s.samples_skipped, 1u);
  EXPECT_EQ(s.samples_repeated, 1u);
}

}  // namespace
}  // namespace libshard
