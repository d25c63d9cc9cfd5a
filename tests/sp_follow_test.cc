// Sequence-parallel reads of a dataset being written (follow mode, FORMAT.md §6.1; docs/guide/
// long-context.md "What each storage path reads"): the journal records each sample's block table
// (§6: header flag bit 1), so a follower's snapshot has row blocks (§3.10) and each rank of an SP
// group reads only its token slice of the samples committed so far, checked, raw or with field
// codecs: a group of 2 reads about one copy of each sample, not two, and every slice is bit for
// bit the closed dataset's; a damaged row block of a shard being written is never served.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codec/row_blocks.h"
#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/follow.h"
#include "libshard/loader.h"
#include "libshard/sequence_parallel.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kRowBlockBytes = 4096;
constexpr uint64_t kHidden = 256;  // hidden_state rows of 512 bytes
// Follow windows of 1, 2 and 4 positions (ORDER.md §7): all 7 known before the writer closes.
constexpr uint64_t kSamples = 7;
constexpr uint32_t kDegree = 2;

uint64_t SampleLength(uint64_t i) { return 2000 + 331 * i; }

class SpFollowTest : public ::testing::TestWithParam<bool> {  // param: field codecs
 protected:
  // kSamples samples appended and journaled; the Writer stays open.
  void StartWrite() {
    WriterOptions o = FastOptions();
    o.shard_size = 64 << 20;
    o.commit_interval_seconds = 0;  // the test checkpoints itself
    if (GetParam()) o.field_codecs = FieldCodecPolicy::kAuto;
    codec::ScopedWriterRowBlockBytes blocks(kRowBlockBytes);
    auto w = Writer::Create(path(), EagleSchema(), o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    writer_ = std::move(w).value();
    for (uint64_t i = 0; i < kSamples; ++i) {
      const uint64_t len = SampleLength(i);
      OwnedSample s = MakeSample(EagleSchema(), {{len}, {len}, {1, len, kHidden}}, i, GetParam());
      ASSERT_TRUE(writer_->Append(s.input).ok());
    }
    ASSERT_TRUE(writer_->Checkpoint().ok());
  }
  std::string path() const { return (dir_ / "ds").string(); }

  // What rank `rank` of the group is served of the kSamples journaled samples.
  struct Served {
    // Declared first, destroyed last: a sample's tensor names live in the loader's snapshot of
    // the dataset (TensorView::name is valid while the Dataset lives).
    std::unique_ptr<Loader> loader;
    std::map<uint64_t, Sample> samples;  // by index
    uint64_t bytes_read = 0;
  };
  Served Follow(uint32_t rank) {
    Served out;
    LoaderOptions o;
    o.order = FollowOrder{.shuffle_window = 4};
    o.rank = rank;
    o.world_size = kDegree;  // one group
    o.sequence_parallel.degree = kDegree;
    o.memory_budget = 32 << 20;
    o.pin_memory = PinMemory::kOff;
    auto loader = Loader::Follow(path(), o);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    if (!loader.ok()) return out;
    while (out.samples.size() < kSamples) {
      auto batch = (*loader)->Next();
      EXPECT_TRUE(batch.ok()) << batch.status().ToString();
      if (!batch.ok() || !batch->has_value()) break;
      for (Sample& s : (*batch)->samples) {
        out.samples.emplace(s.index(), std::move(s));
      }
    }
    out.bytes_read = (*loader)->stats().bytes_read;
    out.loader = std::move(loader).value();
    return out;
  }

  TempDir dir_;
  std::unique_ptr<Writer> writer_;
};

TEST_P(SpFollowTest, SnapshotOfAWriteInProgressHasRowBlocks) {
  StartWrite();
  auto follower = DatasetFollower::Open(path());
  ASSERT_TRUE(follower.ok()) << follower.status().ToString();
  ASSERT_TRUE((*follower)->Poll().ok());
  auto snap = (*follower)->Snapshot();
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  ASSERT_EQ((*snap)->size(), kSamples);
  EXPECT_TRUE((*snap)->has_row_blocks());
  EXPECT_EQ((*snap)->index_version(), 4u);
  ASSERT_TRUE(writer_->Finish().ok());
  auto closed = Dataset::Open(path());
  ASSERT_TRUE(closed.ok());
  for (uint64_t i = 0; i < kSamples; ++i) {
    ReadRequest request;
    request.rows = RowRange{SampleLength(i) / 3, SampleLength(i) / 3 * 2};
    auto got = (*snap)->Read(i, request);
    auto want = (*closed)->Read(i, request);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    for (const Field& field : EagleSchema().fields) {
      const TensorView* g = got->Find(field.name);
      const TensorView* w = want->Find(field.name);
      ASSERT_EQ(g->nbytes, w->nbytes);
      EXPECT_EQ(std::memcmp(g->data, w->data, w->nbytes), 0) << "sample " << i << " " << field.name;
    }
  }
}

TEST_P(SpFollowTest, GroupReadsAboutOneCopyOfEachSampleBeingWritten) {
  StartWrite();
  std::vector<Served> group;
  for (uint32_t r = 0; r < kDegree; ++r) group.push_back(Follow(r));
  uint64_t stored = 0;
  {
    auto follower = DatasetFollower::Open(path());
    ASSERT_TRUE(follower.ok() && (*follower)->Poll().ok());
    auto snap = (*follower)->Snapshot();
    ASSERT_TRUE(snap.ok());
    for (uint64_t i = 0; i < kSamples; ++i) stored += (*snap)->location(i).stored_size;
  }
  uint64_t read = 0;
  for (const Served& s : group) {
    EXPECT_EQ(s.samples.size(), kSamples);
    read += s.bytes_read;
    // Each rank about half of each sample, plus a row block and a page at each end of each field.
    EXPECT_LT(static_cast<double>(s.bytes_read), 0.65 * static_cast<double>(stored))
        << s.bytes_read << " of " << stored;
  }
  std::printf("follow SP group of %u (%s): read %.3fx the stored bytes (%llu of %llu)\n", kDegree,
              GetParam() ? "field codecs" : "raw",
              static_cast<double>(read) / static_cast<double>(stored),
              static_cast<unsigned long long>(read), static_cast<unsigned long long>(stored));
  EXPECT_LT(static_cast<double>(read), 1.25 * static_cast<double>(stored));
  // The slices are the closed dataset's rows, bit for bit.
  ASSERT_TRUE(writer_->Finish().ok());
  auto closed = Dataset::Open(path());
  ASSERT_TRUE(closed.ok()) << closed.status().ToString();
  for (uint32_t r = 0; r < kDegree; ++r) {
    for (const auto& [i, got] : group[r].samples) {
      SCOPED_TRACE("sample " + std::to_string(i) + " rank " + std::to_string(r));
      ASSERT_TRUE(got.has_sequence_slice());
      SplitRequest req;
      req.length = (*closed)->length(i);
      req.sp_size = kDegree;
      req.sp_rank = r;
      auto want_slice = SliceOf(SplitRule::kEven, req);
      ASSERT_TRUE(want_slice.ok());
      EXPECT_EQ(got.sequence_slice().slice.start, want_slice->start);
      EXPECT_EQ(got.sequence_slice().slice.stop, want_slice->stop);
      ReadRequest request;
      request.rows = RowRange{want_slice->start, want_slice->stop};
      auto want = (*closed)->Read(i, request);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      for (const Field& field : EagleSchema().fields) {
        const TensorView* g = got.Find(field.name);
        const TensorView* w = want->Find(field.name);
        ASSERT_TRUE(g != nullptr && w != nullptr) << field.name;
        EXPECT_EQ(g->shape, w->shape) << field.name;
        ASSERT_EQ(g->nbytes, w->nbytes) << field.name;
        EXPECT_EQ(std::memcmp(g->data, w->data, w->nbytes), 0)
            << field.name << ": the followed slice differs from the closed dataset's rows";
      }
    }
  }
}

// A byte damaged in a rank's rows of a sample being written (its shard still a .tmp file): the
// row block's checksum catches it, the rank's read fails naming the sample; never served.
TEST_P(SpFollowTest, DamagedRowsOfASampleBeingWrittenAreNeverServed) {
  if (GetParam()) GTEST_SKIP() << "raw samples: the damaged byte's place is the tensor's";
  StartWrite();
  std::string shard;
  uint64_t at = 0;
  {
    auto follower = DatasetFollower::Open(path());
    ASSERT_TRUE(follower.ok() && (*follower)->Poll().ok());
    auto snap = (*follower)->Snapshot();
    ASSERT_TRUE(snap.ok());
    const SampleLocation loc = (*snap)->location(0);
    const TensorLocation t = (*snap)->tensor(0, 2);  // hidden_state, rank 0's first half
    shard = (*snap)->shards()[loc.shard].path;
    at = loc.offset + t.offset + t.nbytes / 4;
  }
  FlipByte(shard, at);
  LoaderOptions o;
  o.order = FollowOrder{.shuffle = false};
  o.world_size = kDegree;
  o.sequence_parallel.degree = kDegree;
  o.memory_budget = 32 << 20;
  o.pin_memory = PinMemory::kOff;
  auto loader = Loader::Follow(path(), o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto next = (*loader)->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kCorruption) << next.status().ToString();
  EXPECT_NE(next.status().message().find("sample 0"), std::string::npos) << next.status().ToString();
  // Rank 1's rows of sample 0 are sound.
  o.rank = 1;
  auto other = Loader::Follow(path(), o);
  ASSERT_TRUE(other.ok());
  auto sound = (*other)->Next();
  ASSERT_TRUE(sound.ok() && sound->has_value()) << sound.status().ToString();
  EXPECT_EQ((*sound)->samples[0].index(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Stored, SpFollowTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("FieldCodecs") : std::string("Raw");
                         });

}  // namespace
}  // namespace libshard::testing
