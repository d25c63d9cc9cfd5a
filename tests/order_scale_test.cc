// Exact-once at scale (issue 14): the order contract of docs/ORDER.md checked for world sizes up
// to 1,024 ranks, simulated in one process, over datasets of 1 to 10^6 samples (synthetic
// lengths, no files), for single samples, fixed batches and token-budget batches, drop_last both
// ways, and resumes from random positions onto another world size:
//   - every sample exactly once per epoch (drop_last: at most once, and only the trailing units
//     that do not fill a step for every rank are dropped; otherwise: padding repeats only);
//   - every rank gets the same number of steps;
//   - the global order (step k of rank r is global unit k·W + r) is the same for any world size;
//   - a resume at any step's position on another world size delivers exactly the rest.
// The grid is sampled (fixed seed) to keep the wall time a few seconds on two cores.
// suite: full (tens of seconds: not in make check; make test runs it)
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "loader/order.h"

namespace libshard {
namespace {

enum class Mode { kSample, kFixed, kTokens };

std::string Name(Mode m) {
  return m == Mode::kSample ? "sample" : m == Mode::kFixed ? "fixed" : "tokens";
}

constexpr uint64_t kBatch = 4;
constexpr uint64_t kMaxTokens = 16384;

std::vector<uint64_t> SyntheticLengths(uint64_t n) {
  std::vector<uint64_t> lengths(n);
  std::mt19937_64 rng(n * 7919 + 1);
  // Mostly 1..4096 tokens, some over the budget (a batch of their own), a few empty.
  for (uint64_t& l : lengths) {
    const uint64_t r = rng() % 1000;
    l = r < 5 ? 0 : r < 10 ? kMaxTokens + 1 + rng() % 100 : 1 + rng() % 4096;
  }
  return lengths;
}

PlanOptions Options(uint32_t order, Mode mode, uint64_t world, bool drop_last) {
  PlanOptions o;
  o.order = order;
  o.shuffle = true;
  o.seed = 1234;
  o.epoch = 5;
  o.world_size = world;
  o.drop_last = drop_last;
  o.batch_size = mode == Mode::kFixed ? kBatch : 0;
  o.max_tokens = mode == Mode::kTokens ? kMaxTokens : 0;
  return o;
}

// What all ranks of one plan deliver, in global unit order (step k of rank r is unit k·W + r):
// the samples, and where each unit ends in them.
struct Global {
  std::vector<uint64_t> samples;
  std::vector<uint64_t> unit_ends;
  uint64_t steps = 0;
};

Global RunAllRanks(uint64_t n, const std::vector<uint64_t>& lengths, const PlanOptions& o) {
  auto plan = EpochPlan::Make(n, lengths, o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  Global g;
  if (!plan.ok()) return g;
  g.steps = plan->batches_for_rank();
  std::vector<EpochPlan> ranks;
  ranks.reserve(o.world_size);
  for (uint64_t r = 0; r < o.world_size; ++r) ranks.push_back(plan->ForRank(r));
  // Equal steps on every rank, and ForRank is what Make builds for that rank (spot checks: Make
  // costs a permutation).
  for (uint64_t r : {uint64_t{0}, o.world_size / 2, o.world_size - 1}) {
    PlanOptions ro = o;
    ro.rank = r;
    auto direct = EpochPlan::Make(n, lengths, ro);
    EXPECT_TRUE(direct.ok());
    if (!direct.ok()) return g;
    EXPECT_EQ(direct->batches_for_rank(), g.steps) << "rank " << r;
    for (uint64_t k : {uint64_t{0}, g.steps / 2, g.steps ? g.steps - 1 : 0})
      EXPECT_EQ(direct->BatchSamples(k), ranks[r].BatchSamples(k)) << "rank " << r << " step " << k;
  }
  g.samples.reserve(n + o.world_size * kBatch);
  for (uint64_t k = 0; k < g.steps; ++k) {
    for (uint64_t r = 0; r < o.world_size; ++r) {
      const size_t before = g.samples.size();
      ranks[r].AppendBatchSamples(k, &g.samples);
      EXPECT_GT(g.samples.size(), before) << "rank " << r << " step " << k << " is empty";
      g.unit_ends.push_back(g.samples.size());
    }
  }
  return g;
}

void CheckEpoch(uint32_t order, Mode mode, uint64_t n, uint64_t world, bool drop_last,
                const std::vector<uint64_t>& lengths, const Global& reference) {
  SCOPED_TRACE("order " + std::to_string(order) + " " + Name(mode) + " n=" + std::to_string(n) +
               " world=" + std::to_string(world) + " drop_last=" + std::to_string(drop_last));
  const PlanOptions o = Options(order, mode, world, drop_last);
  const Global g = RunAllRanks(n, lengths, o);
  const uint64_t units = reference.unit_ends.size();
  ASSERT_EQ(g.unit_ends.size(), g.steps * world);
  if (drop_last) {
    ASSERT_EQ(g.steps, units / world);
  } else {
    ASSERT_EQ(g.steps, (units + world - 1) / world);
  }
  // Same global order: the first min(units, steps·W) units are world 1's, unit for unit.
  const uint64_t real = std::min<uint64_t>(units, g.unit_ends.size());
  for (uint64_t u = 0; u < real; ++u) ASSERT_EQ(g.unit_ends[u], reference.unit_ends[u]) << u;
  const uint64_t real_samples = real ? g.unit_ends[real - 1] : 0;
  ASSERT_TRUE(std::equal(g.samples.begin(), g.samples.begin() + real_samples,
                         reference.samples.begin()));
  // Exactly once: world 1 (no drop) is a permutation of [0, n); the padding repeats samples only
  // from the start of the epoch.
  std::vector<uint8_t> seen(n, 0);
  for (uint64_t i = 0; i < real_samples; ++i) {
    ASSERT_LT(g.samples[i], n);
    ASSERT_EQ(seen[g.samples[i]]++, 0) << "sample " << g.samples[i] << " delivered twice";
  }
  if (!drop_last) {
    ASSERT_EQ(real_samples, n) << "samples missing";
    for (uint64_t i = real_samples; i < g.samples.size(); ++i)
      ASSERT_EQ(g.samples[i], reference.samples[(i - real_samples) % n]) << "padding at " << i;
  }
}

// Resume at the position after a random step of a run on `world`, on `world2`: the samples of
// steps 0..k on every rank of the first run, then everything the resumed run delivers (padding
// excluded), is the epoch's sequence exactly.
void CheckResume(uint32_t order, Mode mode, uint64_t n, uint64_t world, uint64_t world2,
                 bool drop_last, const std::vector<uint64_t>& lengths, const Global& reference,
                 std::mt19937_64& rng) {
  SCOPED_TRACE("order " + std::to_string(order) + " " + Name(mode) + " n=" + std::to_string(n) +
               " world " + std::to_string(world) + " -> " + std::to_string(world2) +
               " drop_last=" + std::to_string(drop_last));
  const PlanOptions o = Options(order, mode, world, drop_last);
  auto plan = EpochPlan::Make(n, lengths, o);
  ASSERT_TRUE(plan.ok());
  if (plan->batches_for_rank() < 2) return;
  const uint64_t k = rng() % (plan->batches_for_rank() - 1);
  const uint64_t position = plan->PositionAfter(k);
  const uint64_t consumed_units = (k + 1) * world;
  ASSERT_EQ(position, reference.unit_ends[consumed_units - 1]);  // a unit boundary of world 1's

  PlanOptions o2 = Options(order, mode, world2, drop_last);
  o2.start_position = position;
  auto resumed = EpochPlan::Make(n, lengths, o2);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  const uint64_t remaining_units = reference.unit_ends.size() - consumed_units;
  const uint64_t steps = resumed->batches_for_rank();
  EXPECT_EQ(steps, drop_last ? remaining_units / world2 : (remaining_units + world2 - 1) / world2);
  std::vector<uint64_t> got;
  for (uint64_t s = 0; s < steps; ++s)
    for (uint64_t r = 0; r < world2; ++r) resumed->ForRank(r).AppendBatchSamples(s, &got);
  const uint64_t delivered_units = std::min(steps * world2, remaining_units);
  const uint64_t end = reference.unit_ends[consumed_units + delivered_units - 1];
  ASSERT_GE(got.size(), end - position);
  ASSERT_TRUE(std::equal(reference.samples.begin() + position, reference.samples.begin() + end,
                         got.begin()));
  if (!drop_last) EXPECT_EQ(end, n);
}

// The whole check for one order version (docs/ORDER.md §1).
void CheckScale(uint32_t order) {
  std::mt19937_64 rng(20261201);
  const uint64_t sizes[] = {1, 2, 7, 1023, 4097, 65537, 1000000};
  const uint64_t worlds[] = {1, 2, 3, 8, 63, 64, 257, 1000, 1024};
  for (uint64_t n : sizes) {
    const std::vector<uint64_t> lengths = SyntheticLengths(n);
    for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens}) {
      // World 1 delivers every unit once (drop_last drops only a partial fixed batch).
      const Global reference[2] = {RunAllRanks(n, lengths, Options(order, mode, 1, false)),
                                   RunAllRanks(n, lengths, Options(order, mode, 1, true))};
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      // Every world size for small n; a sample of them (always 1024) for the large ones.
      for (uint64_t world : worlds) {
        if (n >= 65537 && world != 1024 && rng() % 3 != 0) continue;
        for (bool drop_last : {false, true}) {
          CheckEpoch(order, mode, n, world, drop_last, lengths, reference[drop_last]);
          ASSERT_FALSE(::testing::Test::HasFatalFailure());
          const uint64_t world2 = worlds[rng() % std::size(worlds)];
          CheckResume(order, mode, n, world, world2, drop_last, lengths, reference[drop_last], rng);
          ASSERT_FALSE(::testing::Test::HasFatalFailure());
        }
      }
    }
  }
}

TEST(OrderScaleTest, ExactlyOnceEqualStepsSameOrderAndResumeUpTo1024RanksOrderV1) {
  CheckScale(kOrderV1);
}

TEST(OrderScaleTest, ExactlyOnceEqualStepsSameOrderAndResumeUpTo1024RanksOrderV2) {
  CheckScale(kOrderV2);
}

}  // namespace
}  // namespace libshard
