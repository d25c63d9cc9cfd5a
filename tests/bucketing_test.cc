// Tests of length-aware batching and padded token budgets (docs/ORDER.md §2 and
// §2a): the plan against an oracle written from the contract's text, exact-once
// coverage, equal steps per rank, resume on changing world sizes, the budget never exceeded,
// and the padding it saves.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "loader/batching.h"
#include "loader/bucketing.h"
#include "loader/order.h"

namespace libshard {
namespace {

using ::testing::HasSubstr;
using Units = std::vector<std::vector<uint64_t>>;

// ---- The oracle: section 2a written out independently of bucketing.cc and order.cc ----

uint64_t OMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct ORng {
  uint64_t s;
  uint64_t Next() { return OMix(s += 0x9E3779B97F4A7C15ull); }
  uint64_t Below(uint64_t m) {  // Lemire with rejection
    unsigned __int128 w = static_cast<unsigned __int128>(Next()) * m;
    uint64_t lo = static_cast<uint64_t>(w);
    if (lo < m) {
      const uint64_t t = (0 - m) % m;
      while (lo < t) {
        w = static_cast<unsigned __int128>(Next()) * m;
        lo = static_cast<uint64_t>(w);
      }
    }
    return static_cast<uint64_t>(w >> 64);
  }
};

bool OFits(const PlanOptions& o, const std::vector<uint64_t>& unit,
           const std::vector<uint64_t>& lengths, uint64_t next_len) {
  uint64_t sum = next_len;
  uint64_t longest = next_len;
  for (uint64_t s : unit) {
    sum += lengths[s];
    longest = std::max(longest, lengths[s]);
  }
  if (o.budget == TokenBudget::kPadded) return (unit.size() + 1) * longest <= o.max_tokens;
  return sum <= o.max_tokens;
}

// Every unit of the epoch from position 0, window by window.
Units OracleAllUnits(const std::vector<uint64_t>& p, const std::vector<uint64_t>& lengths,
                     const PlanOptions& o) {
  const uint64_t n = p.size();
  uint64_t m = o.bucket_window;
  if (o.batch_size > 1) m = (m + o.batch_size - 1) / o.batch_size * o.batch_size;
  Units all;
  for (uint64_t w = 0; w * m < n; ++w) {
    std::vector<std::pair<uint64_t, uint64_t>> items;
    for (uint64_t i = w * m; i < std::min(n, (w + 1) * m); ++i)
      items.push_back({lengths[p[i]], p[i]});
    std::sort(items.begin(), items.end());
    Units units;
    std::vector<uint64_t> cur;
    for (const auto& [len, s] : items) {
      if (o.batch_size > 1) {
        cur.push_back(s);
        if (cur.size() == o.batch_size) units.push_back(std::exchange(cur, {}));
        continue;
      }
      if (!cur.empty() && !OFits(o, cur, lengths, len)) units.push_back(std::exchange(cur, {}));
      cur.push_back(s);
      if (len > o.max_tokens) units.push_back(std::exchange(cur, {}));
    }
    if (!cur.empty()) units.push_back(cur);
    if (o.shuffle) {
      uint64_t u = units.size();
      if (o.batch_size > 1 && u > 0 && units.back().size() < o.batch_size) --u;
      ORng rng{OMix(OMix(OMix(o.seed) + o.epoch) ^ OMix(w + 0x6275636B65747321ull))};
      for (uint64_t i = u; i > 1; --i) std::swap(units[i - 1], units[rng.Below(i)]);
    }
    all.insert(all.end(), units.begin(), units.end());
  }
  return all;
}

// The global sequence from o.start_position with striping and padding (sections 2a, 3).
Units OracleGlobal(const std::vector<uint64_t>& p, const std::vector<uint64_t>& lengths,
                   const PlanOptions& o) {
  Units all = OracleAllUnits(p, lengths, o);
  Units epoch = all;
  if (o.drop_last && o.batch_size > 1 && !epoch.empty() && epoch.back().size() < o.batch_size)
    epoch.pop_back();
  Units units;
  uint64_t pos = 0;
  for (const auto& u : epoch) {
    if (pos + u.size() <= o.start_position) {
      pos += u.size();
      continue;
    }
    const uint64_t skip = o.start_position > pos ? o.start_position - pos : 0;
    units.emplace_back(u.begin() + static_cast<std::ptrdiff_t>(skip), u.end());
    pos += u.size();
  }
  const uint64_t g = units.size();
  const uint64_t w = o.world_size;
  const uint64_t steps = o.drop_last ? g / w : (g + w - 1) / w;
  units.resize(std::min<uint64_t>(g, steps * w));
  for (uint64_t j = 0; units.size() < steps * w; ++j) units.push_back(all[j % all.size()]);
  return units;
}

// ---- Helpers ----

std::vector<uint64_t> RandomLengths(uint64_t n, uint64_t lo, uint64_t hi, uint64_t seed) {
  std::vector<uint64_t> lengths(n);
  ORng rng{seed};
  for (uint64_t& l : lengths) l = lo + rng.Below(hi - lo + 1);
  return lengths;
}

EpochPlan MakeOrDie(uint64_t n, const std::vector<uint64_t>& lengths, const PlanOptions& o) {
  Result<EpochPlan> plan = EpochPlan::Make(n, lengths, o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::move(plan).value();
}

// Steps of every rank, as the global unit sequence g = k W + r; also checks equal step counts
// and that PositionAfter agrees across ranks.
Units RunGlobal(uint64_t n, const std::vector<uint64_t>& lengths, const PlanOptions& o,
                std::vector<uint64_t>* positions = nullptr) {
  const EpochPlan plan0 = MakeOrDie(n, lengths, o);
  const uint64_t steps = plan0.batches_for_rank();
  Units global(steps * o.world_size);
  for (uint64_t r = 0; r < o.world_size; ++r) {
    PlanOptions ro = o;
    ro.rank = r;
    const EpochPlan plan = MakeOrDie(n, lengths, ro);
    EXPECT_EQ(plan.batches_for_rank(), steps) << "rank " << r;
    for (uint64_t k = 0; k < steps; ++k) {
      global[k * o.world_size + r] = plan.BatchSamples(k);
      EXPECT_EQ(plan.PositionAfter(k), plan0.PositionAfter(k));
    }
  }
  if (positions != nullptr)
    for (uint64_t k = 0; k < steps; ++k) positions->push_back(plan0.PositionAfter(k));
  return global;
}

PlanOptions Bucketed(uint64_t window, uint64_t w, bool drop, uint64_t batch, uint64_t tokens,
                     TokenBudget budget) {
  PlanOptions o;
  o.shuffle = true;
  o.seed = 11;
  o.epoch = 2;
  o.world_size = w;
  o.drop_last = drop;
  o.batch_size = batch;
  o.max_tokens = tokens;
  o.budget = budget;
  o.bucket_window = window;
  return o;
}

struct Config {
  uint64_t batch;
  uint64_t tokens;
  TokenBudget budget;
};
const Config kConfigs[] = {{3, 0, TokenBudget::kSum},
                           {0, 100, TokenBudget::kSum},
                           {0, 100, TokenBudget::kPadded}};

// ---- Tests ----

TEST(BucketingTest, PlanEqualsTheContractOracle) {
  for (const Config& c : kConfigs) {
    for (uint64_t n : {0ull, 1ull, 13ull, 97ull}) {
      const auto lengths = RandomLengths(n, 1, 130, n + 5);  // some exceed max_tokens = 100
      for (uint64_t window : {1ull, 5ull, 16ull, 1000ull}) {
        for (uint64_t w : {1ull, 2ull, 3ull, 8ull}) {
          for (bool drop : {false, true}) {
            SCOPED_TRACE("batch=" + std::to_string(c.batch) + " padded=" +
                         std::to_string(c.budget == TokenBudget::kPadded) + " n=" +
                         std::to_string(n) + " window=" + std::to_string(window) +
                         " w=" + std::to_string(w) + " drop=" + std::to_string(drop));
            const PlanOptions o = Bucketed(window, w, drop, c.batch, c.tokens, c.budget);
            const EpochPlan plan = MakeOrDie(n, lengths, o);
            std::vector<uint64_t> p(n);
            for (uint64_t i = 0; i < n; ++i) p[i] = plan.BaseAt(i);
            ASSERT_EQ(RunGlobal(n, lengths, o), OracleGlobal(p, lengths, o));
          }
        }
      }
    }
  }
}

TEST(BucketingTest, ExactlyOnceAndEqualStepsForWorldSizes1To8) {
  const uint64_t n = 500;
  const auto lengths = RandomLengths(n, 1, 130, 3);
  for (const Config& c : kConfigs) {
    for (uint64_t w = 1; w <= 8; ++w) {
      for (bool drop : {false, true}) {
        const PlanOptions o = Bucketed(64, w, drop, c.batch, c.tokens, c.budget);
        const Units global = RunGlobal(n, lengths, o);
        ASSERT_EQ(global.size() % w, 0u);
        // The real (non-padding) units come first: every unit of the epoch, less the tail
        // drop_last drops.
        const EpochPlan plan = MakeOrDie(n, lengths, o);
        std::vector<uint64_t> p(n);
        for (uint64_t i = 0; i < n; ++i) p[i] = plan.BaseAt(i);
        Units all = OracleAllUnits(p, lengths, o);
        if (drop && c.batch > 1 && all.back().size() < c.batch) all.pop_back();
        const uint64_t real = drop ? all.size() / w * w : all.size();
        std::vector<uint64_t> seen;
        for (uint64_t g = 0; g < real; ++g) seen.insert(seen.end(), global[g].begin(), global[g].end());
        std::sort(seen.begin(), seen.end());
        EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "w=" << w;
        if (!drop) {
          std::vector<uint64_t> every(n);
          std::iota(every.begin(), every.end(), uint64_t{0});
          EXPECT_EQ(seen, every) << "w=" << w;
        }
      }
    }
  }
}

TEST(BucketingTest, ChainOfResumesOnChangingWorldSizesDeliversSExactlyOnce) {
  const uint64_t n = 401;
  const auto lengths = RandomLengths(n, 1, 130, 9);
  for (const Config& c : kConfigs) {
    const PlanOptions base = Bucketed(50, 1, false, c.batch, c.tokens, c.budget);
    const EpochPlan plan = MakeOrDie(n, lengths, base);
    std::vector<uint64_t> s(n);
    for (uint64_t i = 0; i < n; ++i) s[i] = plan.SampleAt(i);
    std::vector<uint64_t> sorted = s;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "S is a permutation";

    std::vector<uint64_t> delivered;
    uint64_t position = 0;
    const uint64_t world_sizes[] = {4, 1, 7, 2, 8, 3, 5, 6};
    for (uint64_t i = 0; position < n; ++i) {
      PlanOptions o = base;
      o.world_size = world_sizes[i % 8];
      o.start_position = position;
      std::vector<uint64_t> positions;
      const Units global = RunGlobal(n, lengths, o, &positions);
      ASSERT_FALSE(positions.empty());
      const uint64_t take = std::min<uint64_t>(2, positions.size() - 1);
      if (take == 0) break;
      for (uint64_t g = 0; g < take * o.world_size; ++g)
        delivered.insert(delivered.end(), global[g].begin(), global[g].end());
      position = positions[take - 1];
      ASSERT_EQ(delivered, std::vector<uint64_t>(s.begin(), s.begin() + position))
          << "after resume " << i;
    }
    EXPECT_GT(position, n / 2);
  }
}

TEST(BucketingTest, ResumeWithTheSameWorldSizeIsStepForStepIdentical) {
  const uint64_t n = 300;
  const auto lengths = RandomLengths(n, 1, 130, 4);
  for (const Config& c : kConfigs) {
    PlanOptions o = Bucketed(40, 3, false, c.batch, c.tokens, c.budget);
    std::vector<uint64_t> positions;
    const Units first = RunGlobal(n, lengths, o, &positions);
    for (uint64_t k = 0; k + 1 < positions.size(); ++k) {
      o.start_position = positions[k];
      const Units rest = RunGlobal(n, lengths, o);
      ASSERT_EQ(rest, Units(first.begin() + static_cast<std::ptrdiff_t>((k + 1) * 3),
                            first.end()))
          << "resumed after step " << k;
    }
  }
}

TEST(BucketingTest, PaddedBudgetIsNeverExceeded) {
  const uint64_t n = 3000;
  const auto lengths = RandomLengths(n, 1, 700, 5);  // some longer than the budget
  for (uint64_t window : {0ull, 1ull, 37ull, 512ull}) {
    PlanOptions o = Bucketed(window, 2, false, 0, 640, TokenBudget::kPadded);
    const EpochPlan plan = MakeOrDie(n, lengths, o);
    for (uint64_t r = 0; r < 2; ++r) {
      const EpochPlan rp = plan.ForRank(r);
      for (uint64_t k = 0; k < rp.batches_for_rank(); ++k) {
        const auto batch = rp.BatchSamples(k);
        uint64_t longest = 0;
        for (uint64_t s : batch) longest = std::max(longest, lengths[s]);
        if (batch.size() == 1 && longest > 640) continue;  // oversized: a batch of its own
        ASSERT_LE(batch.size() * longest, 640u) << "window " << window << " step " << k;
      }
    }
  }
}

TEST(BucketingTest, OversizedSampleCanBeAnErrorUnderBucketing) {
  const std::vector<uint64_t> lengths = {5, 50, 7, 3};
  PlanOptions o = Bucketed(2, 1, false, 0, 10, TokenBudget::kPadded);
  o.oversized = OversizedSample::kError;
  Result<EpochPlan> plan = EpochPlan::Make(4, lengths, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("sample 1 has 50 tokens"));
}

// Issue 16's yardstick from the plan alone: lengths 256-2048, max_tokens 8192, padded budget.
TEST(BucketingTest, BucketingCutsPaddingBelowTenPercent) {
  const uint64_t n = 20000;
  const auto lengths = RandomLengths(n, 256, 2048, 77);
  const auto padding_share = [&](uint64_t window, TokenBudget budget, uint64_t* worst) {
    const EpochPlan plan = MakeOrDie(n, lengths, Bucketed(window, 1, false, 0, 8192, budget));
    uint64_t positions = 0;
    uint64_t tokens = 0;
    *worst = 0;
    for (uint64_t k = 0; k < plan.batches_for_rank(); ++k) {
      uint64_t longest = 0;
      const auto batch = plan.BatchSamples(k);
      for (uint64_t s : batch) {
        longest = std::max(longest, lengths[s]);
        tokens += lengths[s];
      }
      positions += batch.size() * longest;
      *worst = std::max<uint64_t>(*worst, batch.size() * longest);
    }
    return static_cast<double>(positions - tokens) / positions;
  };
  uint64_t worst = 0;
  const double summed = padding_share(0, TokenBudget::kSum, &worst);
  EXPECT_GT(worst, 8192u) << "a summed budget lets a padded batch outgrow it";
  EXPECT_GT(summed, 0.3);
  const double padded = padding_share(0, TokenBudget::kPadded, &worst);
  EXPECT_LE(worst, 8192u);
  const double bucketed = padding_share(4096, TokenBudget::kPadded, &worst);
  EXPECT_LE(worst, 8192u);
  EXPECT_LT(bucketed, 0.10) << "summed " << summed << ", padded " << padded;
  EXPECT_LT(bucketed, padded);
}

TEST(BucketingTest, WindowsAreSortedRunsAndBatchesAreShuffledPerEpoch) {
  const uint64_t n = 2000;
  const auto lengths = RandomLengths(n, 1, 1000, 21);
  PlanOptions o = Bucketed(500, 1, false, 8, 0, TokenBudget::kSum);
  const EpochPlan e2 = MakeOrDie(n, lengths, o);
  // Every batch is a run of similar lengths: its samples are consecutive in its window's sorted
  // order, so its span of lengths is small next to the whole range.
  uint64_t wide = 0;
  for (uint64_t k = 0; k < e2.batches_for_rank(); ++k) {
    const auto batch = e2.BatchSamples(k);
    uint64_t lo = UINT64_MAX;
    uint64_t hi = 0;
    for (uint64_t s : batch) {
      lo = std::min(lo, lengths[s]);
      hi = std::max(hi, lengths[s]);
    }
    if (hi - lo > 60) ++wide;
  }
  EXPECT_LE(wide, 2u);
  // The order of batches is shuffled: lengths of consecutive batches are not ascending.
  uint64_t ascending = 0;
  for (uint64_t k = 1; k < e2.batches_for_rank(); ++k)
    ascending += lengths[e2.BatchSamples(k)[0]] >= lengths[e2.BatchSamples(k - 1)[0]];
  EXPECT_LT(ascending, e2.batches_for_rank() * 3 / 4);
  // Another epoch (and another seed) gives other batches; the same epoch the same ones.
  o.epoch = 3;
  const EpochPlan e3 = MakeOrDie(n, lengths, o);
  EXPECT_NE(e2.BatchSamples(0), e3.BatchSamples(0));
  o.epoch = 2;
  EXPECT_EQ(MakeOrDie(n, lengths, o).BatchSamples(5), e2.BatchSamples(5));
  // Unshuffled: the first window's batches in ascending length.
  o.shuffle = false;
  const EpochPlan plain = MakeOrDie(n, lengths, o);
  for (uint64_t k = 1; k < 500 / 8; ++k)
    EXPECT_LE(lengths[plain.BatchSamples(k - 1).back()], lengths[plain.BatchSamples(k)[0]]);
}

TEST(BucketingTest, GoldenValues) {
  // Pins section 2a: any change here breaks the resume of saved states.
  std::vector<uint64_t> lengths(64);
  for (uint64_t i = 0; i < 64; ++i) lengths[i] = 1 + (i * 37 + i * i * 11) % 130;
  PlanOptions o = Bucketed(16, 1, false, 0, 200, TokenBudget::kPadded);
  o.seed = 1;
  o.epoch = 0;
  const EpochPlan plan = MakeOrDie(64, lengths, o);
  std::vector<uint64_t> first;
  for (uint64_t i = 0; i < 16; ++i) first.push_back(plan.SampleAt(i));
  EXPECT_EQ(first, (std::vector<uint64_t>{48, 55, 28, 44, 29, 13, 31, 57, 58, 47, 34, 18, 14, 24, 39, 41}));
  EXPECT_EQ(plan.BatchSamples(0), (std::vector<uint64_t>{48, 55}));
}

TEST(BucketingTest, EffectiveWindowAndValidation) {
  EXPECT_EQ(EffectiveBucketWindow(10, 3), 12u);
  EXPECT_EQ(EffectiveBucketWindow(12, 3), 12u);
  EXPECT_EQ(EffectiveBucketWindow(10, 0), 10u);
  EXPECT_EQ(EffectiveBucketWindow(0, 4), 0u);
  EXPECT_GT(EffectiveBucketWindow(UINT64_MAX, 3), 0u);
  const std::vector<uint64_t> lengths(10, 5);
  PlanOptions o;
  o.bucket_window = 4;
  Result<EpochPlan> plan = EpochPlan::Make(10, lengths, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("set max_tokens or batch_size"));
  o.batch_size = 2;
  EXPECT_FALSE(EpochPlan::Make(10, std::vector<uint64_t>(3, 1), o).ok()) << "lengths missing";
  EXPECT_TRUE(EpochPlan::Make(10, lengths, o).ok());

  LoaderOptions lo;
  lo.bucket_window = 8;
  EXPECT_FALSE(ValidateLoaderOptions(lo).ok());
  lo.batch_size = 4;
  EXPECT_TRUE(ValidateLoaderOptions(lo).ok());
  lo.bucket_window = kMaxLoaderBucketWindow + 1;
  EXPECT_FALSE(ValidateLoaderOptions(lo).ok());
}

TEST(BucketingTest, PlanOptionsForResolvesTheBudget) {
  // The budget and the window are decided by ResolveLoaderOptions; the plan takes them.
  const auto plan = [](const LoaderOptions& o) { return PlanOptionsFor(*ResolveLoaderOptions(o)); };
  LoaderOptions lo;
  lo.max_tokens = 100;
  EXPECT_EQ(plan(lo).budget, TokenBudget::kSum);
  EXPECT_EQ(plan(lo).bucket_window, 0u);
  lo.collate = Collate::kPad;
  EXPECT_EQ(plan(lo).budget, TokenBudget::kPadded);
  EXPECT_EQ(plan(lo).bucket_window, kAutoBucketWindowSize);  // as Python's "auto"
  lo.collate = Collate::kPack;
  EXPECT_EQ(plan(lo).budget, TokenBudget::kSum);
  lo.token_budget = TokenBudget::kPadded;
  EXPECT_EQ(plan(lo).budget, TokenBudget::kPadded);
  lo.bucket_window = 64;
  lo.oversized = OversizedSample::kError;
  EXPECT_EQ(plan(lo).bucket_window, 64u);
  EXPECT_EQ(plan(lo).oversized, OversizedSample::kError);
}

TEST(BatchLayoutTest, PaddedTokensAndFrom) {
  const std::vector<uint64_t> perm = {0, 1, 2, 3, 4, 5};
  const std::vector<uint64_t> lengths = {2, 5, 1, 1, 9, 3};
  // Padded, T = 10: {2,5} (2x5 = 10), {1,1} then 9 would make 3x9: {1,1}, {9}, {3}.
  const BatchLayout l = BatchLayout::Tokens(perm, lengths, 0, 10, UINT64_MAX, TokenBudget::kPadded);
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l.End(0), 2u);
  EXPECT_EQ(l.End(1), 4u);
  EXPECT_EQ(l.End(2), 5u);
  EXPECT_EQ(l.End(3), 6u);
  const BatchLayout from3 = l.From(3);  // mid-unit: the rest of {2,3} then the others
  ASSERT_EQ(from3.size(), 3u);
  EXPECT_EQ(from3.Begin(0), 3u);
  EXPECT_EQ(from3.End(0), 4u);
  EXPECT_EQ(l.From(4).size(), 2u);
  EXPECT_EQ(l.From(6).size(), 0u);
  EXPECT_EQ(l.From(0).size(), 4u);
  EXPECT_TRUE(FitsBudget(TokenBudget::kPadded, 3, UINT64_MAX / 2, 0, UINT64_MAX - 1) == false);
}

}  // namespace
}  // namespace libshard
