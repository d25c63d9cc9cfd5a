// A loader's state knows what its stream was made from (state version 2, docs/ORDER.md §8): the
// dataset's identity, its sample count and the order's shuffle. A resume on another dataset, on
// a dataset whose sample count changed inside the epoch, or with another shuffle is refused
// naming what differs and both values; so is a seed, order version or follow window given
// together with a state saved with another. What may change on resume (world size, batching)
// still resumes, and so do states of version 1, which record none of it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/identity.h"
#include "libshard/loader.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

WriterOptions WithAttrs(Attributes a) {
  WriterOptions o = FastOptions();
  o.attributes = std::move(a);
  return o;
}

std::shared_ptr<Dataset> OpenOrDie(const fs::path& dir) {
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

LoaderOptions Options(uint64_t seed = 3, bool shuffle = true) {
  LoaderOptions o;
  o.order = GlobalOrder{shuffle, seed, kOrderV2};
  o.batch_size = 2;
  o.bucket_window = 0;
  o.memory_budget = 8 << 20;
  return o;
}

// The sample indices of the next `steps` batches (all that remain when 0).
std::vector<uint64_t> Take(Loader& loader, size_t steps = 0) {
  std::vector<uint64_t> out;
  for (size_t k = 0; steps == 0 || k < steps; ++k) {
    Result<std::optional<Batch>> b = loader.Next();
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok() || !b->has_value()) break;
    for (const Sample& s : (*b)->samples) out.push_back(s.index());
  }
  return out;
}

// A state saved after two steps of `ds`.
LoaderState SavedAfterTwoSteps(const std::shared_ptr<Dataset>& ds, const LoaderOptions& o) {
  auto loader = Loader::Create(ds, o);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return {};
  Take(**loader, 2);
  return (*loader)->state();
}

Status ResumeStatus(const std::shared_ptr<Dataset>& ds, LoaderOptions o, const LoaderState& s) {
  o.resume = s;
  return Loader::Create(ds, o).status();
}

TEST(ResumeOrigin, TheStateRecordsTheDatasetAndTheShuffle) {
  TempDir dir;
  const Attributes attrs = {{"target_model", std::string("A")}};
  WriteStandard(dir.path(), 10, WithAttrs(attrs));
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  const LoaderState s = SavedAfterTwoSteps(ds, Options());
  EXPECT_EQ(s.origin.identity, ds->identity().digest);
  EXPECT_EQ(s.origin.samples, 10u);
  EXPECT_EQ(s.origin.shuffle, true);
  const std::string text = EncodeLoaderState(s);
  EXPECT_THAT(text, HasSubstr("\"state_version\":2,"));
  EXPECT_THAT(text, HasSubstr("\"identity\":\"" + ds->identity().digest_text() + "\""));
  EXPECT_THAT(text, HasSubstr("\"samples\":10,\"shuffle\":true"));
  // The start of the next epoch keeps it.
  EXPECT_EQ(StartOfNextEpoch(s).origin, s.origin);
}

TEST(ResumeOrigin, AnotherDatasetIsRefusedNamingBothIdentities) {
  TempDir root;
  WriteStandard(root / "a", 10, WithAttrs({{"target_model", std::string("A")}}));
  WriteStandard(root / "b", 10, WithAttrs({{"target_model", std::string("B")}}));
  auto a = OpenOrDie(root / "a");
  auto b = OpenOrDie(root / "b");
  ASSERT_TRUE(a && b);
  const LoaderState s = SavedAfterTwoSteps(a, Options());
  ExpectError(ResumeStatus(b, Options(), s), StatusCode::kInvalidArgument,
              {"identity", a->identity().digest_text(), b->identity().digest_text(),
               (root / "b").string(), "the dataset the checkpoint was saved from",
               "drop the state"});
  // Also at the start of an epoch: the dataset is another.
  ExpectError(ResumeStatus(b, Options(), StartOfNextEpoch(s)), StatusCode::kInvalidArgument,
              {"identity"});
  // The same dataset resumes, on another world size too.
  EXPECT_TRUE(ResumeStatus(a, Options(), s).ok());
  LoaderOptions two = Options();
  two.world_size = 2;
  two.rank = 1;
  EXPECT_TRUE(ResumeStatus(a, two, s).ok());
  // A state of version 1 records no identity: it resumes as before, on any dataset.
  LoaderState v1 = s;
  v1.origin = {};
  EXPECT_TRUE(ResumeStatus(b, Options(), v1).ok());
}

TEST(ResumeOrigin, ResumedStreamContinuesExactlyAndOnAnotherWorldSize) {
  TempDir dir;
  WriteStandard(dir.path(), 12, WithAttrs({{"seed", int64_t{1}}}));
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  auto whole = Loader::Create(ds, Options());
  ASSERT_TRUE(whole.ok());
  const std::vector<uint64_t> all = Take(**whole);
  auto part = Loader::Create(ds, Options());
  ASSERT_TRUE(part.ok());
  std::vector<uint64_t> got = Take(**part, 2);
  Result<LoaderState> decoded = DecodeLoaderState(EncodeLoaderState((*part)->state()));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  LoaderOptions o = Options();
  o.resume = *decoded;
  auto resumed = Loader::Create(ds, o);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  for (uint64_t i : Take(**resumed)) got.push_back(i);
  EXPECT_EQ(got, all);
}

TEST(ResumeOrigin, AnotherShuffleIsRefused) {
  TempDir dir;
  WriteStandard(dir.path(), 10, FastOptions());
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  const LoaderState shuffled = SavedAfterTwoSteps(ds, Options(3, true));
  ExpectError(ResumeStatus(ds, Options(3, false), shuffled), StatusCode::kInvalidArgument,
              {"shuffle true", "shuffle is false", "shuffle=True", "drop the state"});
  const LoaderState plain = SavedAfterTwoSteps(ds, Options(3, false));
  ExpectError(ResumeStatus(ds, Options(3, true), plain), StatusCode::kInvalidArgument,
              {"shuffle false", "shuffle=False"});
  EXPECT_TRUE(ResumeStatus(ds, Options(3, false), plain).ok());
}

TEST(ResumeOrigin, AnAppendKeepsTheIdentityAndResumesBetweenEpochsOnly) {
  TempDir dir;
  const Attributes attrs = {{"target_model", std::string("A")}};
  WriteStandard(dir.path(), 10, WithAttrs(attrs));
  auto before = OpenOrDie(dir.path());
  ASSERT_TRUE(before);
  const LoaderState inside = SavedAfterTwoSteps(before, Options());
  const uint64_t digest = before->identity().digest;
  before.reset();
  {
    auto w = Writer::OpenForAppend(dir.path().string(), WithAttrs(attrs));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = 10; i < 14; ++i) {
      OwnedSample s = StandardSample(i);
      ASSERT_TRUE((*w)->Append(s.input).ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto after = OpenOrDie(dir.path());
  ASSERT_TRUE(after);
  ASSERT_EQ(after->size(), 14u);
  EXPECT_EQ(after->identity().digest, digest);  // schema and attributes unchanged
  // Inside the epoch: its order was a permutation of 10 samples, which 14 do not continue.
  ExpectError(ResumeStatus(after, Options(), inside), StatusCode::kInvalidArgument,
              {"samples", "10", "14", "position 4", "end of an epoch", "drop the state"});
  // At the start of the next epoch: every sample, the appended ones too.
  auto next = Loader::Create(after, [&] {
    LoaderOptions o = Options();
    o.resume = StartOfNextEpoch(inside);
    return o;
  }());
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  std::vector<uint64_t> epoch = Take(**next);
  std::sort(epoch.begin(), epoch.end());
  EXPECT_EQ(epoch.size(), 14u);
  EXPECT_EQ(epoch.back(), 13u);
}

TEST(ResumeOrigin, SettingsGivenWithAStateMustBeItsOwn) {
  LoaderState s;
  s.position = 4;
  s.cursor = GlobalCursor{8, kOrderV2, {}};
  const std::string text = EncodeLoaderState(s);
  const auto from = [&](std::vector<OptionEntry> given) {
    given.push_back({"resume", OptionValue::Text(text)});
    return LoaderOptionsFrom(given);
  };
  // Not given: the state's seed and version (as always).
  Result<LoaderOptions> plain = from({});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(from({{"seed", OptionValue::Integer(8)}}).ok());
  EXPECT_TRUE(from({{"order", OptionValue::Integer(2)}}).ok());
  ExpectError(from({{"seed", OptionValue::Integer(9)}}).status(), StatusCode::kInvalidArgument,
              {"'seed' is 9", "seed 8", "seed=8", "drop the state"});
  ExpectError(from({{"order", OptionValue::Group({{"kind", OptionValue::Text("shuffled")},
                                                   {"seed", OptionValue::Integer(1)}})}})
                  .status(),
              StatusCode::kInvalidArgument, {"'order.seed' is 1", "seed 8"});
  ExpectError(from({{"order", OptionValue::Integer(1)}}).status(), StatusCode::kInvalidArgument,
              {"'order' is 1", "order version 2", "order=2"});
  // A node-local loader finishes a global epoch in the state's order (ORDER.md §5.4): its own
  // version is not the state's to check.
  EXPECT_TRUE(from({{"locality", OptionValue::Text("node")}, {"nodes", OptionValue::Integer(1)},
                    {"seed", OptionValue::Integer(8)}})
                  .ok());
  // The follow epoch's window.
  LoaderState f;
  f.cursor = FollowCursor{8, kOrderV2, 16};
  const std::string follow_text = EncodeLoaderState(f);
  ExpectError(LoaderOptionsFrom({{"follow", OptionValue::Bool(true)},
                                 {"shuffle_window", OptionValue::Integer(32)},
                                 {"resume", OptionValue::Text(follow_text)}})
                  .status(),
              StatusCode::kInvalidArgument, {"'shuffle_window' is 32", "shuffle_window 16"});
}

}  // namespace
}  // namespace libshard::testing
