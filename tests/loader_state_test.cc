// The loader state's encoding (libshard/loader_state.h, docs/ORDER.md §8): the golden states of
// tests/data/loader_state/ (written from the spec by tests/order_golden.py) decode to the states
// they describe and encode to the same bytes; the state dicts of earlier releases decode to the
// same states; every state round-trips; hostile text is refused with an error naming the key;
// the next epoch's state and the checks of a state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <utility>
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

// What each version 2 golden adds to the state of the same name (tests/order_golden.py
// STATES_V2).
StateOrigin OriginV2(const std::string& name) {
  constexpr uint64_t kIdentity = 0x0123456789abcdefull;
  if (name == "global_v2") return {kIdentity, 1000, true};
  if (name == "global_v1") return {0xfedcba9876543210ull, 10, false};
  if (name == "global_bucketed") return {kIdentity, 5000, true};
  if (name == "node_local") return {kIdentity, 40, true};
  if (name == "node_local_start") return {};
  if (name == "caller") return {kIdentity, std::nullopt, std::nullopt};
  return {kIdentity, std::nullopt, true};  // follow
}

TEST(LoaderStateCodec, GoldenStatesDecodeAndEncodeToTheSameBytes) {
  for (const Golden& g : Goldens()) {
    SCOPED_TRACE(g.name);
    LoaderState state = g.state;
    state.origin = OriginV2(g.name);
    const std::string text = Line(kGoldens / ("version2_" + std::string(g.name) + ".json"));
    Result<LoaderState> decoded = DecodeLoaderState(text);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, state);
    EXPECT_EQ(EncodeLoaderState(state), text);
  }
}

// Version 1 states (what checkpoints of the previous release hold) still decode, to states that
// record no origin (so nothing of it is checked on resume); encoded again they are version 2
// with that origin null.
TEST(LoaderStateCodec, Version1StatesStillDecode) {
  for (const Golden& g : Goldens()) {
    SCOPED_TRACE(g.name);
    const std::string text = Line(kGoldens / (std::string(g.name) + ".json"));
    EXPECT_NE(text.find("\"state_version\":1,"), std::string::npos);
    Result<LoaderState> decoded = DecodeLoaderState(text);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, g.state);
    EXPECT_EQ(decoded->origin, StateOrigin{});
    const std::string again = EncodeLoaderState(*decoded);
    EXPECT_NE(again.find("\"state_version\":2,"), std::string::npos) << again;
    EXPECT_NE(again.find("\"identity\":null"), std::string::npos) << again;
    Result<LoaderState> back = DecodeLoaderState(again);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, g.state);
  }
  // Version 1 has no origin: its keys are refused there, as any key a state has not.
  Result<LoaderState> v1_identity = DecodeLoaderState(
      R"({"state_version":1,"order":2,"epoch":0,"position":0,"skipped":[],"seed":1,"bucketing":null,"identity":null})");
  ASSERT_FALSE(v1_identity.ok());
  EXPECT_THAT(v1_identity.status().message(), HasSubstr("resume.identity"));
}

// The origin's keys may be absent (read as null) and are checked for type and range.
TEST(LoaderStateCodec, Version2OriginKeys) {
  Result<LoaderState> bare = DecodeLoaderState(
      R"({"state_version":2,"order":2,"epoch":0,"position":3,"skipped":[],"seed":1})");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->origin, StateOrigin{});
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"("identity":"0123")", "resume.identity"},
      {R"("identity":"0123456789ABCDEF")", "resume.identity"},
      {R"("identity":12)", "resume.identity"},
      {R"("samples":-1)", "resume.samples"},
      {R"("samples":"10")", "resume.samples"},
      {R"("shuffle":1)", "resume.shuffle"},
  };
  for (const auto& [key, name] : bad) {
    SCOPED_TRACE(key);
    Result<LoaderState> s = DecodeLoaderState(
        R"({"state_version":2,"order":2,"epoch":0,"position":3,"skipped":[],"seed":1,)" + key +
        "}");
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.status().message(), HasSubstr(name));
  }
  // A caller's state has no samples or shuffle; a follow state no samples.
  Result<LoaderState> caller = DecodeLoaderState(
      R"({"state_version":2,"order":0,"epoch":0,"position":0,"skipped":[],"steps_digest":1,"shuffle":true})");
  ASSERT_FALSE(caller.ok());
  EXPECT_THAT(caller.status().message(), HasSubstr("resume.shuffle"));
  Result<LoaderState> follow = DecodeLoaderState(
      R"({"state_version":2,"order":2,"epoch":0,"position":0,"skipped":[],"seed":1,"follow_window":4,"samples":3})");
  ASSERT_FALSE(follow.ok());
  EXPECT_THAT(follow.status().message(), HasSubstr("resume.samples"));
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
    EXPECT_EQ(EncodeLoaderState(*decoded), EncodeLoaderState(g.state));
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
    if (rng() % 2) s.origin.identity = rng();
    if ((s.kind() == OrderKind::kGlobal || s.kind() == OrderKind::kNodeLocal) && rng() % 2)
      s.origin.samples = rng() >> (rng() % 64);
    if (s.kind() != OrderKind::kCaller && rng() % 2) s.origin.shuffle = rng() % 2 == 0;
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
      {R"({"state_version": 3, "order": 2})", {"resume.state_version", "newer libshard"}},
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

// The next epoch keeps what the stream is made from; after the follow epoch, not its sample
// count, which the complete dataset's loader records.
TEST(LoaderState, TheNextEpochKeepsTheOrigin) {
  LoaderState global = State(3, 9, {4}, GlobalCursor{8, kOrderV2, {}});
  global.origin = {0xabcull, 100, true};
  EXPECT_EQ(StartOfNextEpoch(global).origin, global.origin);
  LoaderState follow = State(0, 40, {}, FollowCursor{11, kOrderV2, 8});
  follow.origin = {0xabcull, std::nullopt, false};
  EXPECT_EQ(StartOfNextEpoch(follow).origin, follow.origin);
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
