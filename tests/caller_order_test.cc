// Tests for a Loader given its order by the caller (CallerOrder,
// Loader::SetEpochSteps; docs/ORDER.md §6): exactly the given steps in the given order, with the
// bytes Dataset::Read returns, collated; no striping over ranks; epochs; resume equality and a
// resume refused for another order; what is validated; memory bounded.
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/writer.h"
#include "format_test_helpers.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<Dataset> WriteDataset(const fs::path& dir, uint64_t n) {
  WriterOptions o = testing::FastOptions();
  o.shard_size = 256 << 10;
  auto w = Writer::Create(dir.string(), testing::EagleSchema(), o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  for (uint64_t i = 0; i < n; ++i) {
    testing::OwnedSample s = testing::MakeEagleSample(i, 5 + (i * 37) % 131, 256);
    EXPECT_TRUE((*w)->Append(s.input).ok());
  }
  EXPECT_TRUE((*w)->Finish().ok());
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

LoaderOptions CallerOptions() {
  LoaderOptions o;
  o.order = CallerOrder{};
  o.memory_budget = 2 << 20;
  o.queue_depth = 8;
  o.read_size = 16 << 10;
  o.pin_memory = PinMemory::kOff;
  return o;
}

// A seeded "sampler": a permutation of [0, n) per epoch, cut into batches of `b`.
EpochSteps SamplerSteps(uint64_t n, uint64_t epoch, uint64_t b, uint64_t rank = 0,
                        uint64_t world = 1) {
  std::vector<uint64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(1234 + epoch);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<uint64_t> mine;  // DistributedSampler-like: rank r takes r, r + W, ...
  for (uint64_t i = rank; i < n; i += world) mine.push_back(perm[i]);
  std::vector<std::vector<uint64_t>> batches;
  for (uint64_t i = 0; i < mine.size(); i += b)
    batches.emplace_back(mine.begin() + i, mine.begin() + std::min<uint64_t>(i + b, mine.size()));
  return EpochSteps::Batches(batches);
}

// Every step of the epoch: its sample indices, checking each sample's bytes against Read.
std::vector<std::vector<uint64_t>> DrainSteps(Loader& loader, const Dataset& ds,
                                              uint64_t max_steps = UINT64_MAX) {
  std::vector<std::vector<uint64_t>> steps;
  for (uint64_t k = 0; k < max_steps; ++k) {
    auto next = loader.Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    std::vector<uint64_t> step;
    for (const Sample& s : (*next)->samples) {
      step.push_back(s.index());
      auto want = ds.Read(s.index());
      EXPECT_TRUE(want.ok());
      for (const TensorView& w : want->tensors()) {
        const TensorView* g = s.Find(w.name);
        EXPECT_NE(g, nullptr);
        if (g == nullptr) continue;
        EXPECT_EQ(g->shape, w.shape);
        EXPECT_EQ(std::memcmp(g->data, w.data, w.nbytes), 0) << "sample " << s.index();
      }
    }
    steps.push_back(step);
  }
  return steps;
}

std::vector<std::vector<uint64_t>> StepsOf(const EpochSteps& e, uint64_t from = 0) {
  std::vector<std::vector<uint64_t>> out;
  for (uint64_t k = from; k < e.steps(); ++k)
    out.emplace_back(e.samples.begin() + e.bounds[k], e.samples.begin() + e.bounds[k + 1]);
  return out;
}

TEST(CallerOrderTest, DeliversTheGivenStepsInOrderOverEpochs) {
  testing::TempDir dir;
  const uint64_t n = 53;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  auto loader = Loader::Create(ds, CallerOptions());
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    EpochSteps steps = SamplerSteps(n, epoch, 4);
    const auto want = StepsOf(steps);
    ASSERT_TRUE((*loader)->SetEpochSteps(epoch, steps).ok());
    EXPECT_EQ((*loader)->batches_per_epoch(), want.size());
    EXPECT_EQ(DrainSteps(**loader, *ds), want) << "epoch " << epoch;
    const LoaderState st = (*loader)->state();
    EXPECT_EQ(st.epoch, epoch);
    EXPECT_EQ(st.order_version(), kOrderCaller);
    EXPECT_EQ(st.position, want.size());
    ASSERT_EQ(st.kind(), OrderKind::kCaller);
    EXPECT_EQ(st.get<CallerCursor>()->steps_digest, EpochStepsDigest(steps));
  }
}

TEST(CallerOrderTest, SinglesRepeatsAndCollate) {
  testing::TempDir dir;
  const uint64_t n = 20;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  // A sampler with replacement: repeats are delivered as given.
  const std::vector<uint64_t> order = {3, 3, 19, 0, 7, 3, 12};
  {
    auto loader = Loader::Create(ds, CallerOptions());
    ASSERT_TRUE(loader.ok());
    ASSERT_TRUE((*loader)->SetEpochSteps(0, EpochSteps::Singles(order)).ok());
    std::vector<uint64_t> got;
    for (const auto& step : DrainSteps(**loader, *ds)) got.insert(got.end(), step.begin(), step.end());
    EXPECT_EQ(got, order);
  }
  {
    LoaderOptions o = CallerOptions();
    o.collate = Collate::kPad;
    auto loader = Loader::Create(ds, o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    EXPECT_EQ((*loader)->options().bucket_window, 0u);  // "auto" is off with the caller's order
    EpochSteps steps = EpochSteps::Batches({{5, 1, 9}, {2}, {19, 18}});
    ASSERT_TRUE((*loader)->SetEpochSteps(0, steps).ok());
    std::vector<std::vector<uint64_t>> got;
    while (true) {
      auto next = (*loader)->Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      ASSERT_TRUE((*next)->collated.has_value());
      got.push_back((*next)->collated->indices);
    }
    EXPECT_EQ(got, StepsOf(steps));
  }
}

// A DistributedSampler has split the epoch: each rank's loader streams its own steps as they
// are (no second split), and the ranks together cover the epoch exactly once.
TEST(CallerOrderTest, RanksAreNotSplitAgain) {
  testing::TempDir dir;
  const uint64_t n = 41;
  const uint64_t world = 3;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  std::multiset<uint64_t> all;
  for (uint64_t r = 0; r < world; ++r) {
    LoaderOptions o = CallerOptions();
    o.rank = static_cast<uint32_t>(r);
    o.world_size = static_cast<uint32_t>(world);
    auto loader = Loader::Create(ds, o);
    ASSERT_TRUE(loader.ok());
    EpochSteps steps = SamplerSteps(n, 2, 3, r, world);
    ASSERT_TRUE((*loader)->SetEpochSteps(2, steps).ok());
    const auto got = DrainSteps(**loader, *ds);
    EXPECT_EQ(got, StepsOf(steps)) << "rank " << r;
    for (const auto& s : got) all.insert(s.begin(), s.end());
  }
  EXPECT_EQ(all.size(), n);
  EXPECT_EQ(std::set<uint64_t>(all.begin(), all.end()).size(), n);
}

TEST(CallerOrderTest, ResumeContinuesWithTheSameRemainingSteps) {
  testing::TempDir dir;
  const uint64_t n = 47;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  const EpochSteps steps = SamplerSteps(n, 5, 4);
  LoaderState saved;
  {
    auto loader = Loader::Create(ds, CallerOptions());
    ASSERT_TRUE(loader.ok());
    ASSERT_TRUE((*loader)->SetEpochSteps(5, steps).ok());
    ASSERT_EQ(DrainSteps(**loader, *ds, 4).size(), 4u);
    saved = (*loader)->state();
    EXPECT_EQ(saved.position, 4u);
  }
  LoaderOptions o = CallerOptions();
  o.resume = saved;
  auto resumed = Loader::Create(ds, o);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ((*resumed)->state().position, 4u);  // before the steps are given
  ASSERT_TRUE((*resumed)->SetEpochSteps(5, steps).ok());
  EXPECT_EQ(DrainSteps(**resumed, *ds), StepsOf(steps, 4));
  EXPECT_EQ((*resumed)->batches_per_epoch(), steps.steps());
  // The next epoch starts from its beginning.
  const EpochSteps next = SamplerSteps(n, 6, 4);
  ASSERT_TRUE((*resumed)->SetEpochSteps(6, next).ok());
  EXPECT_EQ(DrainSteps(**resumed, *ds), StepsOf(next));
}

TEST(CallerOrderTest, ResumeWithAnotherOrderIsRefused) {
  testing::TempDir dir;
  const uint64_t n = 30;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  LoaderState saved;
  {
    auto loader = Loader::Create(ds, CallerOptions());
    ASSERT_TRUE(loader.ok());
    ASSERT_TRUE((*loader)->SetEpochSteps(1, SamplerSteps(n, 1, 2)).ok());
    DrainSteps(**loader, *ds, 3);
    saved = (*loader)->state();
  }
  LoaderOptions o = CallerOptions();
  o.resume = saved;
  auto resumed = Loader::Create(ds, o);
  ASSERT_TRUE(resumed.ok());
  // A sampler that did not reproduce the epoch (another seed): the steps left are unknown.
  const Status st = (*resumed)->SetEpochSteps(1, SamplerSteps(n, 99, 2));
  testing::ExpectError(st, StatusCode::kInvalidArgument, {"resume", "another order", "digest"});
  // The state of the loader's own order cannot resume a caller-given one, nor the reverse.
  LoaderOptions own;
  own.resume = saved;
  testing::ExpectError(Loader::Create(ds, own).status(), StatusCode::kInvalidArgument,
                       {"sampler"});
  LoaderState planned;
  planned.cursor = GlobalCursor{.version = 2};
  LoaderOptions mismatch = CallerOptions();
  mismatch.resume = planned;
  testing::ExpectError(Loader::Create(ds, mismatch).status(), StatusCode::kInvalidArgument,
                       {"own order"});
}

TEST(CallerOrderTest, BadStepsAreRefusedAndChangeNothing) {
  testing::TempDir dir;
  const uint64_t n = 10;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  auto loader = Loader::Create(ds, CallerOptions());
  ASSERT_TRUE(loader.ok());
  testing::ExpectError((*loader)->Next().status(), StatusCode::kInvalidArgument,
                       {"SetEpochSteps"});
  testing::ExpectError((*loader)->SetEpoch(1), StatusCode::kInvalidArgument, {"SetEpochSteps"});
  testing::ExpectError((*loader)->SetEpochSteps(0, EpochSteps::Batches({{1, 2}, {3, 10}})),
                       StatusCode::kInvalidArgument,
                       {"step 1", "sample 10", ds->path(), "10 samples"});
  EpochSteps empty_step;
  empty_step.samples = {1, 2};
  empty_step.bounds = {0, 2, 2};
  testing::ExpectError((*loader)->SetEpochSteps(0, empty_step), StatusCode::kInvalidArgument,
                       {"step 1", "empty"});
  EpochSteps bad_bounds;
  bad_bounds.samples = {1, 2};
  bad_bounds.bounds = {0, 1};
  testing::ExpectError((*loader)->SetEpochSteps(0, bad_bounds), StatusCode::kInvalidArgument,
                       {"bounds end"});
  // Nothing was started by the refusals; an empty epoch is fine.
  ASSERT_TRUE((*loader)->SetEpochSteps(0, EpochSteps{}).ok());
  auto next = (*loader)->Next();
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  // The loader's own batching does not apply to a caller-given order.
  LoaderOptions batched = CallerOptions();
  batched.batch_size = 4;
  testing::ExpectError(Loader::Create(ds, batched).status(), StatusCode::kInvalidArgument,
                       {"caller's order", "batch_size"});
  // A loader that plans its own order takes no steps.
  LoaderOptions own;
  own.pin_memory = PinMemory::kOff;
  auto planned = Loader::Create(ds, own);
  ASSERT_TRUE(planned.ok());
  testing::ExpectError((*planned)->SetEpochSteps(0, EpochSteps::Singles({1})),
                       StatusCode::kInvalidArgument, {"CallerOrder"});
}

TEST(CallerOrderTest, ArenaStaysWithinTheBudget) {
  testing::TempDir dir;
  const uint64_t n = 60;
  auto ds = WriteDataset(dir.path() / "ds", n);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = CallerOptions();
  o.memory_budget = 256 << 10;
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok());
  EpochSteps steps = SamplerSteps(n, 0, 2);
  ASSERT_TRUE((*loader)->SetEpochSteps(0, steps).ok());
  EXPECT_EQ(DrainSteps(**loader, *ds), StepsOf(steps));
  const LoaderStats s = (*loader)->stats();
  EXPECT_LE(s.arena_peak, s.arena_budget);
  EXPECT_GT(s.arena_peak, 0u);
}

}  // namespace
}  // namespace libshard
