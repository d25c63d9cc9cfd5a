// Tests of the node-local order (docs/ORDER.md §5; loader/node_assignment.h, node_steps.h,
// node_locality.h) and of ResolveNodes (libshard/world.h): groups and assignment, exact-once per
// epoch for 1..8 nodes x 1..8 ranks per node in every batching mode, equal steps, each node's
// ranks reading only its samples, resume on the same nodes (step for step) and elastic resume on
// other node counts (the rest of the epoch exactly once), golden values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "libshard/loader.h"
#include "libshard/world.h"
#include "loader/node_assignment.h"
#include "loader/node_locality.h"
#include "loader/node_steps.h"
#include "loader/order.h"

namespace libshard {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// n samples laid out as a packer lays them: back to back in shards of `shard_bytes`, each
// 4 KiB aligned, sizes cycling through `sizes`.
std::vector<SampleSpan> Spans(uint64_t n, std::vector<uint64_t> sizes, uint64_t shard_bytes) {
  std::vector<SampleSpan> out;
  uint32_t shard = 0;
  uint64_t offset = 4096;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t size = sizes[i % sizes.size()];
    if (offset + size > shard_bytes && offset > 4096) {
      ++shard;
      offset = 4096;
    }
    out.push_back({shard, offset, size});
    offset += (size + 4095) / 4096 * 4096;
  }
  return out;
}

std::vector<uint64_t> Lengths(uint64_t n) {
  std::vector<uint64_t> l(n);
  for (uint64_t i = 0; i < n; ++i) l[i] = 1 + (i * 37 + 11) % 50;
  return l;
}

enum class Mode { kSample, kFixed, kTokens, kBucketed };

PlanOptions Base(Mode mode, bool drop_last, uint64_t seed = 5, uint64_t epoch = 2) {
  PlanOptions p;
  p.shuffle = true;
  p.seed = seed;
  p.epoch = epoch;
  p.drop_last = drop_last;
  if (mode == Mode::kFixed) p.batch_size = 3;
  if (mode == Mode::kTokens) p.max_tokens = 90;
  if (mode == Mode::kBucketed) {
    p.batch_size = 4;
    p.bucket_window = 24;
  }
  return p;
}

LoaderOptions Loader(uint32_t rank, uint32_t world, uint32_t nodes, const PlanOptions& p) {
  LoaderOptions o;
  o.order = NodeLocalOrder{.shuffle = p.shuffle, .seed = p.seed, .nodes = nodes};
  o.rank = rank;
  o.world_size = world;
  return o;
}

TEST(NodeGroupBytes, FollowsTheRule) {
  EXPECT_EQ(NodeGroupBytes(0, 4), 4096u);
  EXPECT_EQ(NodeGroupBytes(uint64_t{1} << 50, 2), kMaxNodeGroupBytes);      // 1 PiB: 256 MiB
  EXPECT_EQ(NodeGroupBytes(uint64_t{4} << 30, 4), uint64_t{128} << 20);     // 4 GiB / 32
  EXPECT_EQ(NodeGroupBytes(1000000, 1), 122880u);                           // 125000 down to 4 KiB
}

TEST(NodeAssignment, PartitionsTheDatasetByGroupsAndBalancesCounts) {
  const std::vector<SampleSpan> spans = Spans(700, {5 * kMiB, 9 * kMiB, 3 * kMiB}, 600 * kMiB);
  for (uint32_t nodes : {1u, 2u, 3u, 5u, 8u}) {
    SCOPED_TRACE(nodes);
    Result<NodeAssignment> a = AssignToNodes(spans, 11, nodes, true);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_EQ(a->samples.size(), nodes);
    std::vector<int> owner(spans.size(), -1);
    uint64_t smallest = UINT64_MAX, largest = 0;
    for (uint32_t k = 0; k < nodes; ++k) {
      const std::vector<uint64_t>& s = *a->samples[k];
      EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
      for (uint64_t i : s) {
        ASSERT_EQ(owner[i], -1) << "sample " << i << " on two nodes";
        owner[i] = static_cast<int>(k);
      }
      smallest = std::min<uint64_t>(smallest, s.size());
      largest = std::max<uint64_t>(largest, s.size());
    }
    for (int o : owner) ASSERT_NE(o, -1);
    // A group's samples (same shard, same span of G bytes) share one node.
    for (uint64_t i = 1; i < spans.size(); ++i) {
      if (spans[i].shard == spans[i - 1].shard &&
          spans[i].offset / a->group_bytes == spans[i - 1].offset / a->group_bytes)
        EXPECT_EQ(owner[i], owner[i - 1]) << i;
    }
    // Counts differ by at most the largest group.
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> group_size;
    for (const SampleSpan& s : spans) ++group_size[{s.shard, s.offset / a->group_bytes}];
    uint64_t largest_group = 0;
    for (const auto& [key, count] : group_size) largest_group = std::max(largest_group, count);
    EXPECT_EQ(a->groups, group_size.size());
    EXPECT_LE(largest - smallest, largest_group);
  }
}

TEST(NodeAssignment, DependsOnSeedAndNodesOnlyAndDealsInOrderUnshuffled) {
  const std::vector<SampleSpan> spans = Spans(400, {7 * kMiB}, 512 * kMiB);
  const NodeAssignment a = *AssignToNodes(spans, 3, 4, true);
  const NodeAssignment b = *AssignToNodes(spans, 3, 4, true);
  const NodeAssignment c = *AssignToNodes(spans, 4, 4, true);
  for (uint32_t k = 0; k < 4; ++k) EXPECT_EQ(*a.samples[k], *b.samples[k]);
  bool differs = false;
  for (uint32_t k = 0; k < 4; ++k) differs = differs || *a.samples[k] != *c.samples[k];
  EXPECT_TRUE(differs) << "another seed deals the groups otherwise";
  // Unshuffled: groups dealt in order, round robin while counts tie.
  const NodeAssignment u = *AssignToNodes(spans, 3, 2, false);
  EXPECT_EQ((*u.samples[0])[0], 0u);
}

TEST(NodeAssignment, CountsTheCacheBlocksEachNodeTouches) {
  // 4 samples of 6 MiB in one shard, 4 MiB blocks: every block counted once per node.
  const std::vector<SampleSpan> spans = Spans(4, {6 * kMiB}, 1024 * kMiB);
  const NodeAssignment a = *AssignToNodes(spans, 0, 1, true, 4 * kMiB);
  ASSERT_EQ(a.cached_bytes.size(), 1u);
  // Bytes [4 KiB, 4 KiB + 24 MiB) touch blocks 0..6.
  EXPECT_EQ(a.cached_bytes[0], 7 * 4 * kMiB);
  EXPECT_EQ(a.stored_bytes[0], 24 * kMiB);
}

// Every rank of every node of a NodeLocalEpoch, step by step.
struct Served {
  uint64_t steps = 0;
  // [node][local] -> steps, each the step's samples.
  std::vector<std::vector<std::vector<std::vector<uint64_t>>>> by_rank;
};

Served ServeAll(const std::shared_ptr<const NodeLocalEpoch>& epoch, uint64_t start = 0) {
  Served s;
  s.steps = epoch->steps() - start;
  s.by_rank.resize(epoch->nodes());
  for (uint32_t k = 0; k < epoch->nodes(); ++k) {
    for (uint32_t j = 0; j < epoch->local_world_size(); ++j) {
      NodeLocalSteps rank(epoch, k, j, start);
      EXPECT_EQ(rank.steps(), s.steps);
      std::vector<std::vector<uint64_t>> steps;
      for (uint64_t t = 0; t < rank.steps(); ++t) {
        std::vector<uint64_t> out;
        rank.AppendStepSamples(t, &out);
        EXPECT_EQ(out.size(), rank.StepSize(t));
        EXPECT_FALSE(out.empty());
        steps.push_back(out);
      }
      s.by_rank[k].push_back(steps);
    }
  }
  return s;
}

void CheckEpoch(const std::shared_ptr<const NodeAssignment>& assignment,
                const std::shared_ptr<const NodeLocalEpoch>& epoch, bool drop_last,
                uint64_t n) {
  const Served served = ServeAll(epoch);
  const uint32_t nodes = epoch->nodes();
  const uint32_t local = epoch->local_world_size();
  std::vector<int> seen(n, 0);
  for (uint32_t k = 0; k < nodes; ++k) {
    const std::set<uint64_t> mine(assignment->samples[k]->begin(), assignment->samples[k]->end());
    const uint64_t units = epoch->steps() > 0 ? epoch->NodeUnits(k) : 0;
    for (uint64_t t = 0; t < served.steps; ++t) {
      for (uint32_t j = 0; j < local; ++j) {
        const uint64_t g = t * local + j;
        for (uint64_t i : served.by_rank[k][j][t]) {
          ASSERT_TRUE(mine.count(i)) << "node " << k << " served sample " << i << " of another";
          if (g < units) ++seen[i];  // units past G_k are padding
        }
      }
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (drop_last) {
      ASSERT_LE(seen[i], 1) << "sample " << i;
    } else {
      ASSERT_EQ(seen[i], 1) << "sample " << i;
    }
  }
  // The position counts samples and ends at N.
  if (epoch->steps() > 0) {
    EXPECT_EQ(epoch->Position(0), 0u);
    EXPECT_EQ(epoch->Position(epoch->steps()), n);
    for (uint64_t s = 1; s <= epoch->steps(); ++s)
      EXPECT_LE(epoch->Position(s - 1), epoch->Position(s));
  }
}

TEST(NodeLocalOrder, ExactlyOnceEqualStepsOwnSamplesForOneToEightNodesAndRanks) {
  const uint64_t n = 300;
  const std::vector<SampleSpan> spans = Spans(n, {2 * kMiB, 5 * kMiB, 1 * kMiB}, 128 * kMiB);
  auto lengths = std::make_shared<const std::vector<uint64_t>>(Lengths(n));
  for (uint32_t nodes = 1; nodes <= 8; ++nodes) {
    auto assignment =
        std::make_shared<const NodeAssignment>(*AssignToNodes(spans, 5, nodes, true));
    for (uint32_t local = 1; local <= 8; ++local) {
      for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens, Mode::kBucketed}) {
        for (bool drop_last : {false, true}) {
          SCOPED_TRACE("nodes " + std::to_string(nodes) + " local " + std::to_string(local) +
                       " mode " + std::to_string(static_cast<int>(mode)) +
                       (drop_last ? " drop_last" : ""));
          Result<std::shared_ptr<const NodeLocalEpoch>> epoch =
              NodeLocalEpoch::Make(assignment, lengths, Base(mode, drop_last), local);
          ASSERT_TRUE(epoch.ok()) << epoch.status().ToString();
          CheckEpoch(assignment, *epoch, drop_last, n);
        }
      }
    }
  }
}

TEST(NodeLocalOrder, EpochsShuffleWithinTheNodeAndKeepTheAssignment) {
  const uint64_t n = 200;
  const std::vector<SampleSpan> spans = Spans(n, {3 * kMiB}, 64 * kMiB);
  auto assignment = std::make_shared<const NodeAssignment>(*AssignToNodes(spans, 1, 2, true));
  auto e0 = *NodeLocalEpoch::Make(assignment, nullptr, Base(Mode::kSample, false, 1, 0), 2);
  auto e1 = *NodeLocalEpoch::Make(assignment, nullptr, Base(Mode::kSample, false, 1, 1), 2);
  const Served a = ServeAll(e0);
  const Served b = ServeAll(e1);
  EXPECT_NE(a.by_rank[0][0], b.by_rank[0][0]) << "the node's order changes with the epoch";
  for (uint32_t k = 0; k < 2; ++k) {
    std::set<uint64_t> sa, sb;
    for (const auto& rank : a.by_rank[k])
      for (const auto& step : rank) sa.insert(step.begin(), step.end());
    for (const auto& rank : b.by_rank[k])
      for (const auto& step : rank) sb.insert(step.begin(), step.end());
    EXPECT_EQ(sa, sb) << "node " << k << " reads the same samples every epoch";
  }
}

TEST(NodeLocalOrder, ANodeWithoutSamplesIsAnErrorNamingTheNodes) {
  const std::vector<SampleSpan> spans = Spans(3, {4096}, 64 * kMiB);
  auto assignment = std::make_shared<const NodeAssignment>(*AssignToNodes(spans, 0, 4, true));
  Result<std::shared_ptr<const NodeLocalEpoch>> epoch =
      NodeLocalEpoch::Make(assignment, nullptr, Base(Mode::kSample, false), 1);
  ASSERT_FALSE(epoch.ok());
  EXPECT_THAT(epoch.status().message(), HasSubstr("no sample for node 3 of 4"));
  EXPECT_THAT(epoch.status().message(), HasSubstr("locality='global'"));
}

// The steps of every rank of a world through NodeLocality, as a loader makes them.
std::vector<std::vector<std::vector<uint64_t>>> WorldSteps(
    const std::vector<SampleSpan>& spans, uint32_t world, uint32_t nodes, const PlanOptions& p,
    const std::shared_ptr<const std::vector<uint64_t>>& lengths, const LoaderState* resume) {
  std::vector<std::vector<std::vector<uint64_t>>> out;
  for (uint32_t r = 0; r < world; ++r) {
    LoaderOptions o = Loader(r, world, nodes, p);
    if (resume != nullptr) o.resume = *resume;
    Result<std::unique_ptr<NodeLocality>> locality =
        NodeLocality::MakeFromSpans(spans, o, MapEnvironment({}));
    EXPECT_TRUE(locality.ok()) << locality.status().ToString();
    PlanOptions plan = p;
    plan.rank = r;
    plan.world_size = world;
    Result<std::shared_ptr<const StepSequence>> steps =
        (*locality)->EpochSteps(plan, resume, lengths);
    EXPECT_TRUE(steps.ok()) << steps.status().ToString();
    EXPECT_NE(*steps, nullptr);
    std::vector<std::vector<uint64_t>> rank;
    for (uint64_t t = 0; t < (*steps)->steps(); ++t) {
      std::vector<uint64_t> s;
      (*steps)->AppendStepSamples(t, &s);
      rank.push_back(s);
    }
    out.push_back(rank);
  }
  return out;
}

// The state every rank records after `s` steps of `steps` (one rank's sequence; the same on
// every rank).
LoaderState StateAfter(const StepSequence& steps, const PlanOptions& p, uint64_t s) {
  LoaderState st;
  st.epoch = p.epoch;
  st.position = s == 0 ? 0 : steps.PositionAfter(s - 1);
  st.cursor = steps.Cursor(s);
  return st;
}

std::shared_ptr<const StepSequence> RankSteps(const std::vector<SampleSpan>& spans, uint32_t rank,
                                              uint32_t world, uint32_t nodes,
                                              const PlanOptions& p,
                                              const std::shared_ptr<const std::vector<uint64_t>>& lengths,
                                              const LoaderState* resume = nullptr) {
  LoaderOptions o = Loader(rank, world, nodes, p);
  if (resume != nullptr) o.resume = *resume;
  auto locality = *NodeLocality::MakeFromSpans(spans, o, MapEnvironment({}));
  PlanOptions plan = p;
  plan.rank = rank;
  plan.world_size = world;
  return *locality->EpochSteps(plan, resume, lengths);
}

TEST(NodeLocalOrder, ResumeOnTheSameNodesEqualsTheUninterruptedRun) {
  const uint64_t n = 240;
  const std::vector<SampleSpan> spans = Spans(n, {2 * kMiB, 6 * kMiB}, 96 * kMiB);
  auto lengths = std::make_shared<const std::vector<uint64_t>>(Lengths(n));
  for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens, Mode::kBucketed}) {
    const PlanOptions p = Base(mode, false);
    const uint32_t nodes = 3, world = 6;
    const auto whole = WorldSteps(spans, world, nodes, p, lengths, nullptr);
    const auto rank0 = RankSteps(spans, 0, world, nodes, p, lengths);
    for (uint64_t s : {uint64_t{1}, whole[0].size() / 2, whole[0].size() - 1}) {
      SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)) + " s " + std::to_string(s));
      const LoaderState state = StateAfter(*rank0, p, s);
      EXPECT_EQ(state.order_version(), 3u);
      ASSERT_EQ(state.kind(), OrderKind::kNodeLocal);
      const NodeProgress& progress = state.get<NodeLocalCursor>()->progress;
      EXPECT_EQ(progress.nodes, nodes);
      EXPECT_EQ(progress.local_world_size, 2u);
      EXPECT_EQ(progress.steps, s);
      EXPECT_EQ(state.seed(), p.seed);
      const auto resumed = WorldSteps(spans, world, nodes, p, lengths, &state);
      for (uint32_t r = 0; r < world; ++r) {
        ASSERT_EQ(resumed[r].size(), whole[r].size() - s);
        for (uint64_t t = 0; t < resumed[r].size(); ++t)
          ASSERT_EQ(resumed[r][t], whole[r][s + t]) << "rank " << r << " step " << t;
      }
    }
  }
}

// Elastic: an epoch interrupted on (nodes, world) after s steps resumes on (nodes2, world2); what
// was consumed before and what the new world serves (padding aside) is every sample once.
void CheckElastic(Mode mode, uint32_t nodes, uint32_t world, uint32_t nodes2, uint32_t world2,
                  bool global_after) {
  const uint64_t n = 180;
  const std::vector<SampleSpan> spans = Spans(n, {3 * kMiB, 1 * kMiB}, 50 * kMiB);
  auto lengths = std::make_shared<const std::vector<uint64_t>>(Lengths(n));
  const PlanOptions p = Base(mode, false);
  const auto before = WorldSteps(spans, world, nodes, p, lengths, nullptr);
  const auto rank0 = RankSteps(spans, 0, world, nodes, p, lengths);
  const uint64_t s = before[0].size() / 3;
  const LoaderState state = StateAfter(*rank0, p, s);
  std::multiset<uint64_t> consumed;
  for (uint32_t r = 0; r < world; ++r)
    for (uint64_t t = 0; t < s; ++t) consumed.insert(before[r][t].begin(), before[r][t].end());
  // Padding aside, the first s steps consumed each of `position` samples once.
  std::set<uint64_t> consumed_set(consumed.begin(), consumed.end());
  ASSERT_EQ(consumed_set.size(), consumed.size());
  ASSERT_EQ(consumed.size(), state.position);

  std::multiset<uint64_t> rest;
  uint64_t steps = 0;
  for (uint32_t r = 0; r < world2; ++r) {
    LoaderOptions o = Loader(r, world2, nodes2, p);
    if (global_after) o.order = Order::Shuffled(p.seed);
    o.resume = state;
    auto locality = *NodeLocality::MakeFromSpans(spans, o, MapEnvironment({}));
    PlanOptions plan = p;
    plan.rank = r;
    plan.world_size = world2;
    Result<std::shared_ptr<const StepSequence>> seq = locality->EpochSteps(plan, &state, lengths);
    ASSERT_TRUE(seq.ok()) << seq.status().ToString();
    if (r == 0) steps = (*seq)->steps();
    ASSERT_EQ((*seq)->steps(), steps) << "every rank takes the same steps";
    for (uint64_t t = 0; t < (*seq)->steps(); ++t) {
      std::vector<uint64_t> out;
      (*seq)->AppendStepSamples(t, &out);
      rest.insert(out.begin(), out.end());
    }
    const OrderCursor after = (*seq)->Cursor(1);
    ASSERT_TRUE(std::holds_alternative<NodeLocalCursor>(after));
    EXPECT_EQ(std::get<NodeLocalCursor>(after).progress, state.get<NodeLocalCursor>()->progress)
        << "the interrupted epoch's node progress stays";
    if ((*seq)->steps() > 0) EXPECT_EQ((*seq)->PositionAfter((*seq)->steps() - 1), n);
  }
  const std::set<uint64_t> rest_set(rest.begin(), rest.end());
  for (uint64_t i = 0; i < n; ++i) {
    const bool before_i = consumed_set.count(i) > 0;
    const bool after_i = rest_set.count(i) > 0;
    ASSERT_NE(before_i, after_i) << "sample " << i << (before_i ? " twice" : " never");
  }
  // Padding repeats at most one unit per rank.
  const uint64_t unit = mode == Mode::kSample ? 1 : mode == Mode::kFixed ? 3 : 90;
  EXPECT_LE(rest.size() - rest_set.size(), uint64_t{world2} * unit);
}

TEST(NodeLocalOrder, ElasticResumeOnOtherNodesServesTheRestOfTheEpochExactlyOnce) {
  for (Mode mode : {Mode::kSample, Mode::kFixed, Mode::kTokens, Mode::kBucketed}) {
    SCOPED_TRACE(static_cast<int>(mode));
    CheckElastic(mode, 2, 4, 3, 6, false);  // more nodes
    CheckElastic(mode, 4, 8, 2, 2, false);  // fewer nodes, fewer ranks per node
    CheckElastic(mode, 2, 4, 2, 8, false);  // the same nodes, more ranks per node
    CheckElastic(mode, 3, 3, 1, 5, true);   // resumed without locality
  }
}

TEST(NodeLocalOrder, AStateSavedInTheRestResumesInTheRestOnAnyWorld) {
  const uint64_t n = 150;
  const std::vector<SampleSpan> spans = Spans(n, {2 * kMiB}, 40 * kMiB);
  const PlanOptions p = Base(Mode::kSample, false);
  const auto rank0 = RankSteps(spans, 0, 4, 2, p, nullptr);
  const LoaderState first = StateAfter(*rank0, p, 10);
  // On 3 nodes of 1: the rest; after 5 of its steps, a state; then on 1 node of 2.
  const auto rest3 = RankSteps(spans, 0, 3, 3, p, nullptr, &first);
  const LoaderState second = StateAfter(*rest3, p, 5);
  EXPECT_EQ(second.get<NodeLocalCursor>()->progress, first.get<NodeLocalCursor>()->progress);
  EXPECT_EQ(second.position, first.position + 15);
  std::multiset<uint64_t> served;
  for (uint32_t r = 0; r < 2; ++r) {
    const auto seq = RankSteps(spans, r, 2, 1, p, nullptr, &second);
    for (uint64_t t = 0; t < seq->steps(); ++t) {
      std::vector<uint64_t> out;
      seq->AppendStepSamples(t, &out);
      served.insert(out.begin(), out.end());
    }
  }
  // The 95 samples left, plus padding (from the start of R, as §3 pads) to equal steps.
  const std::set<uint64_t> distinct(served.begin(), served.end());
  EXPECT_EQ(served.size(), 96u);
  EXPECT_GE(distinct.size(), n - second.position);
}

TEST(NodeLocalOrder, AStateOfAnotherDatasetIsRefused) {
  const std::vector<SampleSpan> spans = Spans(100, {2 * kMiB}, 40 * kMiB);
  const PlanOptions p = Base(Mode::kSample, false);
  LoaderState bad;
  bad.epoch = p.epoch;
  bad.position = 5;
  bad.cursor = NodeLocalCursor{.seed = p.seed, .progress = {2, 2, 40}};  // more steps than it has
  LoaderOptions o = Loader(0, 4, 2, p);
  o.resume = bad;
  auto locality = *NodeLocality::MakeFromSpans(spans, o, MapEnvironment({}));
  PlanOptions plan = p;
  plan.world_size = 4;
  Result<std::shared_ptr<const StepSequence>> seq = locality->EpochSteps(plan, &bad, nullptr);
  ASSERT_FALSE(seq.ok());
  EXPECT_THAT(seq.status().message(), HasSubstr("another dataset"));
}

// Golden values: docs/ORDER.md §5 transcribed independently in tests/order_golden.py.
TEST(NodeLocalOrder, GoldenAssignmentAndFirstSteps) {
  const std::vector<SampleSpan> spans = Spans(40, {3 * kMiB, 5 * kMiB}, 64 * kMiB);
  const NodeAssignment a = *AssignToNodes(spans, 42, 3, true);
  EXPECT_EQ(a.group_bytes, 6987776u);  // 160 MiB / 24, rounded down to 4 KiB
  EXPECT_EQ(*a.samples[0], (std::vector<uint64_t>{4, 5, 12, 13, 14, 17, 18, 19, 27, 28, 29, 36, 37, 38}));
  EXPECT_EQ(*a.samples[1], (std::vector<uint64_t>{2, 3, 9, 15, 16, 22, 23, 24, 25, 26, 32, 33, 34, 35}));
  auto assignment = std::make_shared<const NodeAssignment>(a);
  PlanOptions p;
  p.seed = 42;
  p.epoch = 1;
  auto epoch = *NodeLocalEpoch::Make(assignment, nullptr, p, 2);
  std::vector<uint64_t> firsts;
  for (uint32_t k = 0; k < 3; ++k) {
    for (uint32_t j = 0; j < 2; ++j) {
      NodeLocalSteps rank(epoch, k, j, 0);
      for (uint64_t t = 0; t < 2; ++t) rank.AppendStepSamples(t, &firsts);
    }
  }
  EXPECT_EQ(firsts, (std::vector<uint64_t>{17, 38, 13, 29, 26, 35, 25, 34, 10, 20, 8, 6}));
}

TEST(ResolveNodes, FromArgumentsTorchrunAndSlurm) {
  Nodes n = *ResolveNodes(5, 8, {.nodes = 2}, MapEnvironment({}));
  EXPECT_EQ(n.nodes, 2u);
  EXPECT_EQ(n.local_world_size, 4u);
  EXPECT_EQ(n.node_rank, 1u);
  EXPECT_EQ(n.local_rank, 1u);
  EXPECT_EQ(n.source, "arguments");
  n = *ResolveNodes(3, 4, {}, MapEnvironment({}));
  EXPECT_EQ(n.nodes, 1u);
  EXPECT_EQ(n.source, "default");
  n = *ResolveNodes(6, 8, {},
                    MapEnvironment({{"GROUP_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"},
                                    {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"}}));
  EXPECT_EQ(n.nodes, 2u);
  EXPECT_EQ(n.node_rank, 1u);
  EXPECT_EQ(n.source, "GROUP_WORLD_SIZE");
  n = *ResolveNodes(6, 8, {}, MapEnvironment({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "2"}}));
  EXPECT_EQ(n.nodes, 4u);
  EXPECT_EQ(n.node_rank, 3u);
  n = *ResolveNodes(5, 6, {},
                    MapEnvironment({{"SLURM_JOB_NUM_NODES", "3"}, {"SLURM_NODEID", "2"},
                                    {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(n.nodes, 3u);
  EXPECT_EQ(n.node_rank, 2u);
  EXPECT_EQ(n.local_rank, 1u);
  EXPECT_EQ(n.source, "SLURM_JOB_NUM_NODES");
  // Explicit nodes win over the launcher's.
  n = *ResolveNodes(1, 4, {.nodes = 4}, MapEnvironment({{"GROUP_WORLD_SIZE", "2"}}));
  EXPECT_EQ(n.nodes, 4u);
}

TEST(ResolveNodes, InconsistentValuesAreErrorsNamingThem) {
  Result<Nodes> r = ResolveNodes(0, 6, {.nodes = 4}, MapEnvironment({}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("does not divide world_size 6"));
  r = ResolveNodes(5, 8, {.nodes = 2, .node_rank = 0}, MapEnvironment({}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("node_rank is 0"));
  EXPECT_THAT(r.status().message(), HasSubstr("numbered node by node"));
  r = ResolveNodes(5, 8, {}, MapEnvironment({{"GROUP_WORLD_SIZE", "2"}, {"GROUP_RANK", "0"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("GROUP_RANK is 0"));
  r = ResolveNodes(5, 8, {}, MapEnvironment({{"GROUP_WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("LOCAL_RANK is 3"));
  r = ResolveNodes(0, 8, {}, MapEnvironment({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "3"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("LOCAL_WORLD_SIZE=3"));
  r = ResolveNodes(0, 4, {}, MapEnvironment({{"GROUP_WORLD_SIZE", "x"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("GROUP_WORLD_SIZE"));
}

TEST(LoaderOptionsNodeLocality, OptionTableAndValidation) {
  LoaderOptions o;
  ASSERT_TRUE(LoaderOptionTable().Set(o, "locality", OptionValue::Text("node")).ok());
  ASSERT_EQ(o.order.kind(), OrderKind::kNodeLocal);
  EXPECT_FALSE(LoaderOptionTable().Set(o, "locality", OptionValue::Text("rack")).ok());
  ASSERT_TRUE(LoaderOptionTable().Set(o, "node_rank", OptionValue::Integer(3)).ok());
  EXPECT_EQ(o.order.get<NodeLocalOrder>()->node_rank, 3u);
  ASSERT_TRUE(LoaderOptionTable().Set(o, "node_rank", OptionValue::None()).ok());
  EXPECT_EQ(o.order.get<NodeLocalOrder>()->node_rank, kAutoNodeRank);
  // Order version 1 cannot be node-local: a spelling that asks for it is refused.
  EXPECT_FALSE(LoaderOptionTable().Set(o, "order", OptionValue::Integer(1)).ok());
  LoaderState s;
  s.cursor = NodeLocalCursor{};
  s.position = 4;
  o.resume = s;
  const Status missing = ValidateLoaderOptions(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("resume.locality"));
  o.resume->position = 0;  // the start of an epoch needs none
  EXPECT_TRUE(ValidateLoaderOptions(o).ok());
}

}  // namespace
}  // namespace libshard
