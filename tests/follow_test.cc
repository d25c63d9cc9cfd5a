// Follow mode (FORMAT.md §6.1, ORDER.md §7): DatasetFollower on a write in progress - what it
// reads and what it refuses (a torn tail, a lying count, a shard shorter than its journal says, a
// journal replaced or rewritten, a bad sample in a good entry, damaged bytes) - and the Loader
// following a Writer that writes on another thread (exact once, the slow-writer warning on a fake
// clock, the epoch ending at the commit). Also run under TSan (scripts/test.sh).
#include "libshard/follow.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/journal.h"
#include "format_test_helpers.h"
#include "libshard/loader.h"
#include "libshard/parallel_writer.h"
#include "libshard/writer.h"
#include "loader/follow_loader.h"
#include "testutil/loader_hooks.h"
#include "testutil/testutil.h"
#include "writer/commit.h"

namespace libshard {
namespace {

namespace fs = std::filesystem;
using testing::EagleSchema;
using testing::StandardSample;

WriterOptions InProgressOptions() {
  WriterOptions o = testing::FastOptions();
  o.shard_size = 64 << 10;
  o.commit_interval_seconds = 0;  // the tests checkpoint themselves
  return o;
}

// A write in progress: `n` samples appended and journaled; the Writer stays open.
std::unique_ptr<Writer> StartWrite(const fs::path& dir, uint64_t n, uint64_t first = 0) {
  auto w = Writer::Create(dir.string(), EagleSchema(), InProgressOptions());
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  for (uint64_t i = first; i < first + n; ++i) {
    testing::OwnedSample s = StandardSample(i);
    EXPECT_TRUE((*w)->Append(s.input).ok());
  }
  EXPECT_TRUE((*w)->Checkpoint().ok());
  return std::move(w).value();
}

std::unique_ptr<DatasetFollower> Follow(const fs::path& dir) {
  auto f = DatasetFollower::Open(dir.string());
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::move(f).value() : nullptr;
}

fs::path Journal(const fs::path& dir) { return dir / format::kJournalName; }

// Appends an entry (FORMAT.md §6 framing) with a correct checksum.
void AppendEntry(const fs::path& journal, uint32_t kind, const std::string& payload) {
  std::string e;
  format::ByteWriter w(&e);
  w.U32(0x454A534C);
  w.U32(kind);
  w.U64(payload.size());
  w.Bytes(payload);
  w.U64(format::Xxh3(e.data(), e.size()));
  const std::string old = testing::ReadFileToString(journal);
  testing::WriteStringToFile(journal, old + e);
}

TEST(DatasetFollowerTest, ReadsJournaledSamplesAndTheirBytes) {
  testing::TempDir dir;
  auto w = StartWrite(dir / "ds", 7);
  auto f = Follow(dir / "ds");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->progress().samples, 7u);
  EXPECT_FALSE(f->progress().complete);
  EXPECT_EQ(f->progress().writers, 1u);
  auto snap = f->Snapshot();
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  ASSERT_EQ((*snap)->size(), 7u);
  for (uint64_t i = 0; i < 7; ++i) {
    auto s = (*snap)->Read(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    testing::ExpectSampleEq(*s, StandardSample(i));
  }
  // More samples, then the commit: the follower sees them, then the end.
  for (uint64_t i = 7; i < 12; ++i) ASSERT_TRUE(w->Append(StandardSample(i).input).ok());
  ASSERT_TRUE(f->Poll().ok());
  EXPECT_EQ(f->progress().samples, 7u) << "nothing journaled yet";
  ASSERT_TRUE(w->Checkpoint().ok());
  ASSERT_TRUE(f->Poll().ok());
  EXPECT_EQ(f->progress().samples, 12u);
  ASSERT_TRUE(w->Append(StandardSample(12).input).ok());
  ASSERT_TRUE(w->Finish().ok());
  ASSERT_TRUE(f->Poll().ok());
  EXPECT_TRUE(f->progress().complete);
  EXPECT_EQ(f->progress().samples, 13u);
  EXPECT_EQ(f->progress().waiting_for, "");
  auto last = f->Snapshot();
  ASSERT_TRUE(last.ok());
  auto s12 = (*last)->Read(12);
  ASSERT_TRUE(s12.ok()) << s12.status().ToString();
  testing::ExpectSampleEq(*s12, StandardSample(12));
  // The old snapshot still reads (its shard, renamed at the commit, is held open).
  auto s3 = (*snap)->Read(3);
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
}

TEST(DatasetFollowerTest, WaitsForAWriterThatHasNotStarted) {
  testing::TempDir dir;
  auto f = Follow(dir / "later");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->progress().writers, 0u);
  EXPECT_NE(f->progress().waiting_for.find("has not started"), std::string::npos);
  EXPECT_EQ(f->Snapshot().status().code(), StatusCode::kNotFound);
  auto w = StartWrite(dir / "later", 3);
  ASSERT_TRUE(f->Poll().ok());
  EXPECT_EQ(f->progress().samples, 3u);
}

TEST(DatasetFollowerTest, ATornTailIsWaitedForNotServed) {
  testing::TempDir dir;
  auto w = StartWrite(dir / "ds", 4);
  const std::string journal = testing::ReadFileToString(Journal(dir / "ds"));
  // Half of a copy of the whole journal's last bytes: an entry being written.
  testing::WriteStringToFile(Journal(dir / "ds"), journal + journal.substr(0, 40));
  auto f = Follow(dir / "ds");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->progress().samples, 4u);
  EXPECT_NE(f->progress().waiting_for.find("incomplete or damaged entry"), std::string::npos)
      << f->progress().waiting_for;
  ASSERT_TRUE(f->Poll().ok());
  EXPECT_EQ(f->progress().samples, 4u);
}

TEST(DatasetFollowerTest, ALyingCountAllocatesNothingAndIsWaitedFor) {
  testing::TempDir dir;
  auto w = StartWrite(dir / "ds", 2);
  std::string payload;
  format::ByteWriter p(&payload);
  p.U64(2);           // first: the next sample
  p.U32(0xFFFFFFFF);  // count: far more than the entry holds
  p.U32(0);
  payload += std::string(64, '\0');
  AppendEntry(Journal(dir / "ds"), 2, payload);
  // An entry that claims more payload than any follower reads.
  std::string huge;
  format::ByteWriter h(&huge);
  h.U32(0x454A534C);
  h.U32(2);
  h.U64(uint64_t{1} << 62);
  auto f = Follow(dir / "ds");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->progress().samples, 2u);
  auto w2 = StartWrite(dir / "ds2", 1);
  testing::WriteStringToFile(Journal(dir / "ds2"),
                             testing::ReadFileToString(Journal(dir / "ds2")) + huge);
  auto f2 = Follow(dir / "ds2");
  ASSERT_NE(f2, nullptr);
  EXPECT_EQ(f2->progress().samples, 1u);
}

TEST(DatasetFollowerTest, AShardShorterThanItsJournalSaysIsCorruption) {
  testing::TempDir dir;
  auto w = StartWrite(dir / "ds", 5);
  const fs::path shard = dir / "ds" / "shard-00000.lss.tmp";
  testing::TruncateFile(shard, 4096 + 4096);
  auto f = DatasetFollower::Open((dir / "ds").string());
  ASSERT_FALSE(f.ok());
  testing::ExpectError(f.status(), StatusCode::kCorruption,
                       {"shard-00000.lss.tmp", "shorter than the journal says"});
}

TEST(DatasetFollowerTest, ABadSampleInAGoodEntryIsCorruption) {
  testing::TempDir dir;
  auto w = StartWrite(dir / "ds", 1);
  format::IndexSample s;
  {
    auto f = Follow(dir / "ds");
    ASSERT_NE(f, nullptr);
    auto snap = f->Snapshot();
    ASSERT_TRUE(snap.ok());
    auto entry = internal::SampleEntryFromDataset(**snap, 0);
    ASSERT_TRUE(entry.ok());
    s = *entry;
  }
  s.record.offset += 100;  // not aligned
  const std::string entry =
      format::EncodeJournalSamples(EagleSchema(), 1, std::span<const format::IndexSample>(&s, 1),
                                   {}, true, /*block_tables=*/true);
  testing::WriteStringToFile(Journal(dir / "ds"),
                             testing::ReadFileToString(Journal(dir / "ds")) + entry);
  auto f = DatasetFollower::Open((dir / "ds").string());
  ASSERT_FALSE(f.ok());
  testing::ExpectError(f.status(), StatusCode::kCorruption, {"sample 1", "offset", "damaged"});
}

TEST(DatasetFollowerTest, AJournalReplacedOrRewrittenEndsTheStream) {
  testing::TempDir dir;
  auto w = StartWrite(dir / "ds", 3);
  auto f = Follow(dir / "ds");
  ASSERT_NE(f, nullptr);
  // Rewritten in place: shorter than what was read.
  const std::string journal = testing::ReadFileToString(Journal(dir / "ds"));
  testing::WriteStringToFile(Journal(dir / "ds"), journal.substr(0, journal.size() - 10));
  Status st = f->Poll();
  testing::ExpectError(st, StatusCode::kCorruption, {"_journal.lsj", "shorter than"});
  // Replaced by another file.
  auto g = Follow(dir / "ds2");
  auto w2 = StartWrite(dir / "ds2", 2);
  ASSERT_TRUE(g->Poll().ok());
  fs::remove(Journal(dir / "ds2"));
  testing::WriteStringToFile(Journal(dir / "ds2"), testing::ReadFileToString(Journal(dir / "ds")));
  testing::ExpectError(g->Poll(), StatusCode::kCorruption, {"replaced by another file"});
}

TEST(CommitIntervalTest, CheckpointIfDueJournalsASampleThatWaitedTheInterval) {
  testing::TempDir dir;
  WriterOptions o = InProgressOptions();
  // Long enough that a loaded machine cannot stall past it between the Append and the checks
  // that follow it (at 0.05 s a busy CI runner did: the sample was already journaled).
  o.commit_interval_seconds = 1.0;
  auto w = Writer::Create((dir / "ds").string(), EagleSchema(), o);
  ASSERT_TRUE(w.ok());
  auto due = (*w)->CheckpointIfDue();
  ASSERT_TRUE(due.ok());
  EXPECT_TRUE(std::isinf(*due)) << "nothing waits";
  ASSERT_TRUE((*w)->Append(StandardSample(0).input).ok());
  due = (*w)->CheckpointIfDue();
  ASSERT_TRUE(due.ok());
  EXPECT_GT(*due, 0);
  EXPECT_LE(*due, 1.0);
  auto f = Follow(dir / "ds");
  EXPECT_EQ(f->progress().samples, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  due = (*w)->CheckpointIfDue();
  ASSERT_TRUE(due.ok());
  EXPECT_TRUE(std::isinf(*due));
  ASSERT_TRUE(f->Poll().ok());
  EXPECT_EQ(f->progress().samples, 1u);
  // Appends after the interval journal on their own.
  ASSERT_TRUE((*w)->Append(StandardSample(1).input).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE((*w)->Append(StandardSample(2).input).ok());
  ASSERT_TRUE(f->Poll().ok());
  EXPECT_EQ(f->progress().samples, 3u);
}

TEST(CommitIntervalTest, AGeneratorThatPausesHasItsSamplesJournaledByTheCommitThread) {
  testing::TempDir dir;
  WriterOptions o = InProgressOptions();
  o.commit_interval_seconds = 0.05;
  auto w = Writer::Create((dir / "ds").string(), EagleSchema(), o);
  ASSERT_TRUE(w.ok());
  auto p = ParallelWriter::Start(std::move(w).value(), ParallelWriterOptions{});
  ASSERT_TRUE(p.ok());
  testing::OwnedSample s = StandardSample(0);
  ASSERT_TRUE((*p)->Submit(s.input, 4096).ok());
  // No Flush, no further Submit: the commit thread journals it once it waited the interval.
  auto f = Follow(dir / "ds");
  const auto start = std::chrono::steady_clock::now();
  while (f->progress().samples == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(f->Poll().ok());
  }
  EXPECT_EQ(f->progress().samples, 1u);
  ASSERT_TRUE((*p)->Finish().ok());
}

LoaderOptions FollowOptions() {
  LoaderOptions o;
  o.memory_budget = 4 << 20;
  o.queue_depth = 8;
  o.pin_memory = PinMemory::kOff;
  o.order = FollowOrder{.shuffle_window = 8};
  o.slow_wait_warning_seconds = 60;
  return o;
}

// StandardSample(i)'s metadata "turn" is i: which sample a served one is, by what it carries.
int64_t Turn(const Sample& s) {
  for (const MetaEntry& e : s.metadata())
    if (e.key == "turn") return std::get<int64_t>(e.value);
  return -1;
}

// The samples of the rest of the epoch.
std::vector<int64_t> Drain(Loader& loader, uint64_t* steps = nullptr) {
  std::vector<int64_t> seen;
  while (true) {
    auto next = loader.Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    if (steps) ++*steps;
    for (const Sample& s : (*next)->samples) seen.push_back(Turn(s));
  }
  return seen;
}

TEST(FollowLoaderTest, FollowsAWriterOnAnotherThreadExactlyOnceAcrossRanks) {
  testing::TempDir dir;
  const uint64_t n = 60;
  std::thread writer([&] {
    auto w = Writer::Create((dir / "ds").string(), EagleSchema(), InProgressOptions());
    ASSERT_TRUE(w.ok());
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_TRUE((*w)->Append(StandardSample(i).input).ok());
      if (i % 7 == 0) {
        ASSERT_TRUE((*w)->Checkpoint().ok());
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    ASSERT_TRUE((*w)->Finish().ok());
  });
  std::map<int64_t, int> count;
  std::vector<std::thread> ranks;
  std::mutex mu;
  std::vector<uint64_t> steps(3, 0);
  for (uint32_t r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      LoaderOptions o = FollowOptions();
      o.rank = r;
      o.world_size = 3;
      o.batch_size = 2;
      o.drop_last = true;
      auto loader = Loader::Follow((dir / "ds").string(), o);
      ASSERT_TRUE(loader.ok()) << loader.status().ToString();
      std::vector<int64_t> seen = Drain(**loader, &steps[r]);
      std::lock_guard<std::mutex> lock(mu);
      for (int64_t i : seen) ++count[i];
    });
  }
  writer.join();
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(steps[0], 10u);  // 30 units of 2, over 3 ranks
  EXPECT_EQ(steps[1], 10u);
  EXPECT_EQ(steps[2], 10u);
  ASSERT_EQ(count.size(), n);
  for (const auto& [i, c] : count) EXPECT_EQ(c, 1) << "sample " << i;
}

TEST(FollowLoaderTest, AStalledWriterGetsAWarningAndItsResumeContinuesTheStream) {
  testing::TempDir dir;
  const fs::path ds = dir / "ds";
  auto w = StartWrite(ds, 5);
  auto clock = std::make_shared<testing::FakeClock>();
  testing::RecordingSink sink;
  LoaderOptions o = FollowOptions();
  o.slow_wait_warning_seconds = 5;
  auto loader = FollowLoader::Make(ds.string(), o, {}, {clock, sink.AsSink()});
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  // The writer dies (its process gone: no Finish), then a new one resumes the write.
  std::thread resumer([&] {
    if (!sink.WaitForLine("waiting for new samples", std::chrono::seconds(120))) return;
    w.reset();
    auto r = Writer::Resume(ds.string(), InProgressOptions());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (uint64_t i = 5; i < 9; ++i) ASSERT_TRUE((*r)->Append(StandardSample(i).input).ok());
    ASSERT_TRUE((*r)->Finish().ok());
  });
  std::vector<int64_t> seen = Drain(**loader);
  resumer.join();
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  const std::vector<std::string> lines = sink.Matching("waiting for new samples");
  ASSERT_GE(lines.size(), 1u) << testing::Join(sink.lines());
  for (const char* want : {ds.c_str(), "nothing new committed for 5 s", "5 samples committed",
                           "start it again on the same directory"})
    EXPECT_NE(lines[0].find(want), std::string::npos) << want << " in: " << lines[0];
  EXPECT_EQ((*loader)->state().position, 9u);
  ASSERT_EQ((*loader)->state().kind(), OrderKind::kFollow);
  EXPECT_EQ((*loader)->state().get<FollowCursor>()->window, 8u);
}

TEST(FollowLoaderTest, DamagedBytesOfAShardBeingWrittenAreNeverServed) {
  testing::TempDir dir;
  const fs::path ds = dir / "ds";
  auto w = StartWrite(ds, 3);
  testing::FlipByte(ds / "shard-00000.lss.tmp", 4096 + 10);  // inside sample 0
  LoaderOptions o = FollowOptions();
  o.order.get<FollowOrder>()->shuffle = false;
  auto loader = Loader::Follow(ds.string(), o);
  ASSERT_TRUE(loader.ok());
  auto next = (*loader)->Next();
  ASSERT_FALSE(next.ok());
  testing::ExpectError(next.status(), StatusCode::kCorruption,
                       {"shard-00000.lss.tmp", "sample 0", "checksum mismatch"});
  // The step counts as consumed (as for any loader): the next one is served.
  auto after = (*loader)->Next();
  ASSERT_TRUE(after.ok() && after->has_value()) << after.status().ToString();
  EXPECT_EQ(Turn((*after)->samples[0]), 1);
}

TEST(FollowLoaderTest, ResumeInsideTheFollowEpochEqualsTheUninterruptedRun) {
  testing::TempDir dir;
  const fs::path ds = dir / "ds";
  auto w = StartWrite(ds, 23);
  LoaderOptions o = FollowOptions();
  o.batch_size = 3;
  o.order.get<FollowOrder>()->seed = 11;
  // Interrupted while the writer writes.
  auto first = Loader::Follow(ds.string(), o);
  ASSERT_TRUE(first.ok());
  std::vector<int64_t> before;
  for (int k = 0; k < 4; ++k) {
    auto next = (*first)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    for (const Sample& s : (*next)->samples) before.push_back(Turn(s));
  }
  const LoaderState saved = (*first)->state();
  EXPECT_EQ(saved.position, 12u);
  ASSERT_EQ(saved.kind(), OrderKind::kFollow);
  EXPECT_EQ(saved.get<FollowCursor>()->window, 8u);
  first->reset();
  for (uint64_t i = 23; i < 40; ++i) ASSERT_TRUE(w->Append(StandardSample(i).input).ok());
  ASSERT_TRUE(w->Finish().ok());
  LoaderOptions r = o;
  r.resume = saved;
  auto resumed = Loader::Follow(ds.string(), r);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  std::vector<int64_t> after = Drain(**resumed);
  before.insert(before.end(), after.begin(), after.end());
  // The uninterrupted follow epoch, on the complete dataset.
  auto whole = Loader::Follow(ds.string(), o);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(before, Drain(**whole));
  EXPECT_EQ((*whole)->batches_per_epoch(), 14u);
  EXPECT_TRUE((*whole)->batches_per_epoch_known());
}

}  // namespace
}  // namespace libshard
