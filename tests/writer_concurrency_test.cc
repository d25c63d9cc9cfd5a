// One Writer (writer.h) or ParallelWriter (parallel_writer.h) shared by several threads (issue 45,
// "threads"): every entry point may be called at once. Each sample given is committed exactly
// once or refused with a clear error, never twice and never half; nothing is appended after
// Finish. Run under TSan (scripts/test.sh, the "Concurrency" suites).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/parallel_writer.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;

constexpr unsigned kThreads = 6;

WriterOptions SmallShards() {
  WriterOptions o = FastOptions();
  o.shard_size = 6 * 4096;          // many rolls while the threads append
  o.journal_every_bytes = 3 * 4096;  // and many checkpoints
  return o;
}

// The seed of StandardSample whose source path is `path` ("dump/data_N.pt").
uint64_t SeedOf(const std::string& path) {
  return std::stoull(path.substr(path.find('_') + 1));
}

// Opens `dir` and checks it holds exactly the samples `seeds` (in any order), each once and
// whole: its bytes are StandardSample(seed)'s.
void ExpectExactly(const fs::path& dir, const std::set<uint64_t>& seeds) {
  auto ds = Dataset::Open(dir.string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->size(), seeds.size());
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    auto src = (*ds)->source(i);
    ASSERT_TRUE(src.ok());
    const uint64_t seed = SeedOf(src->path);
    EXPECT_TRUE(seen.insert(seed).second) << "sample " << seed << " committed twice";
    auto sample = (*ds)->Read(i);
    ASSERT_TRUE(sample.ok()) << sample.status().ToString();
    ExpectSampleEq(*sample, StandardSample(seed));
  }
  EXPECT_EQ(seen, seeds);
}

// Runs fn(t) on kThreads threads started together.
template <typename Fn>
void OnThreads(Fn fn) {
  std::atomic<unsigned> ready{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      fn(t);
    });
  for (std::thread& th : threads) th.join();
}

TEST(WriterConcurrencyTest, AppendsFromManyThreadsAreEachCommittedOnce) {
  TempDir dir;
  auto w = Writer::Create(dir.path().string(), EagleSchema(), SmallShards());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Writer& writer = **w;
  constexpr uint64_t kEach = 30;
  OnThreads([&](unsigned t) {
    for (uint64_t i = 0; i < kEach; ++i) {
      const OwnedSample s = StandardSample(t * kEach + i);
      if (i % 2 == 0) {
        ASSERT_TRUE(writer.Append(s.input).ok());
      } else {
        auto e = writer.Encode(s.input);
        ASSERT_TRUE(e.ok());
        ASSERT_TRUE(writer.AppendEncoded(std::move(*e)).ok());
      }
      (void)writer.samples_written();
      if (i % 7 == 0) ASSERT_TRUE(writer.Checkpoint().ok());
      if (i % 5 == 0) ASSERT_TRUE(writer.CheckpointIfDue().ok());
    }
  });
  EXPECT_EQ(writer.samples_written(), kThreads * kEach);
  auto sum = writer.Finish();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->samples, kThreads * kEach);
  std::set<uint64_t> all;
  for (uint64_t i = 0; i < kThreads * kEach; ++i) all.insert(i);
  ExpectExactly(dir.path(), all);
}

// Finish from one thread while the others append: every append that returned OK is in the
// dataset, every other one was refused as after Finish, and Finish commits once.
TEST(WriterConcurrencyTest, FinishWhileOthersAppendCommitsWhatWasAppended) {
  for (int round = 0; round < 3; ++round) {
    TempDir dir;
    auto w = Writer::Create(dir.path().string(), EagleSchema(), SmallShards());
    ASSERT_TRUE(w.ok());
    Writer& writer = **w;
    std::mutex mu;
    std::set<uint64_t> appended;
    std::atomic<int> finished_ok{0}, finish_refused{0};
    OnThreads([&](unsigned t) {
      if (t <= 1) {  // two Finish at once: one commits, the other is refused
        std::this_thread::sleep_for(std::chrono::milliseconds(5 * round));
        auto sum = writer.Finish();
        if (sum.ok()) {
          ++finished_ok;
        } else {
          ExpectError(sum.status(), StatusCode::kInvalidArgument, {"Finish called twice"});
          ++finish_refused;
        }
        return;
      }
      for (uint64_t i = 0; i < 200; ++i) {
        const uint64_t seed = t * 1000 + i;
        const OwnedSample s = StandardSample(seed);
        const Status st = writer.Append(s.input);
        if (st.ok()) {
          std::lock_guard lock(mu);
          appended.insert(seed);
        } else {
          ExpectError(st, StatusCode::kInvalidArgument, {"after Finish"});
        }
      }
    });
    EXPECT_EQ(finished_ok.load(), 1);
    EXPECT_EQ(finish_refused.load(), 1);
    ExpectExactly(dir.path(), appended);
  }
}

// Jobs submitted from several producer threads are each committed once, in both commit modes;
// Flush and Checkpoint from other threads meanwhile.
class ParallelWriterConcurrencyTest : public ::testing::TestWithParam<bool> {};

TEST_P(ParallelWriterConcurrencyTest, SubmitsFromManyThreadsAreEachCommittedOnce) {
  TempDir dir;
  auto w = Writer::Create(dir.path().string(), EagleSchema(), SmallShards());
  ASSERT_TRUE(w.ok());
  ParallelWriterOptions po;
  po.threads = 3;
  po.commit_thread = GetParam();
  po.in_flight_bytes = 4 * 4096;  // producers wait for the bound
  std::atomic<uint64_t> done{0};
  po.on_done = [&done](const JobOutcome& o) {
    ++done;
    return o.status;
  };
  auto started = ParallelWriter::Start(std::move(*w), po);
  ASSERT_TRUE(started.ok());
  ParallelWriter& p = **started;
  constexpr uint64_t kEach = 40;
  OnThreads([&](unsigned t) {
    for (uint64_t i = 0; i < kEach; ++i) {
      const uint64_t seed = t * kEach + i;
      auto seq = p.Submit(
          [seed](const Writer& writer) { return writer.Encode(StandardSample(seed).input); },
          4096);
      ASSERT_TRUE(seq.ok()) << seq.status().ToString();
      (void)p.TakeReleased();
      if (t == 0 && i % 10 == 0) ASSERT_TRUE(p.Flush().ok());
      if (t == 1 && i % 10 == 0) ASSERT_TRUE(p.Checkpoint().ok());
    }
  });
  EXPECT_EQ(p.submitted(), kThreads * kEach);
  auto sum = p.Finish();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(done.load(), kThreads * kEach);
  std::set<uint64_t> all;
  for (uint64_t i = 0; i < kThreads * kEach; ++i) all.insert(i);
  ExpectExactly(dir.path(), all);
}

// Finish and Stop from other threads while producers submit: no crash, no hang; a Submit after
// them is refused (Aborted); what Finish commits is every job submitted before it.
TEST_P(ParallelWriterConcurrencyTest, FinishOrStopWhileProducersSubmit) {
  for (bool stop : {false, true}) {
    TempDir dir;
    auto w = Writer::Create(dir.path().string(), EagleSchema(), SmallShards());
    ASSERT_TRUE(w.ok());
    ParallelWriterOptions po;
    po.threads = 2;
    po.commit_thread = GetParam();
    po.in_flight_bytes = 4 * 4096;
    auto started = ParallelWriter::Start(std::move(*w), po);
    ASSERT_TRUE(started.ok());
    ParallelWriter& p = **started;
    std::mutex mu;
    std::set<uint64_t> submitted;
    Status finish = Status::Internal("not finished");
    OnThreads([&](unsigned t) {
      if (t == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        if (stop) {
          p.Stop();
        } else {
          finish = p.Finish().status();
        }
        return;
      }
      if (t == 1 && stop) {
        p.Stop();  // two Stops at once
        return;
      }
      for (uint64_t i = 0; i < 100; ++i) {
        const uint64_t seed = t * 1000 + i;
        std::lock_guard lock(mu);  // a Submit that returned OK is in `submitted` before Finish
        auto seq = p.Submit(
            [seed](const Writer& writer) { return writer.Encode(StandardSample(seed).input); },
            4096);
        if (!seq.ok()) {
          EXPECT_EQ(seq.status().code(), StatusCode::kAborted) << seq.status().ToString();
          return;
        }
        submitted.insert(seed);
      }
    });
    if (!stop) {
      ASSERT_TRUE(finish.ok()) << finish.ToString();
      ExpectExactly(dir.path(), submitted);
    } else {
      EXPECT_FALSE(fs::exists(dir.path() / "manifest.json"));
    }
    auto again = p.Submit([](const Writer& w) { return w.Encode(StandardSample(0).input); }, 1);
    EXPECT_EQ(again.status().code(), StatusCode::kAborted);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ParallelWriterConcurrencyTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "CommitThread" : "ProducerCommits");
                         });

}  // namespace
}  // namespace libshard::testing
