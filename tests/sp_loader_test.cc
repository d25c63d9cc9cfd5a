// Sequence-parallel loading (LoaderOptions::sequence_parallel; docs/guide/long-context.md "The
// loader", docs/ORDER.md §3a): with 2 data-parallel groups of 2 and of 4 ranks, every rank of a
// group gets the same samples in the same order, each sample once per group across the groups;
// each rank's tensors are, bit for bit, the rows its split rule gives it of the whole sample
// (Dataset::Read), and the even rule's slices put together are the whole sample; a group reads
// about one sample's bytes per sample (row blocks, FORMAT.md §3.10); a resume mid-epoch continues
// as the uninterrupted run; the same on a dataset stored with field codecs (compress auto). The
// options are checked, naming the option; a sample larger than the arena is a clear error that
// names memory_budget and sequence_parallel, and loads once split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codec/row_blocks.h"
#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/sequence_parallel.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlockBytes = 4096;  // row blocks of these tests
constexpr uint64_t kHidden = 128;       // hidden_state rows of 256 bytes
constexpr uint64_t kSamples = 24;

// EAGLE-3's fields plus one without a sequence dimension (read whole by every rank).
Schema SpSchema() {
  Schema s = EagleSchema();
  s.fields.push_back({"scale", DType::kFloat32, 1, -1});
  return s;
}

uint64_t SampleLength(uint64_t i) { return 600 + 97 * i; }  // 600 .. 2831 rows, some odd

std::shared_ptr<Dataset> WriteDataset(const fs::path& dir, const WriterOptions& o,
                                      bool compressible) {
  codec::ScopedWriterRowBlockBytes blocks(kBlockBytes);
  auto writer = Writer::Create(dir.string(), SpSchema(), o);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  if (!writer.ok()) return nullptr;
  for (uint64_t i = 0; i < kSamples; ++i) {
    const uint64_t len = SampleLength(i);
    OwnedSample s = MakeSample(SpSchema(), {{len}, {len}, {1, len, kHidden}, {5}}, i, compressible);
    Status st = (*writer)->Append(s.input);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto summary = (*writer)->Finish();
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

WriterOptions CompressAuto() {
  WriterOptions o = FastOptions();
  o.field_codecs = FieldCodecPolicy::kAuto;
  return o;
}

LoaderOptions SpOptions(uint32_t rank, uint32_t world, uint32_t degree) {
  LoaderOptions o;
  o.order = Order::Shuffled(11);
  o.rank = rank;
  o.world_size = world;
  o.sequence_parallel.degree = degree;
  o.memory_budget = 64 << 20;
  o.pin_memory = PinMemory::kOff;
  return o;
}

// What a rank was served: samples in order, each with its slice and the bytes of its tensors.
struct Served {
  std::vector<Sample> samples;
  uint64_t bytes_read = 0;
  LoaderState state;
};

Served Load(std::shared_ptr<Dataset> ds, const LoaderOptions& o, uint64_t max_steps = UINT64_MAX) {
  Served out;
  auto loader = Loader::Create(ds, o);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return out;
  for (uint64_t k = 0; k < max_steps; ++k) {
    auto batch = (*loader)->Next();
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
    if (!batch.ok() || !batch->has_value()) break;
    for (Sample& s : (*batch)->samples) out.samples.push_back(std::move(s));
  }
  out.bytes_read = (*loader)->stats().bytes_read;
  out.state = (*loader)->state();
  return out;
}

std::vector<uint64_t> Indices(const Served& s) {
  std::vector<uint64_t> out;
  for (const Sample& x : s.samples) out.push_back(x.index());
  return out;
}

// Each served sample holds, bit for bit, rows [start, stop) of the whole sample's sequence fields
// (the rule's, for its rank) and the other fields whole; its slice is the rule's.
void ExpectSlicesOfWholeSamples(const Dataset& ds, const Served& served, uint32_t rank,
                                uint32_t degree, SplitRule rule = SplitRule::kEven,
                                uint32_t ttt_length = 0) {
  for (const Sample& got : served.samples) {
    const uint64_t i = got.index();
    SCOPED_TRACE("sample " + std::to_string(i) + " rank " + std::to_string(rank));
    ASSERT_TRUE(got.has_sequence_slice());
    const Sample::SequenceParallelSlice& sp = got.sequence_slice();
    EXPECT_EQ(sp.sp_size, degree);
    EXPECT_EQ(sp.sp_rank, rank % degree);
    EXPECT_EQ(sp.rule, rule);
    SplitRequest req;
    req.length = ds.length(i);
    req.sp_size = degree;
    req.sp_rank = rank % degree;
    req.ttt_length = ttt_length;
    auto want_slice = SliceOf(rule, req);
    ASSERT_TRUE(want_slice.ok());
    EXPECT_EQ(sp.slice.start, want_slice->start);
    EXPECT_EQ(sp.slice.stop, want_slice->stop);
    EXPECT_EQ(sp.slice.pad_to, want_slice->pad_to);
    EXPECT_EQ(sp.slice.offset, want_slice->offset);
    EXPECT_EQ(sp.slice.full_length, ds.length(i));
    EXPECT_EQ(got.length(), ds.length(i));
    EXPECT_EQ(got.rows(), (RowRange{want_slice->start, want_slice->stop}));
    auto whole = ds.Read(i);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    ReadRequest request;
    request.rows = RowRange{want_slice->start, want_slice->stop};
    auto cut = ds.Read(i, request);
    ASSERT_TRUE(cut.ok()) << cut.status().ToString();
    for (const Field& field : ds.schema().fields) {
      const TensorView* w = whole->Find(field.name);
      const TensorView* g = got.Find(field.name);
      const TensorView* c = cut->Find(field.name);
      ASSERT_TRUE(w != nullptr && g != nullptr && c != nullptr) << field.name;
      auto [bytes, shape] = CutRows(*w, field, RowRange{want_slice->start, want_slice->stop});
      EXPECT_EQ(g->shape, shape) << field.name;
      ASSERT_EQ(g->nbytes, bytes.size()) << field.name;
      EXPECT_TRUE(bytes.empty() || std::memcmp(g->data, bytes.data(), bytes.size()) == 0)
          << field.name << ": the slice differs from the whole sample's rows";
      ASSERT_EQ(c->nbytes, g->nbytes) << field.name;
      EXPECT_TRUE(c->nbytes == 0 || std::memcmp(c->data, g->data, g->nbytes) == 0)
          << field.name << ": the slice differs from Dataset::Read(i, rows)";
    }
  }
}

// For the even rule: the group's slices of each sample, put together in rank order, are the
// whole sample's sequence fields.
void ExpectSlicesMakeTheWhole(const Dataset& ds, const std::vector<Served>& group) {
  const size_t n = group.front().samples.size();
  for (size_t k = 0; k < n; ++k) {
    const uint64_t i = group.front().samples[k].index();
    auto whole = ds.Read(i);
    ASSERT_TRUE(whole.ok());
    for (const Field& field : ds.schema().fields) {
      if (field.seq_dim < 0) continue;
      const TensorView* w = whole->Find(field.name);
      std::vector<std::byte> joined;
      for (const Served& r : group) {
        const TensorView* t = r.samples[k].Find(field.name);
        ASSERT_NE(t, nullptr);
        joined.insert(joined.end(), t->data, t->data + t->nbytes);
      }
      ASSERT_EQ(joined.size(), w->nbytes) << "sample " << i << " " << field.name;
      EXPECT_EQ(std::memcmp(joined.data(), w->data, w->nbytes), 0)
          << "sample " << i << " " << field.name << ": the slices do not make the whole";
    }
  }
}

// Both groups' ranks: same order within a group, each sample once per group across groups,
// slices bit-exact, the even slices make the whole, and a group reads about one sample.
void CheckWorld(const std::shared_ptr<Dataset>& ds, uint32_t degree) {
  const uint32_t groups = 2;
  const uint32_t world = groups * degree;
  std::vector<std::vector<Served>> by_group(groups);
  for (uint32_t r = 0; r < world; ++r)
    by_group[r / degree].push_back(Load(ds, SpOptions(r, world, degree)));
  std::multiset<uint64_t> all;
  uint64_t total_read = 0;
  for (uint32_t g = 0; g < groups; ++g) {
    SCOPED_TRACE("group " + std::to_string(g));
    const std::vector<uint64_t> order = Indices(by_group[g][0]);
    EXPECT_EQ(order.size(), kSamples / groups);
    for (const Served& r : by_group[g]) EXPECT_EQ(Indices(r), order) << "a rank of the group";
    all.insert(order.begin(), order.end());
    for (uint32_t k = 0; k < degree; ++k)
      ExpectSlicesOfWholeSamples(*ds, by_group[g][k], g * degree + k, degree);
    ExpectSlicesMakeTheWhole(*ds, by_group[g]);
    // Bytes: the group's ranks together read the group's samples about once: what each rank
    // reads beyond its rows is less than a block and a page at each end of each field.
    uint64_t stored = 0;
    for (uint64_t i : order) stored += ds->location(i).stored_size;
    uint64_t group_read = 0;
    for (const Served& r : by_group[g]) {
      group_read += r.bytes_read;
      EXPECT_LT(r.bytes_read, stored / degree + stored / 4) << "a rank read more than its share";
    }
    const uint64_t slack = order.size() * degree * 3 * 2 * (kBlockBytes + 4096);
    EXPECT_LE(group_read, stored + slack) << "the group read its samples more than once";
    EXPECT_GE(group_read, stored * 9 / 10);
    total_read += group_read;
  }
  std::multiset<uint64_t> want;
  for (uint64_t i = 0; i < kSamples; ++i) want.insert(i);
  EXPECT_EQ(all, want) << "each sample once per group across the groups";
  (void)total_read;
}

TEST(SpLoaderTest, TwoGroupsOfTwoAndOfFourRaw) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", FastOptions(), false);
  ASSERT_NE(ds, nullptr);
  ASSERT_TRUE(ds->has_row_blocks());
  for (uint32_t degree : {2u, 4u}) {
    SCOPED_TRACE("sequence_parallel " + std::to_string(degree));
    CheckWorld(ds, degree);
  }
}

TEST(SpLoaderTest, TwoGroupsOfTwoAndOfFourCompressAuto) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", CompressAuto(), true);
  ASSERT_NE(ds, nullptr);
  ASSERT_TRUE(ds->has_row_blocks());
  ASSERT_FALSE(ds->field_codecs().empty());
  for (uint32_t degree : {2u, 4u}) {
    SCOPED_TRACE("sequence_parallel " + std::to_string(degree));
    const uint32_t world = 2 * degree;
    std::vector<std::vector<Served>> by_group(2);
    for (uint32_t r = 0; r < world; ++r)
      by_group[r / degree].push_back(Load(ds, SpOptions(r, world, degree)));
    std::set<uint64_t> all;
    for (uint32_t g = 0; g < 2; ++g) {
      const std::vector<uint64_t> order = Indices(by_group[g][0]);
      for (const Served& r : by_group[g]) EXPECT_EQ(Indices(r), order);
      for (uint32_t k = 0; k < degree; ++k)
        ExpectSlicesOfWholeSamples(*ds, by_group[g][k], g * degree + k, degree);
      ExpectSlicesMakeTheWhole(*ds, by_group[g]);
      for (uint64_t i : order) EXPECT_TRUE(all.insert(i).second) << "sample " << i << " twice";
    }
    EXPECT_EQ(all.size(), kSamples);
  }
}

TEST(SpLoaderTest, ResumeMidEpochEqualsTheUninterruptedRun) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", FastOptions(), false);
  ASSERT_NE(ds, nullptr);
  for (uint32_t rank : {0u, 3u, 5u}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const LoaderOptions o = SpOptions(rank, 8, 4);
    const Served whole = Load(ds, o);
    const Served first = Load(ds, o, 5);
    LoaderOptions resumed = o;
    resumed.resume = first.state;
    const Served rest = Load(ds, resumed);
    std::vector<uint64_t> joined = Indices(first);
    for (uint64_t i : Indices(rest)) joined.push_back(i);
    EXPECT_EQ(joined, Indices(whole));
    ExpectSlicesOfWholeSamples(*ds, rest, rank, 4);
  }
  // Elastic: a state of the 2 groups of 4 continues on 4 groups of 2 (the data-parallel order
  // is the same order on another world size, docs/ORDER.md §3a, §4).
  const Served first = Load(ds, SpOptions(0, 8, 4), 4);
  std::multiset<uint64_t> seen;
  for (uint32_t g = 0; g < 2; ++g)
    for (uint64_t i : Indices(Load(ds, SpOptions(g * 4, 8, 4), 4))) seen.insert(i);
  for (uint32_t g = 0; g < 4; ++g) {
    LoaderOptions o = SpOptions(g * 2, 8, 2);
    o.resume = first.state;
    const Served rest = Load(ds, o);
    for (uint64_t i : Indices(rest)) seen.insert(i);
    // The other rank of the group gets the same.
    LoaderOptions other = SpOptions(g * 2 + 1, 8, 2);
    other.resume = first.state;
    EXPECT_EQ(Indices(Load(ds, other)), Indices(rest));
  }
  std::multiset<uint64_t> want;
  for (uint64_t i = 0; i < kSamples; ++i) want.insert(i);
  EXPECT_EQ(seen, want);
}

TEST(SpLoaderTest, UspRuleSlicesOverlapAndPadAsTheRuleSays) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", FastOptions(), false);
  ASSERT_NE(ds, nullptr);
  for (uint32_t r = 0; r < 4; ++r) {
    LoaderOptions o = SpOptions(r, 4, 4);
    o.sequence_parallel.rule = SplitRule::kSpecForgeUsp;
    o.sequence_parallel.ttt_length = 7;
    const Served s = Load(ds, o);
    ASSERT_EQ(s.samples.size(), kSamples);
    ExpectSlicesOfWholeSamples(*ds, s, r, 4, SplitRule::kSpecForgeUsp, 7);
  }
}

// A group of one (what trainers pass with sp_size 1) applies the rule: under 'even' every rank
// gets its data-parallel samples whole, in the order without sequence parallelism, each with its
// slice; under specforge-usp the whole sample padded by ttt_length (pad_to). A collated batch is
// allowed under 'even' (the slice is the whole sample) and equals the batch without it.
TEST(SpLoaderTest, AGroupOfOneAppliesTheRuleToTheWholeSample) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", FastOptions(), false);
  ASSERT_NE(ds, nullptr);
  for (uint32_t r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of 3");
    const Served off = Load(ds, SpOptions(r, 3, 0));
    const Served one = Load(ds, SpOptions(r, 3, 1));
    EXPECT_EQ(Indices(one), Indices(off));
    ExpectSlicesOfWholeSamples(*ds, one, r, 1);
    for (const Sample& s : one.samples) {
      EXPECT_EQ(s.sequence_slice().slice.start, 0u);
      EXPECT_EQ(s.sequence_slice().slice.stop, ds->length(s.index()));
      EXPECT_EQ(s.sequence_slice().slice.pad_to, ds->length(s.index()));
    }
    LoaderOptions usp = SpOptions(r, 3, 1);
    usp.sequence_parallel.rule = SplitRule::kSpecForgeUsp;
    usp.sequence_parallel.ttt_length = 7;
    const Served padded = Load(ds, usp);
    EXPECT_EQ(Indices(padded), Indices(off));
    ExpectSlicesOfWholeSamples(*ds, padded, r, 1, SplitRule::kSpecForgeUsp, 7);
    for (const Sample& s : padded.samples)
      EXPECT_EQ(s.sequence_slice().slice.pad_to, ds->length(s.index()) + 7);
  }
  LoaderOptions pad_off = SpOptions(0, 1, 0);
  pad_off.batch_size = 4;
  pad_off.collate = Collate::kPad;
  LoaderOptions pad_one = pad_off;
  pad_one.sequence_parallel.degree = 1;
  auto a = Loader::Create(ds, pad_off);
  auto b = Loader::Create(ds, pad_one);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto ba = (*a)->Next();
  auto bb = (*b)->Next();
  ASSERT_TRUE(ba.ok() && bb.ok());
  ASSERT_TRUE(ba->has_value() && bb->has_value());
  ASSERT_TRUE((*ba)->collated.has_value() && (*bb)->collated.has_value());
  const CollatedBatch& x = *(*ba)->collated;
  const CollatedBatch& y = *(*bb)->collated;
  EXPECT_EQ(x.indices, y.indices);
  EXPECT_EQ(x.lengths, y.lengths);
  ASSERT_EQ(x.tensors.size(), y.tensors.size());
  for (size_t k = 0; k < x.tensors.size(); ++k) {
    EXPECT_EQ(x.tensors[k].shape, y.tensors[k].shape);
    ASSERT_EQ(x.tensors[k].nbytes, y.tensors[k].nbytes);
    EXPECT_EQ(std::memcmp(x.tensors[k].data, y.tensors[k].data, x.tensors[k].nbytes), 0);
  }
}

TEST(SpLoaderTest, WithoutRowBlocksTheSliceReadsFieldsWhole) {
  TempDir tmp;
  auto written = WriteDataset(tmp / "ds", FastOptions(), false);
  ASSERT_NE(written, nullptr);
  written.reset();
  RewriteIndexAsV3(tmp / "ds");
  auto ds = Dataset::Open((tmp / "ds").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_FALSE((*ds)->has_row_blocks());
  ::testing::internal::CaptureStderr();
  std::vector<Served> group;
  for (uint32_t r = 0; r < 2; ++r) group.push_back(Load(*ds, SpOptions(r, 2, 2)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (uint32_t r = 0; r < 2; ++r) ExpectSlicesOfWholeSamples(**ds, group[r], r, 2);
  ExpectSlicesMakeTheWhole(**ds, group);
  EXPECT_NE(err.find("libshard:"), std::string::npos) << "no word that slices read whole";
}

TEST(SpLoaderTest, OptionsAreCheckedNamingTheOption) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", FastOptions(), false);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = SpOptions(0, 6, 4);
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"sequence_parallel", "does not divide world_size 6"});
  o = SpOptions(0, 4, 4);
  o.sequence_parallel.rule = SplitRule::kSpeculators;
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"sp_rule", "speculators"});
  o = SpOptions(0, 4, 4);
  o.sequence_parallel.ttt_length = 3;
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument, {"sp_ttt_length"});
  o = SpOptions(0, 4, 0);  // off: the rule's settings are an error, naming the way on
  o.sequence_parallel.rule = SplitRule::kSpecForgeUsp;
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"sp_rule", "None (off)", "sequence_parallel=1"});
  o = SpOptions(0, 4, 4);
  o.sequence_parallel.ulysses_size = 3;
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"sp_ulysses_size", "does not divide"});
  o = SpOptions(0, 4, 1);  // a group of one under a padding rule: collating would lose the pad
  o.sequence_parallel.rule = SplitRule::kSpecForgeUsp;
  o.collate = Collate::kPad;
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"collate", "sequence_parallel"});
  o = SpOptions(0, 4, 4);
  o.collate = Collate::kPad;
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"collate", "sequence_parallel"});
  // Through the option table, as front ends give them.
  ExpectError(LoaderOptionsFrom({{"sp_rule", OptionValue::Text("no-such-rule")}}).status(),
              StatusCode::kInvalidArgument, {"sp_rule", "no-such-rule"});
  ExpectError(LoaderOptionsFrom({{"sequence_parallel", OptionValue::Integer(0)}}).status(),
              StatusCode::kInvalidArgument, {"sequence_parallel", "out of range"});
  ExpectError(LoaderOptionsFrom({{"sequence_parallel", OptionValue::Integer(2, true)}}).status(),
              StatusCode::kInvalidArgument, {"sequence_parallel", "out of range"});
  auto off = LoaderOptionsFrom({{"sequence_parallel", OptionValue::None()}});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->sequence_parallel.enabled());
  EXPECT_FALSE(LoaderOptions{}.sequence_parallel.enabled());
  auto from = LoaderOptionsFrom({{"sequence_parallel", OptionValue::Integer(4)},
                                 {"sp_rule", OptionValue::Text("specforge-usp")},
                                 {"sp_ttt_length", OptionValue::Integer(7)}});
  ASSERT_TRUE(from.ok()) << from.status().ToString();
  EXPECT_EQ(from->sequence_parallel.degree, 4u);
  EXPECT_EQ(from->sequence_parallel.rule, SplitRule::kSpecForgeUsp);
  EXPECT_EQ(from->sequence_parallel.ttt_length, 7u);
}

TEST(SpLoaderTest, ASampleLargerThanTheArenaIsAClearErrorAndLoadsOnceSplit) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", FastOptions(), false);
  ASSERT_NE(ds, nullptr);
  // The largest samples are ~770 KB (hidden_state 724 KB); an arena of 512 KiB holds a quarter
  // of one (plus a block at each end of each field) but not one whole.
  LoaderOptions o = SpOptions(0, 1, 0);
  o.order = Order::Unshuffled();
  o.memory_budget = 512 << 10;
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Status failed;
  for (uint64_t k = 0; k < kSamples && failed.ok(); ++k) {
    auto b = (*loader)->Next();
    if (!b.ok()) failed = b.status();
  }
  ExpectError(failed, StatusCode::kResourceExhausted, {"memory_budget", "sequence_parallel"});
  for (uint32_t r = 0; r < 4; ++r) {
    LoaderOptions split = SpOptions(r, 4, 4);
    split.memory_budget = 512 << 10;
    auto sp_loader = Loader::Create(ds, split);
    ASSERT_TRUE(sp_loader.ok()) << sp_loader.status().ToString();
    uint64_t served = 0;
    while (true) {  // each sample dropped before the next, as a trainer does
      auto b = (*sp_loader)->Next();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      if (!b->has_value()) break;
      served += (*b)->samples.size();
    }
    EXPECT_EQ(served, kSamples);
  }
}

}  // namespace
}  // namespace libshard::testing
