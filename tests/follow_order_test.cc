// The follow order (docs/ORDER.md §7): windows, golden values (tests/order_golden.py computes
// them independently from the text), exact-once across ranks whenever followers look, and resume.
#include "loader/follow_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

namespace libshard {
namespace {

FollowPlan Plan(uint64_t window, uint64_t seed = 0, uint64_t epoch = 0, uint64_t rank = 0,
                uint64_t world = 1, uint64_t batch = 1, bool drop_last = false, uint64_t p = 0) {
  FollowPlan plan;
  plan.window = window;
  plan.seed = seed;
  plan.epoch = epoch;
  plan.rank = rank;
  plan.world_size = world;
  plan.batch = batch;
  plan.drop_last = drop_last;
  plan.start_position = p;
  return plan;
}

std::vector<uint64_t> Sequence(const FollowSequence& order, uint64_t n) {
  std::vector<uint64_t> s;
  for (uint64_t i = 0; i < n; ++i) s.push_back(order.At(i, n));
  return s;
}

TEST(FollowOrderTest, WindowsGrowByPowersOfTwoUpToTheShuffleWindow) {
  FollowSequence m5(Plan(5));
  std::vector<uint64_t> starts, caps;
  for (uint64_t w = 0; w < 6; ++w) {
    starts.push_back(m5.WindowStart(w));
    caps.push_back(m5.WindowCapacity(w));
  }
  EXPECT_EQ(starts, (std::vector<uint64_t>{0, 1, 3, 7, 12, 17}));
  EXPECT_EQ(caps, (std::vector<uint64_t>{1, 2, 4, 5, 5, 5}));
  for (uint64_t i = 0; i < 30; ++i) {
    const uint64_t w = m5.WindowOf(i);
    EXPECT_LE(m5.WindowStart(w), i);
    EXPECT_LT(i, m5.WindowStart(w) + m5.WindowCapacity(w));
  }
  FollowSequence m1(Plan(1));
  EXPECT_EQ(Sequence(m1, 9), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(m1.WindowOf(1000), 1000u);
  FollowSequence big(Plan(uint64_t{1} << 24));
  EXPECT_EQ(big.WindowStart(24), (uint64_t{1} << 24) - 1);
  EXPECT_EQ(big.WindowStart(26), (uint64_t{1} << 24) - 1 + 2 * (uint64_t{1} << 24));
  EXPECT_EQ(big.WindowOf((uint64_t{1} << 40)), 24 + ((uint64_t{1} << 40) - (uint64_t{1} << 24) + 1) / (uint64_t{1} << 24));
  // Known positions: the end of the last complete window, everything once complete.
  EXPECT_EQ(m5.KnownPositions(0, false), 0u);
  EXPECT_EQ(m5.KnownPositions(6, false), 3u);
  EXPECT_EQ(m5.KnownPositions(7, false), 7u);
  EXPECT_EQ(m5.KnownPositions(11, false), 7u);
  EXPECT_EQ(m5.KnownPositions(11, true), 11u);
}

TEST(FollowOrderTest, GoldenValuesOfTheContract) {
  // python3 tests/order_golden.py (an independent transcription of ORDER.md §7.1).
  EXPECT_EQ(Sequence(FollowSequence(Plan(4, 0, 0)), 20),
            (std::vector<uint64_t>{0, 2, 1, 5, 4, 6, 3, 8, 9, 7, 10, 11, 14, 13, 12, 17, 18, 15,
                                   16, 19}));
  EXPECT_EQ(Sequence(FollowSequence(Plan(8, 42, 1)), 20),
            (std::vector<uint64_t>{0, 1, 2, 3, 6, 5, 4, 12, 11, 7, 8, 10, 9, 13, 14, 19, 18, 17,
                                   16, 15}));
  EXPECT_EQ(Sequence(FollowSequence(Plan(5, 7, 3)), 13),
            (std::vector<uint64_t>{0, 2, 1, 4, 5, 3, 6, 9, 7, 11, 10, 8, 12}));
  FollowPlan off = Plan(8, 42, 1);
  off.shuffle = false;
  EXPECT_EQ(Sequence(FollowSequence(off), 5), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
}

// What every rank gets from a follower that saw `arrived` samples (`complete` or not).
std::vector<std::vector<uint64_t>> RankSteps(const FollowPlan& base, uint64_t arrived,
                                             bool complete) {
  std::vector<std::vector<uint64_t>> out;
  for (uint64_t r = 0; r < base.world_size; ++r) {
    FollowPlan plan = base;
    plan.rank = r;
    FollowSequence order(plan);
    std::vector<uint64_t> samples;
    for (uint64_t k = 0; k < order.KnownSteps(arrived, complete); ++k)
      order.AppendStepSamples(k, arrived, complete, &samples);
    out.push_back(samples);
  }
  return out;
}

TEST(FollowOrderTest, EveryRankAgreesWhateverItSawAndEachSampleComesOnce) {
  for (uint64_t n : {0, 1, 7, 33, 100}) {
    for (uint64_t world : {1, 2, 3, 4}) {
      for (uint64_t batch : {1, 3}) {
        for (bool drop_last : {false, true}) {
          FollowPlan plan = Plan(16, 5, 2, 0, world, batch, drop_last);
          // The whole epoch, once the stream is complete.
          std::vector<std::vector<uint64_t>> full = RankSteps(plan, n, true);
          std::map<uint64_t, int> count;
          size_t steps0 = SIZE_MAX;
          for (uint64_t r = 0; r < world; ++r) {
            FollowPlan pr = plan;
            pr.rank = r;
            const uint64_t steps = FollowSequence(pr).KnownSteps(n, true);
            if (steps0 == SIZE_MAX) steps0 = steps;
            EXPECT_EQ(steps, steps0) << "ranks get equal step counts";
            for (uint64_t s : full[r]) ++count[s];
          }
          const uint64_t units = drop_last ? n / batch : (n + batch - 1) / batch;
          const uint64_t used = drop_last ? units / world * world : units;
          for (const auto& [s, c] : count) {
            EXPECT_LT(s, n);
            EXPECT_GE(c, 1);
            if (drop_last) EXPECT_EQ(c, 1);
          }
          if (!drop_last) EXPECT_EQ(count.size(), n) << "every sample served";
          if (drop_last) EXPECT_EQ(count.size(), std::min<uint64_t>(n, used * batch));
          // Whatever a follower saw earlier is a prefix of what it gets later, on every rank.
          for (uint64_t arrived = 0; arrived <= n; ++arrived) {
            std::vector<std::vector<uint64_t>> part = RankSteps(plan, arrived, false);
            for (uint64_t r = 0; r < world; ++r) {
              ASSERT_LE(part[r].size(), full[r].size());
              EXPECT_TRUE(std::equal(part[r].begin(), part[r].end(), full[r].begin()))
                  << "n " << n << " arrived " << arrived << " world " << world << " rank " << r;
            }
          }
        }
      }
    }
  }
}

TEST(FollowOrderTest, AResumeOnAnotherWorldSizeServesTheRestOnce) {
  const uint64_t n = 57;
  FollowPlan two = Plan(8, 1, 0, 0, 2, 2);
  FollowSequence r0(two);
  // Two ranks take 5 steps each, the stream still open: position after step 4.
  const uint64_t p = r0.PositionAfter(4, 30, false);
  EXPECT_EQ(p, 20u);
  std::map<uint64_t, int> count;
  for (uint64_t r = 0; r < 2; ++r) {
    FollowPlan plan = two;
    plan.rank = r;
    FollowSequence order(plan);
    std::vector<uint64_t> samples;
    for (uint64_t k = 0; k < 5; ++k) order.AppendStepSamples(k, 30, false, &samples);
    for (uint64_t s : samples) ++count[s];
  }
  // Three ranks continue from there, the stream complete by then.
  for (uint64_t r = 0; r < 3; ++r) {
    FollowPlan plan = Plan(8, 1, 0, r, 3, 2, false, p);
    FollowSequence order(plan);
    std::vector<uint64_t> samples;
    for (uint64_t k = 0; k < order.KnownSteps(n, true); ++k)
      order.AppendStepSamples(k, n, true, &samples);
    for (uint64_t s : samples) ++count[s];
    EXPECT_EQ(order.PositionAfter(order.KnownSteps(n, true) - 1, n, true), n);
  }
  EXPECT_EQ(count.size(), n);  // every sample, padding repeats aside
  uint64_t repeats = 0;
  for (const auto& [s, c] : count) repeats += c - 1;
  EXPECT_LE(repeats, 2u * 2);  // at most W' - 1 padding units of B samples
  // A position past the end (saved before the stream was known to end) resumes at the end.
  FollowSequence past(Plan(8, 1, 0, 0, 1, 2, false, n + 6));
  EXPECT_EQ(past.KnownSteps(n, true), 0u);
}

TEST(FollowStepsTest, ASnapshotServesTheStepsItDecides) {
  FollowSequence order(Plan(4, 9, 0, 1, 2, 2));
  FollowSteps steps(order, 1, 12, false, FollowCursor{.seed = 9, .window = 4});
  // 12 arrivals: positions [0, 11) known (windows 1, 2, 4, 4), 5 units; rank 1 gets units 1, 3.
  EXPECT_EQ(steps.steps(), 1u);  // its step 1 (unit 3); step 0 (unit 1) came before
  std::vector<uint64_t> samples;
  steps.AppendStepSamples(0, &samples);
  std::vector<uint64_t> direct;
  order.AppendStepSamples(1, 12, false, &direct);
  EXPECT_EQ(samples, direct);
  EXPECT_EQ(steps.PositionAfter(0), 8u);
  EXPECT_EQ(steps.StepSize(0), 2u);
}

}  // namespace
}  // namespace libshard
