// The split rules of sequence parallelism (libshard/sequence_parallel.h): the table, the checks,
// golden slices of each rule (the worked examples of docs/guide/long-context.md), and over many
// lengths and group sizes that the ranks' rows cover [0, L) exactly once (plus each rule's overlap
// and padding). tests/python/test_sp_rules.py checks the same rules against the trainers' code.
#include "libshard/sequence_parallel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace libshard {
namespace {

constexpr SplitRule kAll[] = {SplitRule::kEven, SplitRule::kSpecForgeUsp,
                              SplitRule::kTorchSpecUsp, SplitRule::kSpeculators};

SequenceSlice Slice(SplitRule rule, uint64_t length, uint32_t n, uint32_t r, uint32_t ttt = 0,
                    uint32_t ulysses = 0, uint64_t max_len = 0) {
  SplitRequest q;
  q.length = length;
  q.max_len = max_len;
  q.sp_size = n;
  q.sp_rank = r;
  q.ttt_length = ttt;
  q.ulysses_size = ulysses;
  Result<SequenceSlice> s = SliceOf(rule, q);
  EXPECT_TRUE(s.ok()) << SplitRuleName(rule) << " L=" << length << " N=" << n << " r=" << r
                      << " ttt=" << ttt << ": " << s.status().ToString();
  return s.ok() ? *s : SequenceSlice{};
}

Status SliceError(SplitRule rule, const SplitRequest& q) {
  Result<SequenceSlice> s = SliceOf(rule, q);
  EXPECT_FALSE(s.ok()) << SplitRuleName(rule) << " L=" << q.length << " N=" << q.sp_size;
  return s.ok() ? Status::OK() : s.status();
}

// ---- the table ----

TEST(SplitRuleTable, EveryRuleHasOneEntryAndItsNamesParse) {
  std::set<std::string> names;
  ASSERT_EQ(SplitRules().size(), std::size(kAll));
  for (size_t i = 0; i < SplitRules().size(); ++i) {
    const SplitRuleInfo& info = SplitRules()[i];
    EXPECT_EQ(info.rule, kAll[i]) << "the table is in SplitRule order";
    EXPECT_EQ(&SplitRuleInfoOf(info.rule).name, &SplitRuleInfoOf(kAll[i]).name);
    EXPECT_EQ(SplitRuleName(info.rule), info.name);
    EXPECT_FALSE(info.trainer.empty());
    EXPECT_FALSE(info.source.empty());
    EXPECT_TRUE(names.insert(std::string(info.name)).second) << info.name;
    Result<SplitRule> parsed = ParseSplitRule(info.name);
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, info.rule);
    for (std::string_view alias : info.aliases) {
      EXPECT_TRUE(names.insert(std::string(alias)).second) << alias;
      Result<SplitRule> a = ParseSplitRule(alias);
      ASSERT_TRUE(a.ok());
      EXPECT_EQ(*a, info.rule);
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"even", "specforge-dspark", "specforge-usp",
                                          "torchspec-usp", "speculators"}));
  EXPECT_TRUE(SplitRuleInfoOf(SplitRule::kSpecForgeUsp).takes_ttt);
  EXPECT_TRUE(SplitRuleInfoOf(SplitRule::kTorchSpecUsp).takes_ttt);
  EXPECT_TRUE(SplitRuleInfoOf(SplitRule::kSpecForgeUsp).zero_last_loss);
  EXPECT_FALSE(SplitRuleInfoOf(SplitRule::kTorchSpecUsp).zero_last_loss);
  EXPECT_TRUE(SplitRuleInfoOf(SplitRule::kSpeculators).needs_multiple);
  EXPECT_TRUE(SplitRuleInfoOf(SplitRule::kSpeculators).packed);
  EXPECT_FALSE(SplitRuleInfoOf(SplitRule::kSpeculators).attention_mask);
}

TEST(SplitRuleTable, AnUnknownNameListsTheRules) {
  for (std::string_view bad : {"", "Even", "usp", "specforge", "ulysses"}) {
    Result<SplitRule> r = ParseSplitRule(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string m = r.status().message();
    EXPECT_NE(m.find("'" + std::string(bad) + "'"), std::string::npos) << m;
    for (const SplitRuleInfo& info : SplitRules())
      EXPECT_NE(m.find("'" + std::string(info.name) + "'"), std::string::npos) << m;
  }
}

// ---- the checks ----

TEST(SplitRuleChecks, RefusesBadGroupsNamingTheValue) {
  for (SplitRule rule : kAll) {
    SplitRequest q;
    q.length = 12;
    q.sp_size = 0;
    Status s = SliceError(rule, q);
    EXPECT_NE(s.message().find("sp_size 0"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string(SplitRuleName(rule))), std::string::npos);

    q.sp_size = 4;
    q.sp_rank = 4;
    s = SliceError(rule, q);
    EXPECT_NE(s.message().find("sp_rank 4"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("0..3"), std::string::npos) << s.message();

    q.sp_rank = 1;
    q.ulysses_size = 3;
    s = SliceError(rule, q);
    EXPECT_NE(s.message().find("ulysses_size 3"), std::string::npos) << s.message();
  }
}

TEST(SplitRuleChecks, TttLengthOnlyForTheUspRules) {
  SplitRequest q;
  q.length = 12;
  q.sp_size = 4;
  q.ttt_length = 2;
  for (SplitRule rule : {SplitRule::kEven, SplitRule::kSpeculators}) {
    Status s = SliceError(rule, q);
    EXPECT_NE(s.message().find("ttt_length = 2"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("specforge-usp"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(SliceOf(SplitRule::kSpecForgeUsp, q).ok());
  EXPECT_TRUE(SliceOf(SplitRule::kTorchSpecUsp, q).ok());
}

TEST(SplitRuleChecks, SpeculatorsNeedsAMultipleOfTheGroup) {
  SplitRequest q;
  q.length = 10;
  q.sp_size = 4;
  Status s = SliceError(SplitRule::kSpeculators, q);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("10 rows is not a multiple of sp_size 4"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("--total-seq-len"), std::string::npos) << s.message();
  q.max_len = 8;  // truncated to a multiple: accepted
  EXPECT_TRUE(SliceOf(SplitRule::kSpeculators, q).ok());
}

TEST(SplitRuleChecks, LengthsThatOverflowAreRefusedNotWrapped) {
  for (SplitRule rule : {SplitRule::kEven, SplitRule::kSpecForgeUsp, SplitRule::kTorchSpecUsp}) {
    SplitRequest q;
    q.length = UINT64_MAX;
    q.sp_size = 7;
    q.sp_rank = 6;
    q.ttt_length = rule == SplitRule::kEven ? 0 : 7;
    Status s = SliceError(rule, q);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("overflows"), std::string::npos) << s.message();
  }
  // A huge length that fits is served, with no wrapped number.
  SequenceSlice s = Slice(SplitRule::kEven, UINT64_MAX - 100, 2, 1);
  EXPECT_EQ(s.stop, UINT64_MAX - 100);
  EXPECT_EQ(s.start, s.chunk);
  SequenceSlice big = Slice(SplitRule::kSpeculators, UINT64_MAX - 1, 2, 1);
  EXPECT_EQ(big.stop, UINT64_MAX - 1);
}

// ---- golden slices (docs/guide/long-context.md's worked examples) ----

struct Golden {
  uint32_t rank;
  uint64_t start, stop, pad_to, offset, position_begin, position_count, position_pad_to,
      batch_pad_to;
};

void ExpectGolden(SplitRule rule, uint64_t length, uint32_t n, uint32_t ttt, uint32_t ulysses,
                  std::initializer_list<Golden> want, uint64_t max_len = 0) {
  for (const Golden& g : want) {
    SCOPED_TRACE(std::string(SplitRuleName(rule)) + " L=" + std::to_string(length) +
                 " N=" + std::to_string(n) + " rank " + std::to_string(g.rank));
    SequenceSlice s = Slice(rule, length, n, g.rank, ttt, ulysses, max_len);
    EXPECT_EQ(s.start, g.start);
    EXPECT_EQ(s.stop, g.stop);
    EXPECT_EQ(s.pad_to, g.pad_to);
    EXPECT_EQ(s.offset, g.offset);
    EXPECT_EQ(s.position_begin, g.position_begin);
    EXPECT_EQ(s.position_count, g.position_count);
    EXPECT_EQ(s.position_pad_to, g.position_pad_to);
    EXPECT_EQ(s.batch_pad_to, g.batch_pad_to);
  }
}

TEST(SplitRuleGolden, Even) {
  // L = 10, N = 4: chunk 3; the last rank reads 1 row and pads 2.
  ExpectGolden(SplitRule::kEven, 10, 4, 0, 0,
               {{0, 0, 3, 3, 0, 0, 3, 3, 3},
                {1, 3, 6, 3, 3, 3, 3, 3, 3},
                {2, 6, 9, 3, 6, 6, 3, 3, 3},
                {3, 9, 10, 3, 9, 9, 3, 3, 3}});
  // L = 5, N = 4: chunk 2; rank 3 holds padding only, its positions run past L.
  ExpectGolden(SplitRule::kEven, 5, 4, 0, 0,
               {{0, 0, 2, 2, 0, 0, 2, 2, 2},
                {2, 4, 5, 2, 4, 4, 2, 2, 2},
                {3, 5, 5, 2, 6, 6, 2, 2, 2}});
  // L = 2 < N = 4: chunk 1, ranks 2 and 3 get one zero row each.
  ExpectGolden(SplitRule::kEven, 2, 4, 0, 0,
               {{1, 1, 2, 1, 1, 1, 1, 1, 1},
                {2, 2, 2, 1, 2, 2, 1, 1, 1},
                {3, 2, 2, 1, 3, 3, 1, 1, 1}});
  // L = 0: nothing anywhere.
  ExpectGolden(SplitRule::kEven, 0, 4, 0, 0,
               {{0, 0, 0, 0, 0, 0, 0, 0, 0}, {3, 0, 0, 0, 0, 0, 0, 0, 0}});
  // max_len truncates first: L = 100 read as 10.
  ExpectGolden(SplitRule::kEven, 100, 4, 0, 0, {{3, 9, 10, 3, 9, 9, 3, 3, 3}}, /*max_len=*/10);
  // The alias is the same rule.
  EXPECT_EQ(*ParseSplitRule("specforge-dspark"), SplitRule::kEven);
}

TEST(SplitRuleGolden, SpecForgeUsp) {
  // L = 10, N = 4, ttt_length 2: chunk 3, local 5; every rank also holds its right neighbour's
  // first 2 rows; the batch length rounds 5 up to 8 (a multiple of N), position_ids to 8·U.
  ExpectGolden(SplitRule::kSpecForgeUsp, 10, 4, 2, 0,
               {{0, 0, 5, 5, 0, 0, 3, 32, 8},
                {1, 3, 8, 5, 3, 3, 3, 32, 8},
                {2, 6, 10, 5, 6, 6, 3, 32, 8},
                {3, 9, 10, 5, 9, 9, 3, 32, 8}});
  // The same with 2 Ulysses × 2 ring ranks: only position_pad_to changes (8·2).
  ExpectGolden(SplitRule::kSpecForgeUsp, 10, 4, 2, 2,
               {{1, 3, 8, 5, 3, 3, 3, 16, 8}, {2, 6, 10, 5, 6, 6, 3, 16, 8}});
  // L = 3 < N = 4, ttt 7 (SpecForge's default): chunk 1, local 8; rank 3 reads nothing.
  ExpectGolden(SplitRule::kSpecForgeUsp, 3, 4, 7, 0,
               {{0, 0, 3, 8, 0, 0, 1, 32, 8},
                {2, 2, 3, 8, 2, 2, 1, 32, 8},
                {3, 3, 3, 8, 3, 3, 1, 32, 8}});
  // L = 0: only the overlap's padding.
  ExpectGolden(SplitRule::kSpecForgeUsp, 0, 2, 1, 0, {{1, 0, 0, 1, 0, 0, 0, 4, 2}});
}

TEST(SplitRuleGolden, TorchSpecUsp) {
  // The rows of specforge-usp; positions cover the rank's ring chunk (chunk·U rows), no rounding.
  // N = 4 as 2 Ulysses × 2 ring ranks: ranks 0, 1 are ring 0, ranks 2, 3 ring 1.
  ExpectGolden(SplitRule::kTorchSpecUsp, 10, 4, 2, 2,
               {{0, 0, 5, 5, 0, 0, 6, 6, 5},
                {1, 3, 8, 5, 3, 0, 6, 6, 5},
                {2, 6, 10, 5, 6, 6, 6, 6, 5},
                {3, 9, 10, 5, 9, 6, 6, 6, 5}});
  // Ulysses only (U = N): one ring, every rank gets positions 0 .. chunk·N - 1.
  ExpectGolden(SplitRule::kTorchSpecUsp, 10, 4, 2, 0,
               {{0, 0, 5, 5, 0, 0, 12, 12, 5}, {3, 9, 10, 5, 9, 0, 12, 12, 5}});
  // Ring only (U = 1): the rank's own chunk, as SpecForge.
  ExpectGolden(SplitRule::kTorchSpecUsp, 10, 4, 2, 1,
               {{2, 6, 10, 5, 6, 6, 3, 3, 5}, {3, 9, 10, 5, 9, 9, 3, 3, 5}});
}

TEST(SplitRuleGolden, Speculators) {
  // The packed row of 12 rows over 4 ranks: 3 rows each, no padding, no generated positions.
  ExpectGolden(SplitRule::kSpeculators, 12, 4, 0, 0,
               {{0, 0, 3, 3, 0, 0, 0, 0, 3},
                {1, 3, 6, 3, 3, 0, 0, 0, 3},
                {3, 9, 12, 3, 9, 0, 0, 0, 3}});
  ExpectGolden(SplitRule::kSpeculators, 0, 4, 0, 0, {{3, 0, 0, 0, 0, 0, 0, 0, 0}});
}

// ---- coverage over many lengths and groups ----

std::vector<uint32_t> Divisors(uint32_t n) {
  std::vector<uint32_t> d;
  for (uint32_t u = 1; u <= n; ++u)
    if (n % u == 0) d.push_back(u);
  return d;
}

TEST(SplitRuleCoverage, EvenCoversEveryRowOnceWithEqualShapes) {
  for (uint64_t length = 0; length <= 130; ++length) {
    for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 9u, 16u, 64u}) {
      uint64_t next = 0;
      for (uint32_t r = 0; r < n; ++r) {
        SequenceSlice s = Slice(SplitRule::kEven, length, n, r);
        ASSERT_EQ(s.full_length, length);
        ASSERT_EQ(s.chunk, (length + n - 1) / n);
        ASSERT_EQ(s.start, next) << "L=" << length << " N=" << n << " r=" << r;  // no gap/overlap
        ASSERT_LE(s.start, s.stop);
        ASSERT_LE(s.stop, length);
        ASSERT_LE(s.rows(), s.pad_to);
        ASSERT_EQ(s.pad_to, s.chunk);  // every rank the same shape
        ASSERT_EQ(s.offset, uint64_t{r} * s.chunk);
        ASSERT_EQ(s.start, std::min(s.offset, length));
        ASSERT_EQ(s.position_begin, s.offset);
        ASSERT_EQ(s.position_count, s.pad_to);
        next = s.stop;
      }
      ASSERT_EQ(next, length) << "L=" << length << " N=" << n;  // the union is [0, L)
    }
  }
}

TEST(SplitRuleCoverage, UspRulesOwnEveryRowOnceAndOverlapTheNextTtt) {
  for (SplitRule rule : {SplitRule::kSpecForgeUsp, SplitRule::kTorchSpecUsp}) {
    for (uint64_t length = 0; length <= 70; ++length) {
      for (uint32_t n : {1u, 2u, 3u, 4u, 6u, 8u}) {
        for (uint32_t ttt : {0u, 1u, 2u, 3u, 7u, 20u}) {
          for (uint32_t u : Divisors(n)) {
            std::vector<int> owned(length, 0);
            for (uint32_t r = 0; r < n; ++r) {
              SequenceSlice s = Slice(rule, length, n, r, ttt, u);
              const uint64_t chunk = (length + n - 1) / n;
              ASSERT_EQ(s.chunk, chunk);
              ASSERT_EQ(s.offset, uint64_t{r} * chunk);
              ASSERT_EQ(s.pad_to, chunk + ttt);  // the same shape on every rank
              ASSERT_EQ(s.start, std::min(s.offset, length));
              // Its chunk plus the next ttt rows, cut at L.
              ASSERT_EQ(s.stop, std::min(s.offset + chunk + ttt, length));
              ASSERT_LE(s.rows(), s.pad_to);
              for (uint64_t row = s.start; row < std::min(s.offset + chunk, length); ++row)
                ++owned[row];
              if (rule == SplitRule::kSpecForgeUsp) {
                ASSERT_EQ(s.position_begin, s.offset);
                ASSERT_EQ(s.position_count, chunk);
                ASSERT_EQ(s.batch_pad_to % n, 0u);
                ASSERT_LT(s.batch_pad_to - s.pad_to, n);
                ASSERT_EQ(s.position_pad_to, s.batch_pad_to * u);
              } else {
                ASSERT_EQ(s.position_begin, uint64_t{r / u} * chunk * u);
                ASSERT_EQ(s.position_count, chunk * u);
                ASSERT_EQ(s.batch_pad_to, s.pad_to);
                // The ring chunk's positions include the rank's own rows.
                ASSERT_LE(s.position_begin, s.offset);
                ASSERT_LE(s.offset + chunk, s.position_begin + s.position_count);
              }
            }
            for (uint64_t row = 0; row < length; ++row)
              ASSERT_EQ(owned[row], 1) << SplitRuleName(rule) << " L=" << length << " N=" << n
                                       << " row " << row;
          }
        }
      }
    }
  }
}

TEST(SplitRuleCoverage, SpeculatorsSplitsAMultipleExactly) {
  for (uint32_t n : {1u, 2u, 4u, 8u}) {
    for (uint64_t length = 0; length <= 256; length += n) {
      uint64_t next = 0;
      for (uint32_t r = 0; r < n; ++r) {
        SequenceSlice s = Slice(SplitRule::kSpeculators, length, n, r);
        ASSERT_EQ(s.start, next);
        ASSERT_EQ(s.rows(), length / n);
        ASSERT_EQ(s.pad_to, s.rows());
        ASSERT_EQ(s.position_count, 0u);
        next = s.stop;
      }
      ASSERT_EQ(next, length);
    }
    for (uint64_t length = 1; length < 40; ++length) {
      SplitRequest q;
      q.length = length;
      q.sp_size = n;
      EXPECT_EQ(SliceOf(SplitRule::kSpeculators, q).ok(), length % n == 0) << length;
    }
  }
}

// ---- PackedParts: a packed row's rank ranges back to the samples ----

TEST(PackedParts, Golden) {
  // Samples of 5, 0, 4 and 2 rows in a packed row of 12 (one padding row), 4 ranks of 3 rows.
  const std::vector<uint64_t> lengths = {5, 0, 4, 2};
  auto parts = [&](uint64_t a, uint64_t b) { return *PackedParts(lengths, a, b); };
  auto eq = [](const std::vector<PackedPart>& got, std::vector<PackedPart> want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].sample, want[i].sample) << i;
      EXPECT_EQ(got[i].begin, want[i].begin) << i;
      EXPECT_EQ(got[i].end, want[i].end) << i;
      EXPECT_EQ(got[i].at, want[i].at) << i;
    }
  };
  eq(parts(0, 3), {{0, 0, 3, 0}});
  eq(parts(3, 6), {{0, 3, 5, 0}, {2, 0, 1, 2}});
  eq(parts(6, 9), {{2, 1, 4, 0}});
  eq(parts(9, 12), {{3, 0, 2, 0}});  // row 11 is padding
  eq(parts(11, 12), {});
  eq(parts(4, 4), {});
  Result<std::vector<PackedPart>> reversed = PackedParts(lengths, 5, 4);
  ASSERT_FALSE(reversed.ok());
  EXPECT_NE(reversed.status().message().find("reversed"), std::string::npos);
  const std::vector<uint64_t> huge = {UINT64_MAX, 2};
  EXPECT_FALSE(PackedParts(huge, 0, 1).ok());
}

TEST(PackedParts, RanksCoverEverySampleRowOnce) {
  std::mt19937_64 rng(44);
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t n = 1u << (trial % 4);
    std::vector<uint64_t> lengths(1 + rng() % 6);
    uint64_t sum = 0;
    for (uint64_t& len : lengths) sum += (len = rng() % 20);
    const uint64_t packed = (sum + rng() % 9 + n - 1) / n * n;  // with padding, a multiple of N
    std::vector<std::vector<int>> seen(lengths.size());
    for (size_t k = 0; k < lengths.size(); ++k) seen[k].assign(lengths[k], 0);
    for (uint32_t r = 0; r < n; ++r) {
      SequenceSlice s = Slice(SplitRule::kSpeculators, packed, n, r);
      uint64_t expect_at = 0;
      uint64_t prefix = 0;  // packed row of each sample's first row
      std::vector<uint64_t> first(lengths.size());
      for (size_t k = 0; k < lengths.size(); ++k) first[k] = prefix, prefix += lengths[k];
      Result<std::vector<PackedPart>> parts = PackedParts(lengths, s.start, s.stop);
      ASSERT_TRUE(parts.ok());
      for (const PackedPart& p : *parts) {
        ASSERT_LT(p.begin, p.end);
        ASSERT_LE(p.end, lengths[p.sample]);
        ASSERT_EQ(p.at, first[p.sample] + p.begin - s.start);  // where the packed row puts it
        ASSERT_GE(p.at, expect_at);                             // in order, no overlap
        expect_at = p.at + (p.end - p.begin);
        ASSERT_LE(expect_at, s.rows());
        for (uint64_t row = p.begin; row < p.end; ++row) ++seen[p.sample][row];
      }
    }
    for (size_t k = 0; k < lengths.size(); ++k)
      for (uint64_t row = 0; row < lengths[k]; ++row) ASSERT_EQ(seen[k][row], 1);
  }
}

}  // namespace
}  // namespace libshard
