// The loader state's encoding (libshard/loader_state.h, docs/ORDER.md §8): the golden states of
// tests/data/loader_state/ (written from the spec by tests/order_golden.py) decode to the states
// they describe and encode to the same bytes; the state dicts of earlier releases decode to the
// same states; every state round-trips; hostile text is refused with an error naming the key;
// the next epoch's state and the checks of a state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "libshard/loader_state.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

using ::testing::HasSubstr;

const std::filesystem::path kGoldens = std::filesystem::path(LIBSHARD_TEST_DATA_DIR) / "loader_state";

LoaderState State(uint64_t epoch, uint64_t position, std::vector<uint64_t> skipped,
                  OrderCursor cursor) {
  LoaderState s;
  s.epoch = epoch;
  s.position = position;
  s.skipped = std::move(skipped);
  s.cursor = cursor;
  return s;
}

// What each golden file holds (tests/order_golden.py STATES).
struct Golden {
  const char* name;
  LoaderState state;
};

std::vector<Golden> Goldens() {
  const EpochBucketing bucketed{4096, 0, 2048, TokenBudget::kPadded};
  return {
      {"global_v2", State(3, 120, {}, GlobalCursor{8, kOrderV2, {}})},
      {"global_v1", State(0, 7, {5, 2}, GlobalCursor{UINT64_MAX, kOrderV1, {}})},
      {"global_bucketed", State(1, 64, {}, GlobalCursor{5, kOrderV2, bucketed})},
      {"node_local", State(2, 8, {}, NodeLocalCursor{3, {}, {2, 2, 2}})},
      {"node_local_start", State(4, 0, {}, NodeLocalCursor{3, {}, {}})},
      {"caller", State(2, 2, {}, CallerCursor{11400714819323198485ull})},
      {"follow", State(0, 12, {}, FollowCursor{11, kOrderV2, 8})},
  };
}

std::string Line(const std::filesystem::path& file) {
  std::string text = testing::ReadFileToString(file);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

TEST(LoaderStateCodec, GoldenStatesDecodeAndEncodeToTheSameBytes) {
  for (const Golden& g : Goldens()) {
    SCOPED_TRACE(g.name);
    const std::string text = Line(kGoldens / (std::string(g.name) + ".json"));
    Result<LoaderState> decoded = DecodeLoaderState(text);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, g.state);
    EXPECT_EQ(EncodeLoaderState(g.state), text);
  }
}

// The dicts state_dict() gave before the encoding had a version (what checkpoints of the
// current release hold) still resume: they decode to the same states.
TEST(LoaderStateCodec, StateDictsOfEarlierReleasesDecodeToTheSameStates) {
  for (const Golden& g : Goldens()) {
    SCOPED_TRACE(g.name);
    const std::string text = Line(kGoldens / ("legacy_" + std::string(g.name) + ".json"));
    EXPECT_EQ(text.find("state_version"), std::string::npos);
    Result<LoaderState> decoded = DecodeLoaderState(text);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, g.state);
    EXPECT_EQ(EncodeLoaderState(*decoded), Line(kGoldens / (std::string(g.name) + ".json")));
  }
  // The five fields of the releases with order versions, in any key order, unknown keys ignored.
  Result<LoaderState> five =
      DecodeLoaderState(R"({"order": 2, "skipped": [1], "position": 4, "epoch": 1, "seed": 9,
                            "note": "from a trainer"})");
  ASSERT_TRUE(five.ok()) << five.status().ToString();
  EXPECT_EQ(*five, State(1, 4, {1}, GlobalCursor{9, kOrderV2, {}}));
}

TEST(LoaderStateCodec, EveryStateRoundTrips) {
  std::mt19937_64 rng(43);
  for (int i = 0; i < 400; ++i) {
    LoaderState s;
    s.epoch = rng() >> (rng() % 64);
    s.position = rng() >> (rng() % 64);
    for (uint64_t k = rng() % 4; k > 0; --k) s.skipped.push_back(rng());
    EpochBucketing b;
    if (rng() % 2) b = {1 + rng() % kMaxLoaderBucketWindow, static_cast<uint32_t>(rng()),
                        1 + rng() % 1000, rng() % 2 ? TokenBudget::kSum : TokenBudget::kPadded};
    switch (rng() % 4) {
      case 0:
        s.cursor = GlobalCursor{rng(), static_cast<uint32_t>(1 + rng() % 2), b};
        break;
      case 1:
        s.cursor = NodeLocalCursor{rng(), b, {static_cast<uint32_t>(1 + rng() % 64),
                                              static_cast<uint32_t>(1 + rng() % 8), rng()}};
        break;
      case 2:
        s.cursor = CallerCursor{rng()};
        break;
      default:
        s.cursor = FollowCursor{rng(), static_cast<uint32_t>(1 + rng() % 2),
                                1 + rng() % kMaxLoaderShuffleWindow};
    }
    const std::string text = EncodeLoaderState(s);
    Result<LoaderState> back = DecodeLoaderState(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status().ToString();
    EXPECT_EQ(*back, s) << text;
  }
}

TEST(LoaderStateCodec, HostileTextIsRefusedNamingWhatIsWrong) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  struct Case {
    std::string text;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"", {"not JSON"}},
      {"{\"seed\": 1,", {"not JSON"}},
      {"[1, 2, 3]", {"a dict from state()", "[1,2,3]"}},
      {"7", {"a dict from state()"}},
      {deep, {"nested deeper"}},
      {R"({"seed": 0, "epoch": 0})", {"misses the key 'position'"}},
      {R"({"seed": 0, "epoch": 0, "position": -3})", {"resume.position", "non-negative"}},
      {R"({"seed": 0, "epoch": 0, "position": 2.5})", {"resume.position", "2.5"}},
      {R"({"seed": 0, "epoch": 0, "position": true})", {"resume.position"}},
      {R"({"seed": 0, "epoch": 0, "position": "3"})", {"resume.position"}},
      {R"({"seed": 99999999999999999999999, "epoch": 0, "position": 0})",
       {"resume.seed", "above 2^64 - 1"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "order": 7})", {"resume.order", "newer"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "order": 5000000000})", {"resume.order"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "skipped": 3})", {"resume.skipped", "list"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "skipped": ["a"]})", {"resume.skipped"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "locality": {"nodes": 2,
          "local_world_size": 1, "steps": 0}})",
       {"resume.locality", "only order version 3"}},
      {R"({"seed": 0, "epoch": 0, "position": 5, "order": 3})", {"resume.locality", "missing"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "order": 3, "locality": {"nodes": 2}})",
       {"locality.local_world_size"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "order": 0, "follow_window": 4})",
       {"resume.follow_window", "order 0"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "follow_window": 99999999})",
       {"resume.follow_window", "outside"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "bucketing": {"window": 8, "batch_size": 2,
          "max_tokens": 0, "budget": "most"}})",
       {"resume.bucketing.budget", "most"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "bucketing": {"window": 8, "batch_size": 0,
          "max_tokens": 0, "budget": "sum"}})",
       {"resume.bucketing", "neither"}},
      {R"({"seed": 0, "epoch": 0, "position": 0, "bucketing": [1]})", {"resume.bucketing"}},
      {R"({"state_version": 2, "order": 2})", {"resume.state_version", "newer libshard"}},
      {R"({"state_version": 0, "order": 2})", {"resume.state_version"}},
      {R"({"state_version": "1"})", {"resume.state_version"}},
      {R"({"state_version":1,"order":2,"epoch":0,"position":0,"skipped":[],"seed":1,"bucketing":null,"locality":null})",
       {"resume.locality", "not a key of a state of the global order"}},
      {R"({"state_version":1,"order":0,"epoch":0,"position":0,"skipped":[],"seed":1,"steps_digest":2})",
       {"resume.seed", "an order the caller gave"}},
      {R"({"state_version":1,"order":2,"epoch":0,"position":0,"skipped":[]})",
       {"misses the key 'seed'"}},
      {R"({"state_version":1,"order":2,"epoch":0,"position":0,"seed":1})",
       {"misses the key 'skipped'"}},
      {R"({"state_version":1,"order":2,"epoch":0,"position":0,"skipped":[],"seed":1,"follow_window":0})",
       {"resume.follow_window"}},
      {R"({"state_version":1,"order":9,"epoch":0,"position":0,"skipped":[]})",
       {"resume.order", "newer"}},
      {R"({"state_version":1,"order":3,"epoch":0,"position":0,"skipped":[],"seed":1,"locality":{"nodes":1,"local_world_size":1,"steps":0,"extra":1}})",
       {"resume.locality.extra"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text.substr(0, 120));
    Result<LoaderState> s = DecodeLoaderState(c.text);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    for (const std::string& w : c.words) EXPECT_THAT(s.status().message(), HasSubstr(w));
  }
  // Longer than any state can be: refused before it is parsed.
  const std::string huge(kMaxLoaderStateBytes + 1, ' ');
  Result<LoaderState> s = DecodeLoaderState(huge);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("more than a state can be"));
}

TEST(LoaderState, TheNextEpochStartsInTheSameKindOfOrder) {
  const EpochBucketing bucketed{4096, 0, 2048, TokenBudget::kPadded};
  EXPECT_EQ(StartOfNextEpoch(State(3, 9, {4}, GlobalCursor{8, kOrderV1, bucketed})),
            State(4, 0, {}, GlobalCursor{8, kOrderV1, {}}));
  EXPECT_EQ(StartOfNextEpoch(State(0, 9, {}, NodeLocalCursor{3, bucketed, {2, 2, 5}})),
            State(1, 0, {}, NodeLocalCursor{3, {}, {}}));
  EXPECT_EQ(StartOfNextEpoch(State(2, 2, {}, CallerCursor{77})), State(3, 0, {}, CallerCursor{}));
  // The epochs after the follow epoch are the global order's.
  EXPECT_EQ(StartOfNextEpoch(State(0, 40, {}, FollowCursor{11, kOrderV1, 8})),
            State(1, 0, {}, GlobalCursor{11, kOrderV1, {}}));
}

TEST(LoaderState, AccessorsFollowTheKind) {
  const LoaderState global = State(0, 0, {}, GlobalCursor{5, kOrderV2, {}});
  EXPECT_EQ(global.kind(), OrderKind::kGlobal);
  EXPECT_EQ(global.order_version(), kOrderV2);
  EXPECT_EQ(global.seed(), 5u);
  const LoaderState node = State(0, 0, {}, NodeLocalCursor{6, {}, {}});
  EXPECT_EQ(node.order_version(), kOrderV3);
  EXPECT_EQ(node.seed(), 6u);
  const LoaderState caller = State(0, 0, {}, CallerCursor{1});
  EXPECT_EQ(caller.order_version(), kOrderCaller);
  EXPECT_EQ(caller.seed(), 0u);
  EXPECT_EQ(caller.bucketing().window, 0u);
  const LoaderState follow = State(0, 0, {}, FollowCursor{7, kOrderV1, 3});
  EXPECT_EQ(follow.kind(), OrderKind::kFollow);
  EXPECT_EQ(follow.order_version(), kOrderV1);
  // A C++ state made without a version is version 1, as one saved before versions existed.
  EXPECT_EQ(LoaderState{}.order_version(), kOrderV1);
}

TEST(LoaderState, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateLoaderState(LoaderState{}).ok());
  EXPECT_THAT(ValidateLoaderState(State(0, 0, {}, GlobalCursor{0, 3, {}})).message(),
              HasSubstr("resume.order"));
  EXPECT_THAT(ValidateLoaderState(State(0, 0, {}, FollowCursor{0, 2, 0})).message(),
              HasSubstr("resume.follow_window"));
  EXPECT_THAT(ValidateLoaderState(State(0, 3, {}, NodeLocalCursor{})).message(),
              HasSubstr("resume.locality"));
  EXPECT_TRUE(ValidateLoaderState(State(0, 0, {}, NodeLocalCursor{})).ok());
  EXPECT_THAT(
      ValidateLoaderState(State(0, 3, {}, NodeLocalCursor{0, {}, {2, 0, 1}})).message(),
      HasSubstr("resume.locality"));
}

}  // namespace
}  // namespace libshard
