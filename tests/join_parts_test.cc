// JoinParts (libshard/merge.h, FORMAT.md §7.1): the multi-rank join protocol in the library:
// nothing visible until every rank finished, idempotent, a key in two parts refused, a killed
// rank or joiner never leaves a half dataset, a dead holder's lock never blocks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "format_test_helpers.h"
#include "io/file_lock.h"
#include "libshard/dataset.h"
#include "libshard/dataset_lock.h"
#include "libshard/merge.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;

// Rank `rank` of `world` writes StandardSamples of `seeds` into its part (committed when
// `finish`, else left with its journal, as a killed rank leaves it).
void WritePart(const fs::path& out, uint32_t rank, uint32_t world,
               const std::vector<uint64_t>& seeds, bool finish = true) {
  const std::string dir = PartDirectory(out.string(), rank, world);
  fs::create_directories(fs::path(dir).parent_path());
  WriterOptions o = FastOptions();
  o.journal_every_bytes = 1;  // every sample durable
  auto w = Writer::Create(dir, EagleSchema(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t seed : seeds) {
    OwnedSample s = StandardSample(seed);
    ASSERT_TRUE((*w)->Append(s.input).ok());
  }
  if (finish) ASSERT_TRUE((*w)->Finish().ok());
}

bool HasManifest(const fs::path& out) { return fs::exists(out / "manifest.json"); }

void ExpectJoinedInKeyOrder(const fs::path& out, const std::vector<uint64_t>& seeds_in_order) {
  auto ds = Dataset::Open(out.string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->size(), seeds_in_order.size());
  for (uint64_t i = 0; i < seeds_in_order.size(); ++i)
    ExpectSampleEq(*(*ds)->Read(i), StandardSample(seeds_in_order[i]));
}

TEST(JoinPartsTest, PartDirectoryIsTheLayoutOfFormatSection7_1) {
  EXPECT_EQ(PartDirectory("/d/out", 3, 12), "/d/out/parts/rank-00003-of-00012");
  ExpectError(MarkPartEmpty("/nonexistent", 2, 2), StatusCode::kInvalidArgument, {"rank 2"});
  ExpectError(JoinParts("/nonexistent", 0).status(), StatusCode::kInvalidArgument,
              {"world size 0"});
}

TEST(JoinPartsTest, TheLastRankToFinishJoinsOrderedByKey) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  WritePart(out, 1, 3, {1, 3, 5});
  auto r = JoinParts(out.string(), 3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->joined);
  EXPECT_EQ(r->ranks_finished, 1u);
  EXPECT_FALSE(HasManifest(out));
  ASSERT_TRUE(MarkPartEmpty(out.string(), 2, 3).ok());  // rank 2 had no sample
  EXPECT_TRUE(fs::exists(out / "parts" / "rank-00002-of-00003.empty"));
  EXPECT_FALSE(JoinParts(out.string(), 3)->joined);
  WritePart(out, 0, 3, {0, 2, 4});
  r = JoinParts(out.string(), 3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->joined);
  EXPECT_FALSE(r->already_joined);
  EXPECT_EQ(r->parts_joined, 2u);
  ExpectJoinedInKeyOrder(out, {0, 1, 2, 3, 4, 5});
  const std::string index = ReadFileToString(out / "index.lsi");
  // Idempotent: the other ranks' calls find the join done and write nothing.
  r = JoinParts(out.string(), 3);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->joined && r->already_joined);
  EXPECT_EQ(ReadFileToString(out / "index.lsi"), index);
  // Hard links: the joined shards are the parts' files.
  EXPECT_EQ(fs::hard_link_count(out / "shard-00000.lss"), 2u);
}

TEST(JoinPartsTest, ARankThatNeverFinishesKeepsTheJoinInvisible) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  WritePart(out, 0, 2, {0, 2});
  WritePart(out, 1, 2, {1, 3}, /*finish=*/false);  // killed: a journal, no manifest
  auto r = JoinParts(out.string(), 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->joined);
  EXPECT_EQ(r->ranks_finished, 1u);
  EXPECT_FALSE(HasManifest(out));
  // Marked empty but holding a journal (a rank that later wrote and was killed): not finished.
  ASSERT_TRUE(MarkPartEmpty(out.string(), 1, 2).ok());
  EXPECT_FALSE(JoinParts(out.string(), 2)->joined);
  EXPECT_FALSE(HasManifest(out));
  // The rank is rerun and finishes: the join happens.
  ASSERT_TRUE(MarkPartEmpty(out.string(), 1, 2, /*empty=*/false).ok());
  {
    auto w = Writer::Resume(PartDirectory(out.string(), 1, 2), FastOptions());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Finish().ok());
  }
  ASSERT_TRUE(JoinParts(out.string(), 2)->joined);
  ExpectJoinedInKeyOrder(out, {0, 1, 2, 3});
}

TEST(JoinPartsTest, AKeyInTwoPartsIsRefusedAndNothingBecomesVisible) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  WritePart(out, 0, 2, {0, 1, 2});
  WritePart(out, 1, 2, {2, 3});
  auto r = JoinParts(out.string(), 2);
  ExpectError(r.status(), StatusCode::kInvalidArgument,
              {"dump/data_2.pt", "rank-00000-of-00002", "rank-00001-of-00002", "once"});
  EXPECT_FALSE(HasManifest(out));
  EXPECT_FALSE(Dataset::Open(out.string()).ok());
}

TEST(JoinPartsTest, AStaleLockOfAKilledJoinerDoesNotBlock) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  WritePart(out, 0, 2, {0});
  WritePart(out, 1, 2, {1});
  // A joiner that took the join lock and the dataset lock, then was killed (kill -9).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto a = io::FileLock::TryAcquire((out / "parts" / ".join.lock").string());
    auto b = DatasetLock::Acquire(out.string());
    if (!a.ok() || !b.ok()) _exit(3);
    std::ofstream(out / "ready").put('1');
    for (;;) pause();
  }
  while (!fs::exists(out / "ready")) usleep(1000);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  // Both lock files are left behind (with the dead holder's note); neither blocks.
  EXPECT_TRUE(fs::exists(out / "parts" / ".join.lock"));
  auto r = JoinParts(out.string(), 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->joined);
  ExpectJoinedInKeyOrder(out, {0, 1});
}

TEST(JoinPartsTest, AKilledJoinerIsFinishedByTheNextCall) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  WritePart(out, 0, 2, {0, 2});
  WritePart(out, 1, 2, {1, 3});
  ASSERT_TRUE(JoinParts(out.string(), 2)->joined);
  // Killed after the commit, before the stamp: the join is redone, same dataset.
  fs::remove(out / "parts" / ".joined-of-00002");
  auto r = JoinParts(out.string(), 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->joined && !r->already_joined);
  ExpectJoinedInKeyOrder(out, {0, 1, 2, 3});
  // Killed mid-merge: shards linked, no manifest (nothing visible); the next call completes it.
  fs::remove(out / "manifest.json");
  EXPECT_FALSE(Dataset::Open(out.string()).ok());
  ASSERT_TRUE(JoinParts(out.string(), 2)->joined);
  ExpectJoinedInKeyOrder(out, {0, 1, 2, 3});
}

TEST(JoinPartsTest, AJoinOfOlderPartsIsReplaced) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  WritePart(out, 0, 2, {0});
  WritePart(out, 1, 2, {1});
  ASSERT_TRUE(JoinParts(out.string(), 2)->joined);
  {  // rank 0 is rerun and appends to its part
    auto w = Writer::OpenForAppend(PartDirectory(out.string(), 0, 2), FastOptions());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    OwnedSample s = StandardSample(4);
    ASSERT_TRUE((*w)->Append(s.input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto r = JoinParts(out.string(), 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->joined && !r->already_joined);
  ExpectJoinedInKeyOrder(out, {0, 1, 4});
}

TEST(JoinPartsTest, OnlyEmptyRanksJoinNothing) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  ASSERT_TRUE(MarkPartEmpty(out.string(), 0, 2).ok());
  ASSERT_TRUE(MarkPartEmpty(out.string(), 1, 2).ok());
  auto r = JoinParts(out.string(), 2);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->joined);
  EXPECT_EQ(r->ranks_finished, 2u);
  EXPECT_FALSE(HasManifest(out));
}

}  // namespace
}  // namespace libshard::testing
