// ParallelWriter: the one parallel, ordered, bounded encode pipeline (pack, libshard.Writer and
// C++ generators): the bytes do not depend on the thread count, errors come back as Status, the
// bound holds.
#include "libshard/parallel_writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;

WriterOptions Reproducible() {
  WriterOptions o = FastOptions();
  o.shard_size = 8 * 4096;  // several shards
  o.shard_uid_seed = 22;
  return o;
}

std::unique_ptr<ParallelWriter> StartOrDie(const fs::path& dir, ParallelWriterOptions po,
                                           const WriterOptions& wo = Reproducible()) {
  auto w = Writer::Create(dir.string(), EagleSchema(), wo);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  auto p = ParallelWriter::Start(std::move(*w), std::move(po));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(*p) : nullptr;
}

// A job that builds StandardSample(i) itself and encodes it (the sample's bytes live in the job).
ParallelWriter::Job SampleJob(uint64_t i) {
  return [i](const Writer& w) {
    OwnedSample s = StandardSample(i);
    return w.Encode(s.input);
  };
}

std::vector<std::string> DatasetFiles(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("shard-", 0) == 0 || name.rfind("index", 0) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ParallelWriterTest, SameBytesAsOneThreadAppendingInOrder) {
  constexpr uint64_t kSamples = 40;
  TempDir serial;
  WriteStandard(serial.path(), kSamples, Reproducible());
  for (unsigned threads : {1u, 3u, 8u}) for (bool commit_thread : {true, false}) {
    TempDir dir;
    ParallelWriterOptions po;
    po.threads = threads;
    po.commit_thread = commit_thread;
    po.in_flight_bytes = 3 * 4096;  // a few samples at a time
    auto p = StartOrDie(dir.path(), po);
    ASSERT_TRUE(p);
    for (uint64_t i = 0; i < kSamples; ++i) ASSERT_TRUE(p->Submit(SampleJob(i), 4096).ok());
    auto sum = p->Finish();
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(sum->samples, kSamples);
    const std::vector<std::string> files = DatasetFiles(dir.path());
    ASSERT_EQ(files, DatasetFiles(serial.path()));
    ASSERT_GT(files.size(), 2u);
    for (const std::string& f : files)
      EXPECT_EQ(ReadFileToString(dir.path() / f), ReadFileToString(serial.path() / f))
          << f << " with " << threads << " threads, commit_thread " << commit_thread;
  }
}

TEST(ParallelWriterTest, SubmitOfASampleInputEncodesIt) {
  TempDir dir;
  auto p = StartOrDie(dir.path(), {});
  ASSERT_TRUE(p);
  std::vector<OwnedSample> held;
  for (uint64_t i = 0; i < 5; ++i) held.push_back(StandardSample(i));
  for (uint64_t i = 0; i < 5; ++i) {
    auto seq = p->Submit(held[i].input, 100);
    ASSERT_TRUE(seq.ok());
    EXPECT_EQ(*seq, i);
  }
  ASSERT_TRUE(p->Flush().ok());
  std::vector<uint64_t> released = p->TakeReleased();
  std::sort(released.begin(), released.end());
  EXPECT_EQ(released, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(p->committed(), 5u);
  ASSERT_TRUE(p->Finish().ok());
  auto ds = Dataset::Open(dir.path().string());
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ((*ds)->size(), 5u);
  for (uint64_t i = 0; i < 5; ++i) ExpectSampleEq(*(*ds)->Read(i), held[i]);
}

class ParallelWriterModes : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(CommitThread, ParallelWriterModes, ::testing::Bool());

TEST_P(ParallelWriterModes, TheFirstFailureInOrderStopsItAndNothingIsCommitted) {
  TempDir dir;
  std::vector<uint64_t> appended;
  ParallelWriterOptions po;
  po.threads = 4;
  po.commit_thread = GetParam();
  po.on_done = [&](const JobOutcome& out) {
    if (out.status.ok()) appended.push_back(out.seq);
    return Status::OK();
  };
  auto p = StartOrDie(dir.path(), po);
  ASSERT_TRUE(p);
  for (uint64_t i = 0; i < 20; ++i) {
    ParallelWriter::Job job = SampleJob(i);
    if (i == 7) job = [](const Writer&) -> Result<EncodedSample> {
      return Status::Corruption("source 7 is damaged");
    };
    if (!p->Submit(std::move(job), 10).ok()) break;
  }
  ExpectError(p->Flush(), StatusCode::kCorruption, {"source 7 is damaged"});
  ExpectError(p->Finish().status(), StatusCode::kCorruption, {"source 7"});
  ExpectError(p->Submit(SampleJob(99), 1).status(), StatusCode::kCorruption, {"source 7"});
  p.reset();
  EXPECT_EQ(appended, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(fs::exists(dir.path() / "manifest.json"));
  // The journal kept what was durable: Resume continues after the samples before the failure.
  auto w = Writer::Resume(dir.path().string(), Reproducible());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
}

TEST(ParallelWriterTest, AJobThatThrowsBecomesAStatus) {
  TempDir dir;
  auto p = StartOrDie(dir.path(), {});
  ASSERT_TRUE(p);
  ASSERT_TRUE(p->Submit([](const Writer&) -> Result<EncodedSample> {
                 throw std::runtime_error("boom");
               }, 1).ok());
  ExpectError(p->Flush(), StatusCode::kInternal, {"boom"});
  ASSERT_TRUE(p->Submit([](const Writer&) -> Result<EncodedSample> { throw std::bad_alloc(); }, 1)
                  .status()
                  .code() == StatusCode::kInternal);  // the first error stays
}

TEST_P(ParallelWriterModes, ReportedFailuresAreLeftOutInOrder) {
  TempDir dir;
  ParallelWriterOptions po;
  po.threads = 3;
  po.commit_thread = GetParam();
  po.on_job_error = ParallelWriterOptions::OnJobError::kReport;
  std::vector<uint64_t> skipped, index_of;
  po.on_done = [&](const JobOutcome& out) {
    if (!out.status.ok()) skipped.push_back(out.seq);
    else index_of.push_back(out.index);
    return Status::OK();  // skip and go on
  };
  auto p = StartOrDie(dir.path(), po);
  ASSERT_TRUE(p);
  for (uint64_t i = 0; i < 12; ++i) {
    ParallelWriter::Job job = SampleJob(i);
    if (i % 3 == 1) job = [](const Writer&) -> Result<EncodedSample> {
      return Status::InvalidArgument("bad");
    };
    ASSERT_TRUE(p->Submit(std::move(job), 1).ok());
  }
  auto sum = p->Finish();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(skipped, (std::vector<uint64_t>{1, 4, 7, 10}));
  EXPECT_EQ(index_of, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  auto ds = Dataset::Open(dir.path().string());
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ((*ds)->size(), 8u);
  uint64_t k = 0;
  for (uint64_t i = 0; i < 12; ++i)
    if (i % 3 != 1) ExpectSampleEq(*(*ds)->Read(k++), StandardSample(i));
}

TEST(ParallelWriterTest, AHookErrorStopsItWithThatError) {
  TempDir dir;
  ParallelWriterOptions po;
  po.on_done = [](const JobOutcome& out) {
    return out.seq == 2 ? Status::IoError("cannot write the report") : Status::OK();
  };
  auto p = StartOrDie(dir.path(), po);
  ASSERT_TRUE(p);
  for (uint64_t i = 0; i < 6; ++i)
    if (!p->Submit(SampleJob(i), 1).ok()) break;
  ExpectError(p->Flush(), StatusCode::kIoError, {"cannot write the report"});
}

TEST_P(ParallelWriterModes, BytesInFlightStayWithinTheBound) {
  TempDir dir;
  ParallelWriterOptions po;
  po.threads = 8;
  po.commit_thread = GetParam();
  po.in_flight_bytes = 3 * 4096;
  std::atomic<uint64_t> worst{0};
  ParallelWriter* raw = nullptr;
  auto p = StartOrDie(dir.path(), po);
  ASSERT_TRUE(p);
  raw = p.get();
  for (uint64_t i = 0; i < 60; ++i) {
    ASSERT_TRUE(p->Submit([i, raw, &worst](const Writer& w) {
                   const uint64_t n = raw->submitted() - raw->committed();
                   uint64_t seen = worst.load();
                   while (n > seen && !worst.compare_exchange_weak(seen, n)) {
                   }
                   OwnedSample s = StandardSample(i);
                   return w.Encode(s.input);
                 }, 4096).ok());
  }
  ASSERT_TRUE(p->Finish().ok());
  EXPECT_LE(worst.load(), 3u);  // 4 KiB each (every encoded sample fits one 4 KiB block)
  EXPECT_GE(worst.load(), 1u);
}

// Tiny samples reserve what they hold (their 4 KiB buffer), and at most max_inflight_samples are
// in flight: with the commit held up, Submit stops admitting at exactly the bound, whatever
// few bytes each sample has.
TEST(ParallelWriterTest, TinySamplesAreBoundedByCountAndByTheirBuffers) {
  struct Case {
    uint64_t max_samples, max_bytes, want;
  };
  for (const Case c : {Case{16, uint64_t{1} << 30, 16}, Case{4096, 10 * 4096, 10}}) {
    SCOPED_TRACE("max_inflight_samples " + std::to_string(c.max_samples) +
                 ", in_flight_bytes " + std::to_string(c.max_bytes));
    TempDir dir;
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    ParallelWriterOptions po;
    po.threads = 2;
    po.max_inflight_samples = c.max_samples;
    po.in_flight_bytes = c.max_bytes;
    po.on_done = [&](const JobOutcome&) {  // the commit waits until the test has looked
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return release; });
      return Status::OK();
    };
    auto p = StartOrDie(dir.path(), po);
    ASSERT_TRUE(p);
    constexpr uint64_t kJobs = 200;
    std::thread producer([&] {
      for (uint64_t i = 0; i < kJobs; ++i)
        if (!p->Submit(SampleJob(i), 1).ok()) return;  // 1 byte each: the bound must not care
    });
    for (int waited = 0; p->submitted() < c.want && waited < 10000; waited += 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // time to pass it, if it could
    EXPECT_EQ(p->submitted(), c.want);
    {
      std::lock_guard lock(mu);
      release = true;
    }
    cv.notify_all();
    producer.join();
    auto sum = p->Finish();
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(sum->samples, kJobs);
  }
}

TEST(ParallelWriterTest, StartRefusesAZeroSampleBound) {
  TempDir dir;
  auto w = Writer::Create(dir.path().string(), EagleSchema(), FastOptions());
  ASSERT_TRUE(w.ok());
  ParallelWriterOptions po;
  po.max_inflight_samples = 0;
  ExpectError(ParallelWriter::Start(std::move(*w), po).status(), StatusCode::kInvalidArgument,
              {"max_inflight_samples"});
}

TEST(ParallelWriterTest, ASampleLargerThanTheBoundGoesThroughAlone) {
  TempDir dir;
  ParallelWriterOptions po;
  po.in_flight_bytes = 10;
  auto p = StartOrDie(dir.path(), po);
  ASSERT_TRUE(p);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(p->Submit(SampleJob(i), 1 << 20).ok());
  auto sum = p->Finish();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->samples, 4u);
}

TEST(ParallelWriterTest, StartRefusesBadSettings) {
  TempDir dir;
  auto w = Writer::Create(dir.path().string(), EagleSchema(), FastOptions());
  ASSERT_TRUE(w.ok());
  ParallelWriterOptions po;
  po.threads = 5000;
  ExpectError(ParallelWriter::Start(std::move(*w), po).status(), StatusCode::kInvalidArgument,
              {"threads", "1..1024"});
}

// The bound's former C++ name still bounds: one sample at a time here, in order.
TEST(ParallelWriterTest, MaxInflightBytesIsStillTheBound) {
  TempDir dir;
  ParallelWriterOptions po;
  po.max_inflight_bytes = 1;
  po.threads = 4;
  std::atomic<int> running{0}, most{0};
  auto p = StartOrDie(dir.path(), po);
  ASSERT_TRUE(p);
  for (uint64_t i = 0; i < 12; ++i)
    ASSERT_TRUE(p->Submit(
                     [i, &running, &most](const Writer& w) {
                       const int now = ++running;
                       int seen = most.load();
                       while (now > seen && !most.compare_exchange_weak(seen, now)) {
                       }
                       std::this_thread::sleep_for(std::chrono::milliseconds(2));
                       auto e = w.Encode(StandardSample(i).input);
                       --running;
                       return e;
                     },
                     4096)
                    .ok());
  auto sum = p->Finish();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->samples, 12u);
  EXPECT_EQ(most.load(), 1);  // the bound admits one job at a time, as 1 byte always did
}

// 0 asks for the automatic values (writer_config.h: AutomaticThreads, AutomaticInFlightBytes),
// as the option table's None does; this was InvalidArgument when the bound was
// max_inflight_bytes, before the writer configuration had one in-flight bound.
TEST(ParallelWriterTest, ZeroThreadsAndBoundAreAutomatic) {
  TempDir dir;
  ParallelWriterOptions po;
  po.threads = 0;
  po.in_flight_bytes = 0;
  auto p = StartOrDie(dir.path(), po);
  ASSERT_TRUE(p);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(p->Submit(SampleJob(i), 1 << 20).ok());
  auto sum = p->Finish();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->samples, 4u);
}

TEST(ParallelWriterTest, StopWithoutFinishCommitsNothing) {
  TempDir dir;
  {
    auto p = StartOrDie(dir.path(), {});
    ASSERT_TRUE(p);
    for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(p->Submit(SampleJob(i), 1).ok());
    p->Stop();
    p->Stop();  // idempotent
    ExpectError(p->Submit(SampleJob(10), 1).status(), StatusCode::kAborted, {"stopped"});
  }
  EXPECT_FALSE(fs::exists(dir.path() / "manifest.json"));
}

}  // namespace
}  // namespace libshard::testing
