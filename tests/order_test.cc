// Tests of the epoch order contract (docs/ORDER.md; libshard/src/loader/order.h): permutation,
// batching, rank striping, drop_last/padding and resume across world sizes.
#include "loader/order.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "loader/batching.h"

namespace libshard {
namespace {

using ::testing::HasSubstr;

enum class Mode { kSample, kFixed, kTokens };

std::string ModeName(Mode m) {
  switch (m) {
    case Mode::kSample: return "sample";
    case Mode::kFixed: return "fixed";
    case Mode::kTokens: return "tokens";
  }
  return "?";
}

// The tests below written against EpochPermutation pin order version 1; the version 2 tests
// (ShuffleV2...) pass kOrderV2.
PlanOptions Opts(Mode mode, uint64_t w, uint64_t r, bool drop_last, uint64_t seed = 7,
                 uint64_t epoch = 3, uint32_t order = kOrderV1) {
  PlanOptions o;
  o.order = order;
  o.shuffle = true;
  o.seed = seed;
  o.epoch = epoch;
  o.world_size = w;
  o.rank = r;
  o.drop_last = drop_last;
  if (mode == Mode::kFixed) o.batch_size = 3;
  if (mode == Mode::kTokens) o.max_tokens = 100;
  return o;
}

// Deterministic, varied lengths in [1, 130]: some samples exceed max_tokens = 100.
std::vector<uint64_t> Lengths(uint64_t n) {
  std::vector<uint64_t> lengths(n);
  for (uint64_t i = 0; i < n; ++i) lengths[i] = 1 + (i * 37 + i * i * 11) % 130;
  return lengths;
}

EpochPlan MakeOrDie(uint64_t n, std::span<const uint64_t> lengths, const PlanOptions& o) {
  Result<EpochPlan> plan = EpochPlan::Make(n, lengths, o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::move(plan).value();
}

// All W ranks of one run: steps[k][r] = rank r's k-th batch.
struct RankRun {
  std::vector<std::vector<std::vector<uint64_t>>> steps;
  std::vector<uint64_t> positions;  // PositionAfter(k), checked equal on every rank
};

RankRun RunAllRanks(uint64_t n, std::span<const uint64_t> lengths, PlanOptions o) {
  RankRun run;
  for (uint64_t r = 0; r < o.world_size; ++r) {
    o.rank = r;
    EpochPlan plan = MakeOrDie(n, lengths, o);
    if (r == 0) {
      run.steps.resize(plan.batches_for_rank(), std::vector<std::vector<uint64_t>>(o.world_size));
      for (uint64_t k = 0; k < plan.batches_for_rank(); ++k) {
        run.positions.push_back(plan.PositionAfter(k));
      }
    }
    EXPECT_EQ(plan.batches_for_rank(), run.steps.size()) << "rank " << r;
    for (uint64_t k = 0; k < plan.batches_for_rank() && k < run.steps.size(); ++k) {
      run.steps[k][r] = plan.BatchSamples(k);
      EXPECT_EQ(plan.PositionAfter(k), run.positions[k]) << "rank " << r << " step " << k;
    }
  }
  return run;
}

// The units of the contract, written independently of BatchLayout: materialised lists.
std::vector<std::vector<uint64_t>> OracleUnits(const std::vector<uint64_t>& perm,
                                               const std::vector<uint64_t>& lengths,
                                               const PlanOptions& o, uint64_t from,
                                               bool drop_partial) {
  std::vector<std::vector<uint64_t>> units;
  if (o.max_tokens > 0) {
    std::vector<uint64_t> cur;
    uint64_t sum = 0;
    for (uint64_t i = from; i < perm.size(); ++i) {
      const uint64_t len = lengths[perm[i]];
      if (!cur.empty() && sum + len > o.max_tokens) {
        units.push_back(cur);
        cur.clear();
        sum = 0;
      }
      cur.push_back(perm[i]);
      sum += len;
      if (len > o.max_tokens) {
        units.push_back(cur);
        cur.clear();
        sum = 0;
      }
    }
    if (!cur.empty()) units.push_back(cur);
    return units;
  }
  const uint64_t b = std::max<uint64_t>(o.batch_size, 1);
  for (uint64_t i = from; i < perm.size(); i += b) {
    const uint64_t end = std::min<uint64_t>(i + b, perm.size());
    std::vector<uint64_t> u(perm.begin() + i, perm.begin() + end);
    if (u.size() < b && drop_partial) break;
    units.push_back(u);
  }
  return units;
}

// The expected global unit sequence (g = k*W + r), padding included.
std::vector<std::vector<uint64_t>> OracleGlobal(const std::vector<uint64_t>& perm,
                                                const std::vector<uint64_t>& lengths,
                                                const PlanOptions& o) {
  auto units = OracleUnits(perm, lengths, o, o.start_position, o.drop_last);
  const uint64_t g = units.size();
  const uint64_t w = o.world_size;
  const uint64_t steps = o.drop_last ? g / w : (g + w - 1) / w;
  units.resize(std::min(units.size(), steps * w));
  if (steps * w > g) {
    const auto from_zero = OracleUnits(perm, lengths, o, 0, false);
    for (uint64_t j = 0; units.size() < steps * w; ++j) {
      units.push_back(from_zero[j % from_zero.size()]);
    }
  }
  return units;
}

std::vector<std::vector<uint64_t>> Flatten(const RankRun& run) {
  std::vector<std::vector<uint64_t>> units;
  for (const auto& step : run.steps) {
    for (const auto& batch : step) units.push_back(batch);
  }
  return units;
}

// ---------------------------------------------------------------------------------------------
// Permutation

TEST(EpochPermutationTest, IsAPermutation) {
  for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 17ull, 1000ull}) {
    std::vector<uint64_t> p = EpochPermutation(n, 1, 2);
    ASSERT_EQ(p.size(), n);
    std::sort(p.begin(), p.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], i) << "n=" << n;
  }
}

TEST(EpochPermutationTest, TenMillionSamplesIsAPermutation) {
  constexpr uint64_t kN = 10'000'000;
  const std::vector<uint64_t> p = EpochPermutation(kN, 123, 0);
  std::vector<bool> seen(kN);
  uint64_t fixed_points = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    ASSERT_LT(p[i], kN);
    ASSERT_FALSE(seen[p[i]]) << "duplicate " << p[i];
    seen[p[i]] = true;
    fixed_points += p[i] == i;
  }
  EXPECT_LT(fixed_points, 20u);  // a uniform shuffle has ~1 fixed point
}

// Golden values: the algorithm documented in docs/ORDER.md §1.1, also computed by an independent Python
// transcription of that comment (tests/order_golden.py). A failure here means saved LoaderStates no longer resume
// correctly: do not update these numbers, restore the algorithm.
TEST(EpochPermutationTest, GoldenValues) {
  EXPECT_EQ(EpochPermutation(10, 0, 0),
            (std::vector<uint64_t>{4, 9, 2, 5, 1, 7, 6, 0, 3, 8}));
  EXPECT_EQ(EpochPermutation(10, 42, 0),
            (std::vector<uint64_t>{0, 3, 5, 7, 9, 8, 2, 1, 4, 6}));
  EXPECT_EQ(EpochPermutation(10, 42, 1),
            (std::vector<uint64_t>{6, 5, 1, 4, 7, 3, 2, 9, 8, 0}));
  const std::vector<uint64_t> big = EpochPermutation(1000, 7, 3);
  EXPECT_EQ(std::vector<uint64_t>(big.begin(), big.begin() + 8),
            (std::vector<uint64_t>{260, 4, 5, 391, 687, 520, 642, 38}));
}

TEST(EpochPermutationTest, DeterministicPerSeedAndEpoch) {
  EXPECT_EQ(EpochPermutation(500, 9, 4), EpochPermutation(500, 9, 4));
  EXPECT_NE(EpochPermutation(500, 9, 4), EpochPermutation(500, 10, 4));
  EXPECT_NE(EpochPermutation(500, 9, 4), EpochPermutation(500, 9, 5));
  // Every epoch of the first 20 has its own order.
  std::vector<std::vector<uint64_t>> epochs;
  for (uint64_t e = 0; e < 20; ++e) epochs.push_back(EpochPermutation(100, 1, e));
  std::sort(epochs.begin(), epochs.end());
  EXPECT_EQ(std::unique(epochs.begin(), epochs.end()), epochs.end());
}

TEST(EpochPermutationTest, RoughlyUniformFirstPosition) {
  // 4000 epochs of n = 4: each sample should lead ~1000 times. Catches a biased shuffle
  // (e.g. j drawn from [0, n) at every step) while staying far from flaky (bounds are ~6 sigma).
  std::vector<int> first(4);
  for (uint64_t e = 0; e < 4000; ++e) ++first[EpochPermutation(4, 5, e)[0]];
  for (int c : first) {
    EXPECT_GT(c, 840);
    EXPECT_LT(c, 1160);
  }
}

TEST(EpochPlanTest, NoShuffleIsIdentity) {
  PlanOptions o;
  o.order = kOrderV1;
  o.shuffle = false;
  o.seed = 99;
  EpochPlan plan = MakeOrDie(5, {}, o);
  ASSERT_EQ(plan.batches_for_rank(), 5u);
  for (uint64_t k = 0; k < 5; ++k) EXPECT_EQ(plan.BatchSamples(k), std::vector<uint64_t>{k});
}

TEST(EpochPlanTest, PermutationDoesNotDependOnWorldSizeRankBatchingOrPosition) {
  const auto lengths = Lengths(101);
  const std::vector<uint64_t> expected = EpochPermutation(101, 7, 3);
  for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens}) {
    for (uint64_t w = 1; w <= 8; ++w) {
      for (uint64_t r = 0; r < w; r += 3) {
        PlanOptions o = Opts(mode, w, r, w % 2 == 0);
        o.start_position = (w * 13) % 101;
        EpochPlan plan = MakeOrDie(101, lengths, o);
        ASSERT_TRUE(std::equal(expected.begin(), expected.end(), plan.permutation().begin(),
                               plan.permutation().end()))
            << ModeName(mode) << " w=" << w << " r=" << r;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Striping, drop_last and padding

TEST(EpochPlanTest, ExactlyOnceCoverageForWorldSizes1To8) {
  for (uint32_t order : {kOrderV1, kOrderV2})
  for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens}) {
    for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 5ull, 7ull, 13ull, 31ull, 97ull}) {
      const auto lengths = Lengths(n);
      for (uint64_t w = 1; w <= 8; ++w) {
        for (bool drop : {false, true}) {
          SCOPED_TRACE(ModeName(mode) + " n=" + std::to_string(n) + " w=" + std::to_string(w) +
                       " drop_last=" + std::to_string(drop) + " order=" + std::to_string(order));
          const PlanOptions o = Opts(mode, w, 0, drop, 7, 3, order);
          const std::vector<uint64_t> perm = EpochOrder(n, 7, 3, order);
          const RankRun run = RunAllRanks(n, lengths, o);
          std::map<uint64_t, int> count;
          uint64_t delivered = 0;
          for (const auto& step : run.steps) {
            for (const auto& batch : step) {
              EXPECT_FALSE(batch.empty());
              for (uint64_t s : batch) ++count[s];
              delivered += batch.size();
            }
          }
          const uint64_t units = OracleUnits(perm, lengths, o, 0, drop).size();
          if (drop) {
            EXPECT_EQ(run.steps.size(), units / w);
            for (const auto& [s, c] : count) EXPECT_EQ(c, 1) << "sample " << s;
          } else {
            EXPECT_EQ(run.steps.size(), (units + w - 1) / w);
            EXPECT_EQ(count.size(), n);  // every sample at least once
            uint64_t repeats = 0;
            for (const auto& [s, c] : count) repeats += c - 1;
            EXPECT_EQ(delivered - repeats, n);  // repeats are padding only
            if (mode == Mode::kSample) {
              EXPECT_EQ(repeats, run.steps.size() * w - n);
            }
          }
          EXPECT_EQ(Flatten(run), OracleGlobal(perm, lengths, o));
          if (!run.positions.empty()) {
            EXPECT_EQ(run.positions.back(), n);
          }
          EXPECT_TRUE(std::is_sorted(run.positions.begin(), run.positions.end()));
        }
      }
    }
  }
}

TEST(EpochPlanTest, SampleModeCountsAndStriping) {
  PlanOptions o;
  o.order = kOrderV1;
  o.shuffle = false;
  o.world_size = 4;
  o.rank = 1;
  // N = 10, W = 4: padding gives ceil(10/4) = 3 each; rank 1 takes positions 1, 5, 9.
  EpochPlan plan = MakeOrDie(10, {}, o);
  ASSERT_EQ(plan.batches_for_rank(), 3u);
  EXPECT_EQ(plan.BatchSamples(0), std::vector<uint64_t>{1});
  EXPECT_EQ(plan.BatchSamples(1), std::vector<uint64_t>{5});
  EXPECT_EQ(plan.BatchSamples(2), std::vector<uint64_t>{9});
  EXPECT_EQ(plan.PositionAfter(0), 4u);
  EXPECT_EQ(plan.PositionAfter(1), 8u);
  EXPECT_EQ(plan.PositionAfter(2), 10u);
  // Rank 3's last step is position 11: padding wraps to P[1].
  o.rank = 3;
  plan = MakeOrDie(10, {}, o);
  EXPECT_EQ(plan.BatchSamples(2), std::vector<uint64_t>{1});
  // drop_last: floor(10/4) = 2 each, samples 8 and 9 dropped.
  o.drop_last = true;
  plan = MakeOrDie(10, {}, o);
  ASSERT_EQ(plan.batches_for_rank(), 2u);
  EXPECT_EQ(plan.BatchSamples(1), std::vector<uint64_t>{7});
  EXPECT_EQ(plan.PositionAfter(1), 10u);  // the epoch is finished
  EXPECT_TRUE(plan.BatchSamples(2).empty());
}

TEST(EpochPlanTest, FewerSamplesThanRanks) {
  PlanOptions o;
  o.order = kOrderV1;
  o.shuffle = false;
  o.world_size = 8;
  for (uint64_t r = 0; r < 8; ++r) {
    o.rank = r;
    EpochPlan plan = MakeOrDie(3, {}, o);
    ASSERT_EQ(plan.batches_for_rank(), 1u);
    EXPECT_EQ(plan.BatchSamples(0), std::vector<uint64_t>{r % 3});  // wraps more than once
  }
  o.drop_last = true;
  EXPECT_EQ(MakeOrDie(3, {}, o).batches_for_rank(), 0u);
}

TEST(EpochPlanTest, FixedBatches) {
  PlanOptions o;
  o.order = kOrderV1;
  o.shuffle = false;
  o.batch_size = 3;
  o.world_size = 2;
  // N = 10: global batches {0,1,2} {3,4,5} {6,7,8} {9}; rank 1 takes the 2nd and 4th.
  o.rank = 1;
  EpochPlan plan = MakeOrDie(10, {}, o);
  ASSERT_EQ(plan.batches_for_rank(), 2u);
  EXPECT_EQ(plan.BatchSamples(0), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(plan.BatchSamples(1), (std::vector<uint64_t>{9}));
  EXPECT_EQ(plan.PositionAfter(0), 6u);  // steps * batch * W
  EXPECT_EQ(plan.PositionAfter(1), 10u);
  // N = 11, W = 3: 4 batches -> 2 steps each, rank 1's second is padding = global batch 0.
  o.world_size = 3;
  plan = MakeOrDie(11, {}, o);
  ASSERT_EQ(plan.batches_for_rank(), 2u);
  EXPECT_EQ(plan.BatchSamples(1), (std::vector<uint64_t>{0, 1, 2}));
  // drop_last drops the partial batch {9, 10}, then 3 full batches over 3 ranks: 1 step each.
  o.drop_last = true;
  plan = MakeOrDie(11, {}, o);
  ASSERT_EQ(plan.batches_for_rank(), 1u);
  EXPECT_EQ(plan.BatchSamples(0), (std::vector<uint64_t>{3, 4, 5}));
}

// ---------------------------------------------------------------------------------------------
// Token-budget batches

TEST(BatchLayoutTest, TokenBatchesRespectTheBudget) {
  const uint64_t n = 400;
  const auto lengths = Lengths(n);
  const auto perm = EpochPermutation(n, 3, 0);
  const uint64_t budget = 100;
  const BatchLayout layout = BatchLayout::Tokens(perm, lengths, 0, budget, UINT64_MAX);
  ASSERT_GT(layout.size(), 0u);
  EXPECT_EQ(layout.Begin(0), 0u);
  EXPECT_EQ(layout.End(layout.size() - 1), n);
  uint64_t oversized = 0;
  for (uint64_t g = 0; g < layout.size(); ++g) {
    ASSERT_LT(layout.Begin(g), layout.End(g));
    if (g > 0) {
      ASSERT_EQ(layout.Begin(g), layout.End(g - 1));
    }
    uint64_t sum = 0;
    for (uint64_t i = layout.Begin(g); i < layout.End(g); ++i) sum += lengths[perm[i]];
    if (sum > budget) {
      EXPECT_EQ(layout.End(g) - layout.Begin(g), 1u) << "only a single oversized sample may exceed";
      ++oversized;
    }
    // Greedy: the next sample would not have fitted.
    if (g + 1 < layout.size()) {
      EXPECT_GT(sum + lengths[perm[layout.End(g)]], budget);
    }
  }
  EXPECT_GT(oversized, 0u);  // Lengths() has samples > 100, so the branch above was exercised
}

TEST(BatchLayoutTest, TokenBatchesStopAtMaxUnits) {
  const std::vector<uint64_t> lengths = {5, 5, 5, 5, 5, 5};
  const std::vector<uint64_t> perm = {0, 1, 2, 3, 4, 5};
  const BatchLayout all = BatchLayout::Tokens(perm, lengths, 1, 10, UINT64_MAX);
  ASSERT_EQ(all.size(), 3u);  // {1,2} {3,4} {5}
  EXPECT_EQ(all.End(2), 6u);
  const BatchLayout two = BatchLayout::Tokens(perm, lengths, 1, 10, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two.End(1), 5u);
}

TEST(BatchLayoutTest, FindUnitStartAndSuffix) {
  const std::vector<uint64_t> lengths = {5, 5, 5, 5, 5, 5};
  const std::vector<uint64_t> perm = {0, 1, 2, 3, 4, 5};
  const BatchLayout tokens = BatchLayout::Tokens(perm, lengths, 0, 10, UINT64_MAX);
  ASSERT_EQ(tokens.size(), 3u);  // {0,1} {2,3} {4,5}
  EXPECT_EQ(tokens.FindUnitStart(2), 1u);
  EXPECT_EQ(tokens.FindUnitStart(3), 3u);  // not a unit start
  EXPECT_EQ(tokens.FindUnitStart(6), 3u);
  const BatchLayout rest = tokens.Suffix(1);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest.Begin(0), 2u);
  EXPECT_EQ(rest.End(1), 6u);
  EXPECT_EQ(tokens.Suffix(3).size(), 0u);
  const BatchLayout fixed = BatchLayout::Fixed(1, 8, 3, false);  // {1,2,3} {4,5,6} {7}
  ASSERT_EQ(fixed.size(), 3u);
  EXPECT_EQ(fixed.FindUnitStart(4), 1u);
  EXPECT_EQ(fixed.FindUnitStart(5), 3u);
  EXPECT_EQ(fixed.FindUnitStart(0), 3u);
  const BatchLayout fixed_rest = fixed.Suffix(2);
  ASSERT_EQ(fixed_rest.size(), 1u);
  EXPECT_EQ(fixed_rest.Begin(0), 7u);
  EXPECT_EQ(fixed_rest.End(0), 8u);
}

TEST(EpochPlanTest, TokenBatchesAcrossRanks) {
  PlanOptions o;
  o.order = kOrderV1;
  o.shuffle = false;
  o.max_tokens = 10;
  o.world_size = 2;
  const std::vector<uint64_t> lengths = {4, 4, 4, 20, 0, 3, 9, 1};
  // Global batches: {0,1} {2} {3} {4,5} {6,1?}: 4+4=8, +4>10 -> {0,1}; {2} then 20 oversized ->
  // {2} {3}; {4,5,6}? 0+3=3, +9=12>10 -> {4,5}; {6,7} = 10.
  o.rank = 0;
  EpochPlan r0 = MakeOrDie(8, lengths, o);
  o.rank = 1;
  EpochPlan r1 = MakeOrDie(8, lengths, o);
  ASSERT_EQ(r0.global_units(), 5u);
  ASSERT_EQ(r0.batches_for_rank(), 3u);
  ASSERT_EQ(r1.batches_for_rank(), 3u);
  EXPECT_EQ(r0.BatchSamples(0), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(r1.BatchSamples(0), (std::vector<uint64_t>{2}));
  EXPECT_EQ(r0.BatchSamples(1), (std::vector<uint64_t>{3}));
  EXPECT_EQ(r1.BatchSamples(1), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(r0.BatchSamples(2), (std::vector<uint64_t>{6, 7}));
  EXPECT_EQ(r1.BatchSamples(2), (std::vector<uint64_t>{0, 1}));  // padding: first global batch
  EXPECT_EQ(r0.PositionAfter(0), 3u);
  EXPECT_EQ(r0.PositionAfter(1), 6u);
  EXPECT_EQ(r0.PositionAfter(2), 8u);
}

TEST(EpochPlanTest, OversizedSampleCanBeAnError) {
  PlanOptions o;
  o.order = kOrderV1;
  o.max_tokens = 10;
  o.oversized = OversizedSample::kError;
  const std::vector<uint64_t> lengths = {4, 4, 4, 4, 4, 20, 4};
  Result<EpochPlan> plan = EpochPlan::Make(7, lengths, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("sample 5 has 20 tokens"));
  EXPECT_THAT(plan.status().message(), HasSubstr("max_tokens = 10"));
  o.oversized = OversizedSample::kOwnBatch;
  EXPECT_TRUE(EpochPlan::Make(7, lengths, o).ok());
}

// ---------------------------------------------------------------------------------------------
// Validation

TEST(EpochPlanTest, RejectsInconsistentOptions) {
  auto expect_invalid = [](uint64_t n, std::vector<uint64_t> lengths, PlanOptions o,
                           const std::string& text) {
    Result<EpochPlan> plan = EpochPlan::Make(n, lengths, o);
    ASSERT_FALSE(plan.ok()) << text;
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr(text));
  };
  PlanOptions o;
  o.order = kOrderV1;
  o.world_size = 0;
  expect_invalid(10, {}, o, "world_size is 0");
  o.world_size = 4;
  o.rank = 4;
  expect_invalid(10, {}, o, "rank 4 is out of range for world_size 4; use a rank in 0..3");
  o.rank = 0;
  o.batch_size = 8;
  o.max_tokens = 100;
  expect_invalid(10, Lengths(10), o, "are exclusive");
  o.batch_size = 1;  // 1 means single samples: compatible with max_tokens
  EXPECT_TRUE(EpochPlan::Make(10, Lengths(10), o).ok());
  expect_invalid(10, Lengths(9), o, "got 9 lengths for 10 samples");
  expect_invalid(10, std::vector<uint64_t>(10, 0), o, "every sample has length 0");
  o.max_tokens = 0;
  o.start_position = 11;
  expect_invalid(10, {}, o, "resume position 11 is past the end of the epoch (10 samples)");
  o.start_position = 10;
  Result<EpochPlan> done = EpochPlan::Make(10, {}, o);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->batches_for_rank(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Resume

// Runs `w` ranks for `k + 1` steps, resumes from PositionAfter(k) on `w2` ranks and checks that
// the concatenation of what both runs delivered is the uninterrupted global unit sequence of a
// run started at the resume point, and that the real (non-padding) samples are P exactly once.
void CheckResume(Mode mode, uint64_t n, uint64_t w, uint64_t k, uint64_t w2, bool drop) {
  SCOPED_TRACE(ModeName(mode) + " n=" + std::to_string(n) + " w=" + std::to_string(w) +
               " k=" + std::to_string(k) + " w2=" + std::to_string(w2) +
               " drop=" + std::to_string(drop));
  const auto lengths = Lengths(n);
  const auto perm = EpochPermutation(n, 7, 3);
  const RankRun first = RunAllRanks(n, lengths, Opts(mode, w, 0, drop));
  ASSERT_LT(k, first.steps.size());
  PlanOptions resumed = Opts(mode, w2, 0, drop);
  resumed.start_position = first.positions[k];
  const RankRun second = RunAllRanks(n, lengths, resumed);

  // The first run's real (non-padding) units before the resume point are P[0, position) in
  // order, except after the last step with drop_last, where the dropped tail is never delivered.
  const auto first_units = Flatten(first);
  const uint64_t first_real = OracleUnits(perm, lengths, Opts(mode, w, 0, drop), 0, drop).size();
  std::vector<uint64_t> prefix;
  for (uint64_t g = 0; g < (k + 1) * w && g < first_real; ++g) {
    prefix.insert(prefix.end(), first_units[g].begin(), first_units[g].end());
  }
  if (k + 1 < first.steps.size() || !drop) {
    ASSERT_EQ(prefix, std::vector<uint64_t>(perm.begin(), perm.begin() + resumed.start_position));
  }
  EXPECT_EQ(Flatten(second), OracleGlobal(perm, lengths, resumed));

  // Samples: each exactly once overall (pad) or at most once (drop), apart from padding units.
  std::vector<uint64_t> all = prefix;
  const auto second_units = Flatten(second);
  const uint64_t remaining =
      OracleUnits(perm, lengths, resumed, resumed.start_position, drop).size();
  for (uint64_t g = 0; g < second_units.size() && g < remaining; ++g) {
    all.insert(all.end(), second_units[g].begin(), second_units[g].end());
  }
  std::vector<uint64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "a sample repeats";
  if (!drop) {
    EXPECT_EQ(all, perm) << "the resumed run continues the global sequence";
  } else {
    ASSERT_LE(all.size(), perm.size());
    EXPECT_TRUE(std::equal(all.begin(), all.end(), perm.begin())) << "a prefix of P";
  }
  {
    PlanOptions o = resumed;
    o.rank = w2 - 1;
    PlanOptions fresh = o;
    fresh.start_position = 0;
    EXPECT_EQ(MakeOrDie(n, lengths, o).epoch_batches_for_rank(),
              MakeOrDie(n, lengths, fresh).batches_for_rank());
  }
  if (w2 == w) {  // step for step identical to the uninterrupted run
    ASSERT_EQ(second.steps.size(), first.steps.size() - k - 1);
    for (uint64_t s = 0; s < second.steps.size(); ++s) {
      EXPECT_EQ(second.steps[s], first.steps[s + k + 1]) << "step " << s;
      EXPECT_EQ(second.positions[s], first.positions[s + k + 1]) << "step " << s;
    }
  }
}

TEST(EpochPlanResumeTest, ResumeSameAndOtherWorldSize) {
  for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens}) {
    for (uint64_t n : {13ull, 50ull, 97ull}) {
      for (uint64_t w : {1ull, 2ull, 3ull, 8ull}) {
        for (uint64_t w2 : {1ull, 2ull, 3ull, 5ull, 8ull}) {
          for (bool drop : {false, true}) {
            PlanOptions o = Opts(mode, w, 0, drop);
            const uint64_t steps = MakeOrDie(n, Lengths(n), o).batches_for_rank();
            for (uint64_t k = 0; k < steps; ++k) CheckResume(mode, n, w, k, w2, drop);
          }
        }
      }
    }
  }
}

TEST(EpochPlanResumeTest, ArbitraryPositionsContinueTheSequence) {
  // Positions that are not a multiple of W*B (e.g. set by hand or from another mode): the
  // remaining samples P[p, N) are still delivered exactly once, in order, across the new ranks.
  const uint64_t n = 41;
  const auto lengths = Lengths(n);
  const auto perm = EpochPermutation(n, 7, 3);
  for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens}) {
    for (uint64_t w = 1; w <= 5; ++w) {
      for (uint64_t p = 0; p <= n; ++p) {
        PlanOptions o = Opts(mode, w, 0, false);
        o.start_position = p;
        const RankRun run = RunAllRanks(n, lengths, o);
        const auto units = Flatten(run);
        const uint64_t real = OracleUnits(perm, lengths, o, p, false).size();
        ASSERT_GE(units.size(), real) << ModeName(mode) << " w=" << w << " p=" << p;
        std::vector<uint64_t> got;
        for (uint64_t g = 0; g < real; ++g) got.insert(got.end(), units[g].begin(), units[g].end());
        ASSERT_EQ(got, std::vector<uint64_t>(perm.begin() + p, perm.end()))
            << ModeName(mode) << " w=" << w << " p=" << p;
        ASSERT_EQ(units, OracleGlobal(perm, lengths, o));
      }
    }
  }
}

TEST(EpochPlanResumeTest, ChainOfResumesOnChangingWorldSizes) {
  const uint64_t n = 211;
  const auto lengths = Lengths(n);
  const auto perm = EpochPermutation(n, 7, 3);
  for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens}) {
    std::vector<uint64_t> delivered;
    uint64_t position = 0;
    const uint64_t world_sizes[] = {4, 1, 7, 2, 8, 3, 5, 6};
    for (uint64_t i = 0; position < n; ++i) {
      PlanOptions o = Opts(mode, world_sizes[i % 8], 0, false);
      o.start_position = position;
      const RankRun run = RunAllRanks(n, lengths, o);
      ASSERT_FALSE(run.steps.empty());
      const uint64_t take = std::min<uint64_t>(2, run.steps.size() - 1);  // not the last step
      if (take == 0) break;
      for (uint64_t s = 0; s < take; ++s) {
        for (const auto& batch : run.steps[s]) {
          delivered.insert(delivered.end(), batch.begin(), batch.end());
        }
      }
      position = run.positions[take - 1];
      ASSERT_EQ(delivered, std::vector<uint64_t>(perm.begin(), perm.begin() + position))
          << ModeName(mode) << " after resume " << i;
    }
    EXPECT_GT(position, n / 2);
  }
}

TEST(EpochPlanTest, PlanOptionsForTakesResumeState) {
  LoaderOptions lo;
  lo.order = Order::Shuffled(1);
  lo.epoch = 2;
  lo.rank = 3;
  lo.world_size = 4;
  lo.batch_size = 16;
  lo.drop_last = true;
  PlanOptions o = PlanOptionsFor(lo);
  EXPECT_EQ(o.seed, 1u);
  EXPECT_EQ(o.epoch, 2u);
  EXPECT_EQ(o.start_position, 0u);
  EXPECT_EQ(o.rank, 3u);
  EXPECT_EQ(o.world_size, 4u);
  EXPECT_EQ(o.batch_size, 16u);
  EXPECT_TRUE(o.drop_last);
  EXPECT_EQ(o.order, kOrderV2);  // new loaders default to order version 2
  lo.resume =
      LoaderState{.epoch = 6, .position = 7, .skipped = {}, .cursor = GlobalCursor{.seed = 5}};
  o = PlanOptionsFor(lo);
  EXPECT_EQ(o.seed, 5u);
  EXPECT_EQ(o.epoch, 6u);
  EXPECT_EQ(o.start_position, 7u);
  // A state without a version (saved before order versions) resumes onto order 1, whatever the
  // loader's own order option; a state with one resumes onto it.
  EXPECT_EQ(o.order, kOrderV1);
  lo.order = Order::Shuffled(1, kOrderV1);
  lo.resume->get<GlobalCursor>()->version = kOrderV2;
  EXPECT_EQ(PlanOptionsFor(lo).order, kOrderV2);
  // The node-local order's epochs have no version of their own.
  lo.order = NodeLocalOrder{.seed = 1};
  lo.resume.reset();
  EXPECT_EQ(PlanOptionsFor(lo).order, kOrderV2);
}

// ---------------------------------------------------------------------------------------------
// Order version 2

// Golden values: the ShuffleV2 algorithm documented in docs/ORDER.md §1.2, also computed by the independent
// Python transcription in tests/order_golden.py. A failure means saved version 2 states no longer
// resume correctly: do not update these numbers, restore the algorithm.
std::vector<uint64_t> V2At(uint64_t n, uint64_t seed, uint64_t epoch,
                           std::vector<uint64_t> positions) {
  const ShuffleV2 shuffle(n, seed, epoch);
  for (uint64_t& p : positions) p = shuffle.At(p);
  return positions;
}

TEST(ShuffleV2Test, GoldenValues) {
  EXPECT_EQ(EpochOrder(10, 0, 0, kOrderV2),
            (std::vector<uint64_t>{8, 0, 6, 7, 2, 3, 1, 9, 4, 5}));
  EXPECT_EQ(EpochOrder(10, 42, 0, kOrderV2),
            (std::vector<uint64_t>{6, 1, 3, 2, 4, 7, 9, 8, 0, 5}));
  EXPECT_EQ(EpochOrder(10, 42, 1, kOrderV2),
            (std::vector<uint64_t>{5, 7, 9, 0, 6, 2, 4, 3, 8, 1}));
  EXPECT_EQ(V2At(1000, 7, 3, {0, 1, 2, 3, 4, 5, 6, 7}),
            (std::vector<uint64_t>{646, 45, 544, 120, 809, 71, 455, 664}));
  EXPECT_EQ(V2At(10'000'000, 123, 5, {0, 1, 2, 4'999'999, 9'999'999}),
            (std::vector<uint64_t>{7644028, 5619516, 8349423, 6311225, 5659819}));
  EXPECT_EQ(V2At((uint64_t{1} << 40) + 1, 9, 2, {0, 1, uint64_t{1} << 40}),
            (std::vector<uint64_t>{747876940366, 304356227423, 512609767339}));
  EXPECT_EQ(V2At(~uint64_t{0}, 1, 0, {0, 1, ~uint64_t{0} - 1}),
            (std::vector<uint64_t>{9781767026921965958ull, 12581745578540076381ull,
                                   628802878677275825ull}));
}

TEST(ShuffleV2Test, IsAPermutation) {
  // Widths 2..12 bits, powers of four and their neighbours (the cycle walk's worst cases).
  for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 4ull, 5ull, 15ull, 16ull, 17ull, 63ull, 64ull, 65ull,
                     1000ull, 4095ull, 4096ull, 4097ull}) {
    std::vector<uint64_t> p = EpochOrder(n, 1, 2, kOrderV2);
    ASSERT_EQ(p.size(), n);
    std::sort(p.begin(), p.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], i) << "n=" << n;
  }
}

TEST(ShuffleV2Test, TenMillionSamplesIsAPermutation) {
  constexpr uint64_t kN = 10'000'000;
  const ShuffleV2 shuffle(kN, 123, 0);
  std::vector<bool> seen(kN);
  uint64_t fixed_points = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    const uint64_t s = shuffle.At(i);
    ASSERT_LT(s, kN);
    ASSERT_FALSE(seen[s]) << "duplicate " << s;
    seen[s] = true;
    fixed_points += s == i;
  }
  EXPECT_LT(fixed_points, 20u);
}

TEST(ShuffleV2Test, DeterministicPerSeedAndEpochAndNotV1) {
  EXPECT_EQ(EpochOrder(500, 9, 4, kOrderV2), EpochOrder(500, 9, 4, kOrderV2));
  EXPECT_NE(EpochOrder(500, 9, 4, kOrderV2), EpochOrder(500, 10, 4, kOrderV2));
  EXPECT_NE(EpochOrder(500, 9, 4, kOrderV2), EpochOrder(500, 9, 5, kOrderV2));
  EXPECT_NE(EpochOrder(500, 9, 4, kOrderV2), EpochOrder(500, 9, 4, kOrderV1));
  std::vector<std::vector<uint64_t>> epochs;
  for (uint64_t e = 0; e < 20; ++e) epochs.push_back(EpochOrder(100, 1, e, kOrderV2));
  std::sort(epochs.begin(), epochs.end());
  EXPECT_EQ(std::unique(epochs.begin(), epochs.end()), epochs.end());
}

TEST(ShuffleV2Test, RoughlyUniformFirstPosition) {
  // Same bounds as v1's (~6 sigma): n = 4 is the narrowest network (1-bit halves).
  std::vector<int> first(4);
  for (uint64_t e = 0; e < 4000; ++e) ++first[ShuffleV2(4, 5, e).At(0)];
  for (int c : first) {
    EXPECT_GT(c, 840);
    EXPECT_LT(c, 1160);
  }
}

TEST(ShuffleV2Test, PlanFollowsTheOrderWithoutMaterializingIt) {
  const auto lengths = Lengths(101);
  const std::vector<uint64_t> expected = EpochOrder(101, 7, 3, kOrderV2);
  for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens}) {
    for (uint64_t w = 1; w <= 8; ++w) {
      PlanOptions o = Opts(mode, w, w / 2, w % 2 == 0, 7, 3, kOrderV2);
      o.start_position = (w * 13) % 101;
      EpochPlan plan = MakeOrDie(101, lengths, o);
      EXPECT_TRUE(plan.permutation().empty());  // nothing of size n
      for (uint64_t i = 0; i < 101; ++i) {
        ASSERT_EQ(plan.SampleAt(i), expected[i]) << ModeName(mode) << " w=" << w;
      }
    }
  }
}

TEST(ShuffleV2Test, UnknownOrderVersionIsRejected) {
  PlanOptions o;
  o.order = 3;
  Result<EpochPlan> plan = EpochPlan::Make(10, {}, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("order version 3"), std::string::npos);
}

TEST(EpochPlanTest, CopiesShareThePermutation) {
  PlanOptions o;
  o.order = kOrderV1;
  o.world_size = 3;
  EpochPlan a = MakeOrDie(1000, {}, o);
  EpochPlan b = a;
  EXPECT_EQ(a.permutation().data(), b.permutation().data());
  EXPECT_EQ(a.BatchSamples(5), b.BatchSamples(5));
}

}  // namespace
}  // namespace libshard
