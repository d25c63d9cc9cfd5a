// Tests for batches assembled in C++ (LoaderOptions::collate, loader/collate.h): the collator
// alone (pad and pack layouts, padding values per dtype, mismatched shapes, overflow guards) and
// a Loader with a collate, whose batches must hold bit-exactly the samples the same loader
// delivers without one (checked element by element, independently of the collator's row-block
// copies), across epochs, ranks, fields/max_len and token budgets; the batch arena's errors.
#include "loader/collate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "loader/streaming_loader.h"
#include "testutil/loader_hooks.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

namespace fs = std::filesystem;

// ---- Hand-made samples -------------------------------------------------------------------------

struct OwnedBatch {
  std::vector<std::shared_ptr<std::vector<std::byte>>> buffers;
  std::vector<Sample> samples;
};

// Field names that outlive every view (TensorView::name is a string_view).
const std::string kIds = "input_ids";
const std::string kMask = "loss_mask";
const std::string kHidden = "hidden_state";

// EagleSchema samples of the given lengths and hidden size: bytes 1 + (sample*31 + k) % 251, so
// no byte of a sample is 0 and padding with 0 is visible.
OwnedBatch MakeBatch(const std::vector<uint64_t>& lengths, uint64_t hidden) {
  OwnedBatch b;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const uint64_t len = lengths[i];
    const std::vector<std::pair<const std::string*, std::pair<DType, Shape>>> fields = {
        {&kIds, {DType::kInt64, {len}}},
        {&kMask, {DType::kInt64, {len}}},
        {&kHidden, {DType::kBFloat16, {1, len, hidden}}}};
    std::vector<TensorView> views;
    for (const auto& [name, spec] : fields) {
      const uint64_t nbytes = NumElements(spec.second) * DTypeSize(spec.first);
      auto buf = std::make_shared<std::vector<std::byte>>(nbytes);
      for (uint64_t k = 0; k < nbytes; ++k)
        (*buf)[k] = static_cast<std::byte>(1 + (i * 31 + k) % 251);
      views.push_back(TensorView{*name, spec.first, spec.second, buf->data(), nbytes});
      b.buffers.push_back(buf);
    }
    b.samples.emplace_back(100 + i, std::move(views), Metadata{{"k", int64_t(i)}}, nullptr);
  }
  return b;
}

struct Region {
  explicit Region(uint64_t n) : bytes(n + 64) {}
  std::byte* data() {
    auto p = reinterpret_cast<uintptr_t>(bytes.data());
    return bytes.data() + (64 - p % 64) % 64;
  }
  std::vector<std::byte> bytes;
};

Collator MakeCollator(Collate mode, double pad = 0,
                      std::vector<std::pair<std::string, double>> per_field = {}) {
  auto c = Collator::Make(testing::EagleSchema(), mode, pad, per_field, "/data/ds");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// ---- An element-wise reference check ------------------------------------------------------------

uint64_t ElementBits(const std::byte* p, size_t esize) {
  uint64_t v = 0;
  std::memcpy(&v, p, esize);
  return v;
}

// Checks that `got` (one field of a collated batch) holds each sample's tensor `f` where the
// layout rules put it, element by element, and `pad_bits` everywhere else (pad).
void ExpectFieldHoldsSamples(const TensorView& got, const std::vector<Sample>& samples, size_t f,
                             Collate mode, int32_t seq_dim, uint64_t pad_bits) {
  const size_t esize = DTypeSize(got.dtype);
  const Shape& bs = got.shape;
  std::vector<uint64_t> stride(bs.size(), 1);
  for (size_t d = bs.size(); d-- > 1;) stride[d - 1] = stride[d] * bs[d];
  ASSERT_EQ(NumElements(bs) * esize, got.nbytes);
  std::vector<bool> covered(NumElements(bs), false);
  uint64_t start = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const TensorView& v = samples[i].tensors()[f];
    ASSERT_EQ(v.dtype, got.dtype);
    const Shape& s = v.shape;
    const bool concat = mode == Collate::kPad && !s.empty() && seq_dim != 0 &&
                        std::all_of(samples.begin(), samples.end(), [&](const Sample& x) {
                          return x.tensors()[f].shape[0] == 1;
                        });
    const uint64_t n = NumElements(s);
    std::vector<uint64_t> idx(s.size(), 0);
    for (uint64_t e = 0; e < n; ++e) {
      uint64_t r = e;
      for (size_t d = s.size(); d-- > 0;) {
        idx[d] = r % s[d];
        r /= s[d];
      }
      // The batch index of this element.
      std::vector<uint64_t> b;
      if (mode == Collate::kPack && seq_dim >= 0) {
        b = idx;
        b[static_cast<size_t>(seq_dim)] += start;
      } else if (concat) {
        b = idx;
        b[0] = i;
      } else {
        b = {static_cast<uint64_t>(i)};
        b.insert(b.end(), idx.begin(), idx.end());
      }
      ASSERT_EQ(b.size(), bs.size());
      uint64_t off = 0;
      for (size_t d = 0; d < b.size(); ++d) {
        ASSERT_LT(b[d], bs[d]);
        off += b[d] * stride[d];
      }
      ASSERT_EQ(ElementBits(got.data + off * esize, esize), ElementBits(v.data + e * esize, esize))
          << got.name << " sample " << i << " element " << e;
      covered[off] = true;
    }
    if (seq_dim >= 0) start += s[static_cast<size_t>(seq_dim)];
  }
  for (uint64_t e = 0; e < covered.size(); ++e) {
    if (covered[e]) continue;
    ASSERT_EQ(mode, Collate::kPad) << got.name << ": element " << e << " of a packed batch unset";
    ASSERT_EQ(ElementBits(got.data + e * esize, esize), pad_bits)
        << got.name << ": padding element " << e;
  }
}

// ---- The collator alone ---------------------------------------------------------------------

TEST(CollateTest, PadLayoutMatchesPadCollate) {
  OwnedBatch b = MakeBatch({3, 5, 1}, 4);
  Collator c = MakeCollator(Collate::kPad);
  auto layout = c.Plan(b.samples);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->fields.size(), 3u);
  EXPECT_EQ(layout->fields[0].shape, (Shape{3, 5}));
  EXPECT_EQ(layout->fields[1].shape, (Shape{3, 5}));
  EXPECT_EQ(layout->fields[2].shape, (Shape{3, 5, 4}));  // [1, L, H] concatenated on dim 0
  for (const CollatedField& f : layout->fields) EXPECT_EQ(f.offset % kTensorAlignment, 0u);
  EXPECT_EQ(layout->lengths, (std::vector<int64_t>{3, 5, 1}));
  EXPECT_TRUE(layout->cu_seqlens.empty());
  EXPECT_EQ(layout->max_seqlen, 5);
  Region region(layout->total_bytes);
  std::memset(region.data(), 0xEE, layout->total_bytes);  // every byte must be written
  CollatedBatch out = c.Fill(*layout, b.samples, region.data(), nullptr);
  ASSERT_EQ(out.tensors.size(), 3u);
  EXPECT_EQ(out.indices, (std::vector<uint64_t>{100, 101, 102}));
  ASSERT_EQ(out.metadata.size(), 3u);
  EXPECT_EQ(out.metadata[2], (Metadata{{"k", int64_t(2)}}));
  for (size_t f = 0; f < 3; ++f)
    ExpectFieldHoldsSamples(out.tensors[f], b.samples, f, Collate::kPad, f == 2 ? 1 : 0, 0);
}

TEST(CollateTest, PackLayoutMatchesPackCollate) {
  OwnedBatch b = MakeBatch({3, 5, 2}, 4);
  Collator c = MakeCollator(Collate::kPack);
  auto layout = c.Plan(b.samples);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->fields[0].shape, (Shape{10}));
  EXPECT_EQ(layout->fields[2].shape, (Shape{1, 10, 4}));
  EXPECT_EQ(layout->cu_seqlens, (std::vector<int32_t>{0, 3, 8, 10}));
  EXPECT_EQ(layout->lengths, (std::vector<int64_t>{3, 5, 2}));
  EXPECT_EQ(layout->max_seqlen, 5);
  Region region(layout->total_bytes);
  CollatedBatch out = c.Fill(*layout, b.samples, region.data(), nullptr);
  for (size_t f = 0; f < 3; ++f)
    ExpectFieldHoldsSamples(out.tensors[f], b.samples, f, Collate::kPack, f == 2 ? 1 : 0, 0);
  EXPECT_EQ(out.cu_seqlens, layout->cu_seqlens);
}

TEST(CollateTest, PaddingValuesPerFieldAreExactInTheirDtype) {
  OwnedBatch b = MakeBatch({2, 6}, 3);
  // loss_mask with -100 (int64), hidden_state with 0.1 (bf16 0x3DCD), input_ids with the
  // default 7.9 (truncated to 7, as torch's fill_).
  Collator c = MakeCollator(Collate::kPad, 7.9, {{"loss_mask", -100}, {"hidden_state", 0.1}});
  auto layout = c.Plan(b.samples);
  ASSERT_TRUE(layout.ok());
  Region region(layout->total_bytes);
  CollatedBatch out = c.Fill(*layout, b.samples, region.data(), nullptr);
  ExpectFieldHoldsSamples(out.tensors[0], b.samples, 0, Collate::kPad, 0, 7);
  ExpectFieldHoldsSamples(out.tensors[1], b.samples, 1, Collate::kPad, 0,
                          static_cast<uint64_t>(int64_t{-100}));
  ExpectFieldHoldsSamples(out.tensors[2], b.samples, 2, Collate::kPad, 1, 0x3DCD);
}

TEST(CollateTest, PaddingBitsFollowTorchFill) {
  auto bits = [](DType d, double v) {
    auto r = PaddingBits(d, v);
    EXPECT_TRUE(r.ok()) << DTypeName(d) << " " << v << ": " << r.status().ToString();
    return r.ok() ? *r : ~uint64_t{0};
  };
  EXPECT_EQ(bits(DType::kBFloat16, 0.1), 0x3DCDu);
  EXPECT_EQ(bits(DType::kBFloat16, -1.0), 0xBF80u);
  EXPECT_EQ(bits(DType::kFloat16, 0.1), 0x2E66u);
  EXPECT_EQ(bits(DType::kFloat16, -0.0), 0x8000u);  // not a memset: the sign is kept
  EXPECT_EQ(bits(DType::kFloat32, 1.5), 0x3FC00000u);
  EXPECT_EQ(bits(DType::kFloat64, 2.0), 0x4000000000000000u);
  EXPECT_EQ(bits(DType::kInt64, -100), 0xFFFFFFFFFFFFFF9Cu);
  EXPECT_EQ(bits(DType::kInt64, -0.7), 0u);
  EXPECT_EQ(bits(DType::kInt32, -1), 0xFFFFFFFFu);
  EXPECT_EQ(bits(DType::kUInt8, -1), 0xFFu);  // torch wraps negatives for uint8
  EXPECT_EQ(bits(DType::kBool, 2.0), 1u);
  EXPECT_EQ(bits(DType::kFloat8E4M3FN, 0.3), 42u);  // torch.full((1,), 0.3, float8_e4m3fn)
  EXPECT_EQ(bits(DType::kFloat8E5M2, 1.0), 0x3Cu);
  EXPECT_EQ(bits(DType::kFloat8E5M2, -2.0), 0xC0u);
  for (auto [d, v] : std::vector<std::pair<DType, double>>{{DType::kInt8, 300},
                                                          {DType::kUInt64, -1},
                                                          {DType::kInt64, INFINITY},
                                                          {DType::kFloat16, 70000},
                                                          {DType::kBFloat16, 1e39},
                                                          {DType::kFloat8E4M3FN, 1000}}) {
    auto r = PaddingBits(d, v);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << DTypeName(d) << " " << v;
  }
}

TEST(CollateTest, BadPaddingValuesFailAtMakeNamingTheField) {
  auto c = Collator::Make(testing::EagleSchema(), Collate::kPad, 0, {{"loss_mask", 1e30}},
                          "/data/ds");
  testing::ExpectError(c.status(), StatusCode::kInvalidArgument,
                       {"loss_mask", "/data/ds", "overflow", "padding_values['loss_mask']"});
  c = Collator::Make(testing::EagleSchema(), Collate::kPad, 0, {{"no_such", 1}}, "/data/ds");
  testing::ExpectError(c.status(), StatusCode::kInvalidArgument,
                       {"'no_such' is not a field of /data/ds", "hidden_state"});
  // pack never pads: any value is fine.
  EXPECT_TRUE(Collator::Make(testing::EagleSchema(), Collate::kPack, 1e30, {}, "/d").ok());
}

TEST(CollateTest, MismatchedOtherDimIsInvalidArgumentNamingFieldSamplesAndDataset) {
  OwnedBatch a = MakeBatch({3}, 4);
  OwnedBatch b = MakeBatch({5}, 8);  // hidden size differs
  std::vector<Sample> samples = {a.samples[0], b.samples[0]};
  for (Collate mode : {Collate::kPad, Collate::kPack}) {
    auto layout = MakeCollator(mode).Plan(samples);
    testing::ExpectError(layout.status(), StatusCode::kInvalidArgument,
                         {"field 'hidden_state'", "samples 100 and 100", "/data/ds", "dim 2",
                          "[1, 3, 4] vs [1, 5, 8]", "fields="});
  }
}

TEST(CollateTest, SizesThatOverflowAreErrorsNotWraps) {
  // Views whose bytes are never touched: Plan reads only shapes.
  static std::byte dummy[64];
  const uint64_t huge = uint64_t{1} << 61;
  std::vector<Sample> samples;
  for (int i = 0; i < 8; ++i)
    samples.emplace_back(
        i, std::vector<TensorView>{TensorView{kIds, DType::kUInt8, {huge}, dummy, huge}},
        Metadata{}, nullptr);
  Schema schema;
  schema.fields = {{"input_ids", DType::kUInt8, 1, 0}};
  schema.length_field = 0;
  for (Collate mode : {Collate::kPad, Collate::kPack}) {
    auto c = Collator::Make(schema, mode, 0, {}, "/d");
    ASSERT_TRUE(c.ok());
    auto layout = c->Plan(samples);
    EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument) << layout.status().ToString();
    EXPECT_NE(layout.status().message().find("overflow"), std::string::npos)
        << layout.status().ToString();
  }
  // A shape whose product disagrees with the view's bytes (a lie) is refused too.
  std::vector<Sample> lying = {Sample(
      0, {TensorView{kIds, DType::kUInt8, {uint64_t{1} << 40, uint64_t{1} << 40}, dummy, 64}},
      Metadata{}, nullptr)};
  auto c = Collator::Make(schema, Collate::kPad, 0, {}, "/d");
  ASSERT_TRUE(c.ok());
  auto layout = c->Plan(lying);
  EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCollator(Collate::kPad).Plan({}).status().code(), StatusCode::kInvalidArgument);
}

// ---- The Loader with a collate ----------------------------------------------------------------

std::shared_ptr<Dataset> WriteDataset(const fs::path& dir, uint64_t n) {
  WriterOptions o = testing::FastOptions();
  o.shard_size = 1 << 20;
  auto w = Writer::Create(dir.string(), testing::EagleSchema(), o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  for (uint64_t i = 0; i < n; ++i) {
    testing::OwnedSample s = testing::MakeEagleSample(i, 5 + (i * 37) % 131, 64);
    Status st = (*w)->Append(s.input);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_TRUE((*w)->Finish().ok());
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

LoaderOptions SmallOptions() {
  LoaderOptions o;
  o.memory_budget = 4 << 20;
  o.queue_depth = 8;
  o.read_size = 16 << 10;
  o.pin_memory = PinMemory::kOff;
  o.slow_wait_warning_seconds = 30;
  return o;
}

// Every batch of two epochs of `o`, without collate (the same batches: consumer_pads keeps the
// budget and bucket window that kPad implies); samples are copied out of the arena.
std::vector<std::vector<Sample>> Reference(const std::shared_ptr<Dataset>& ds, LoaderOptions o,
                                           int epochs) {
  o.consumer_pads = o.collate == Collate::kPad;
  o.collate = Collate::kNone;
  o.padding_value = 0;  // padding values apply to kPad only
  o.padding_values.clear();
  std::vector<std::vector<Sample>> out;
  auto loader = Loader::Create(ds, o);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return out;
  for (int e = 0; e < epochs; ++e) {
    if (e > 0) EXPECT_TRUE((*loader)->SetEpoch(o.epoch + e).ok());
    while (true) {
      auto next = (*loader)->Next();
      EXPECT_TRUE(next.ok()) << next.status().ToString();
      if (!next.ok() || !next->has_value()) break;
      std::vector<Sample> batch;
      for (const Sample& s : (*next)->samples) {
        // A private copy of the views' bytes, so the arena slot goes back at once.
        auto keep = std::make_shared<std::vector<std::vector<std::byte>>>();
        std::vector<TensorView> views;
        for (const TensorView& t : s.tensors()) {
          keep->emplace_back(t.data, t.data + t.nbytes);
          TensorView v = t;
          v.data = keep->back().data();
          views.push_back(v);
        }
        batch.emplace_back(s.index(), std::move(views), s.metadata(), keep);
      }
      out.push_back(std::move(batch));
    }
  }
  return out;
}

void ExpectCollatedEqualsReference(const std::shared_ptr<Dataset>& ds, LoaderOptions o,
                                   int epochs, double pad = 0) {
  const std::vector<std::vector<Sample>> want = Reference(ds, o, epochs);
  ASSERT_FALSE(want.empty());
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  size_t b = 0;
  for (int e = 0; e < epochs; ++e) {
    if (e > 0) ASSERT_TRUE((*loader)->SetEpoch(o.epoch + e).ok());
    while (true) {
      auto next = (*loader)->Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      ASSERT_LT(b, want.size());
      const Batch& got = **next;
      EXPECT_TRUE(got.samples.empty());
      ASSERT_TRUE(got.collated.has_value());
      const CollatedBatch& c = *got.collated;
      const std::vector<Sample>& ref = want[b];
      ASSERT_EQ(c.indices.size(), ref.size()) << "batch " << b;
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_EQ(c.indices[i], ref[i].index());
        EXPECT_EQ(c.metadata[i], ref[i].metadata());
      }
      ASSERT_EQ(c.tensors.size(), ref[0].tensors().size());
      const Schema& schema = ds->schema();
      int64_t max_len = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const TensorView* ids = ref[i].Find("input_ids");  // the schema's length field
        const TensorView* hs = ref[i].Find("hidden_state");
        const uint64_t len = ids != nullptr ? ids->shape[0] : hs->shape[1];
        EXPECT_EQ(c.lengths[i], static_cast<int64_t>(len));
        max_len = std::max(max_len, c.lengths[i]);
      }
      EXPECT_EQ(c.max_seqlen, max_len);
      if (o.collate == Collate::kPack) {
        ASSERT_EQ(c.cu_seqlens.size(), ref.size() + 1);
        for (size_t i = 0; i < ref.size(); ++i)
          EXPECT_EQ(c.cu_seqlens[i + 1] - c.cu_seqlens[i], c.lengths[i]);
      }
      for (size_t f = 0; f < c.tensors.size(); ++f) {
        const int32_t seq = schema.fields[*schema.Find(c.tensors[f].name)].seq_dim;
        auto bits = PaddingBits(c.tensors[f].dtype, pad);
        ASSERT_TRUE(bits.ok());
        ExpectFieldHoldsSamples(c.tensors[f], ref, f, o.collate, seq, *bits);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(c.tensors[f].data) % kTensorAlignment, 0u);
      }
      ++b;
    }
  }
  EXPECT_EQ(b, want.size());
}

TEST(CollateLoaderTest, BatchesEqualTheUncollatedSamplesBitExact) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 26);
  ASSERT_NE(ds, nullptr);
  for (Collate mode : {Collate::kPad, Collate::kPack}) {
    for (uint32_t world : {1u, 2u}) {
      for (uint32_t rank = 0; rank < world; ++rank) {
        SCOPED_TRACE(std::string(mode == Collate::kPad ? "pad" : "pack") + " rank " +
                     std::to_string(rank) + "/" + std::to_string(world));
        LoaderOptions o = SmallOptions();
        o.order = Order::Shuffled(3);
        o.collate = mode;
        o.batch_size = 4;
        o.rank = rank;
        o.world_size = world;
        ExpectCollatedEqualsReference(ds, o, /*epochs=*/2);
      }
    }
  }
}

TEST(CollateLoaderTest, TokenBatchesFieldsMaxLenAndSingleSamples) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 20);
  ASSERT_NE(ds, nullptr);
  for (Collate mode : {Collate::kPad, Collate::kPack}) {
    LoaderOptions o = SmallOptions();
    o.collate = mode;
    o.max_tokens = 300;
    ExpectCollatedEqualsReference(ds, o, 1);
    o.max_tokens = 0;
    o.batch_size = 5;
    o.fields = {"hidden_state", "input_ids"};
    o.max_len = 40;
    ExpectCollatedEqualsReference(ds, o, 1);
    o.fields = {};
    o.max_len = 0;
    o.batch_size = 0;  // single samples: batches of one
    ExpectCollatedEqualsReference(ds, o, 1);
  }
  LoaderOptions o = SmallOptions();
  o.collate = Collate::kPad;
  o.batch_size = 3;
  o.padding_value = -3;
  ExpectCollatedEqualsReference(ds, o, 1, /*pad=*/-3);
}

TEST(CollateLoaderTest, BadPaddingValueFailsAtCreate) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 2);
  LoaderOptions o = SmallOptions();
  o.collate = Collate::kPad;
  o.padding_values = {{"hidden_state", 1e300}};
  auto loader = Loader::Create(ds, o);
  testing::ExpectError(loader.status(), StatusCode::kInvalidArgument,
                       {"hidden_state", "overflow"});
}

TEST(CollateLoaderTest, BatchLargerThanTheBatchMemoryIsAClearError) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 16);
  LoaderOptions o = SmallOptions();
  o.memory_budget = 512 << 10;  // batch memory 128 KiB; 16 samples of up to 17 KiB padded need more
  o.collate = Collate::kPad;
  o.batch_size = 16;
  o.order = Order::Unshuffled();
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto next = (*loader)->Next();
  testing::ExpectError(next.status(), StatusCode::kResourceExhausted,
                       {"collated batch of 16 samples", "part of memory_budget",
                        "raise memory_budget to at least", "batch_size"});
}

TEST(CollateLoaderTest, BatchMemoryGrowsForTwoLargestBatchesAndSaysWhenItCannot) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 16);  // lengths 5..135, 144 B/token
  auto lines_for = [&](uint64_t budget, uint32_t batch_size) {
    LoaderOptions o = SmallOptions();
    o.memory_budget = budget;
    o.collate = Collate::kPad;
    o.batch_size = batch_size;
    testing::RecordingSink sink;
    auto loader = StreamingLoader::Make(ds, o, {nullptr, sink.AsSink()});
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    return sink.Matching("a collated batch may need up to");
  };
  EXPECT_TRUE(lines_for(4 << 20, 4).empty());  // 2 x 4 x 135 x 144 B fit in 1 MiB
  // 16 x 135 x 144 B = 304 KiB a batch: 1/2 of 1 MiB holds one, not two.
  const std::vector<std::string> lines = lines_for(1 << 20, 16);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("raise memory_budget to at least"), std::string::npos) << lines[0];
  // The whole epoch still streams when each batch is dropped before the next.
  LoaderOptions o = SmallOptions();
  o.memory_budget = 1 << 20;
  o.collate = Collate::kPad;
  o.batch_size = 16;
  auto loader = StreamingLoader::Make(ds, o, {nullptr, [](const std::string&) {}});
  ASSERT_TRUE(loader.ok());
  auto next = (*loader)->Next();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ((**next).collated->indices.size(), 16u);
}

TEST(CollateLoaderTest, ConsumerHoldingEveryRegionGetsResourceExhaustedThenTheSameBatch) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 24);
  LoaderOptions o = SmallOptions();
  o.collate = Collate::kPack;
  o.batch_size = 2;
  o.order = Order::Unshuffled();
  o.memory_budget = 1 << 20;  // 256 KiB of batch regions: a few batches of up to 34 KiB
  o.slow_wait_warning_seconds = 0.5;  // the error after max(1, 2 x 0.5) s with nothing released
  auto clock = std::make_shared<testing::FakeClock>();
  testing::RecordingSink sink;
  auto loader = StreamingLoader::Make(ds, o, {clock, sink.AsSink()});
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  std::vector<Batch> held;
  std::vector<uint64_t> seen;
  Status error;
  while (error.ok()) {
    auto next = (*loader)->Next();
    if (!next.ok()) {
      error = next.status();
      break;
    }
    ASSERT_TRUE(next->has_value()) << "the whole epoch fit: raise the test's dataset size";
    for (uint64_t i : (**next).collated->indices) seen.push_back(i);
    held.push_back(std::move(**next));
  }
  testing::ExpectError(error, StatusCode::kResourceExhausted,
                       {"consumer holds", "collated batches", "nothing was released for",
                        "memory_budget"});
  held.clear();  // releasing lets the same loader go on, with the batch that failed
  while (true) {
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    for (uint64_t i : (**next).collated->indices) seen.push_back(i);
  }
  std::vector<uint64_t> all(24);
  for (uint64_t i = 0; i < 24; ++i) all[i] = i;
  EXPECT_EQ(seen, all);
}

TEST(CollateLoaderTest, SkippedSampleMakesItsBatchSmallerAndStateRecordsIt) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 12);
  ASSERT_NE(ds, nullptr);
  const uint64_t bad = 5;
  const SampleLocation loc = ds->location(bad);
  testing::FlipByte(ds->shards()[loc.shard].path, loc.offset + loc.stored_size / 2);
  for (Collate mode : {Collate::kPad, Collate::kPack}) {
    LoaderOptions o = SmallOptions();
    o.collate = mode;
    o.batch_size = 4;
    o.order = Order::Unshuffled();
    o.bucket_window = 0;  // consecutive batches, as `want` lists them (kPad's auto would bucket)
    o.verify_checksums = true;
    o.on_error = OnError::kSkip;
    auto loader = StreamingLoader::Make(ds, o, {nullptr, [](const std::string&) {}});
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    std::vector<std::vector<uint64_t>> batches;
    while (true) {
      auto next = (*loader)->Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      const CollatedBatch& c = *(**next).collated;
      batches.push_back(c.indices);
      // The batch's tensors hold only the samples delivered: lengths and shapes agree.
      ASSERT_EQ(c.lengths.size(), c.indices.size());
      int64_t sum = 0;
      for (int64_t len : c.lengths) sum += len;
      EXPECT_EQ(c.tensors[0].shape[0],
                static_cast<uint64_t>(mode == Collate::kPack ? sum : c.indices.size()));
    }
    const std::vector<std::vector<uint64_t>> want = {{0, 1, 2, 3}, {4, 6, 7}, {8, 9, 10, 11}};
    EXPECT_EQ(batches, want);
    EXPECT_EQ((*loader)->state().skipped, std::vector<uint64_t>{bad});
  }
}

TEST(CollateLoaderTest, BatchesOutliveTheLoader) {
  testing::TempDir dir;
  std::shared_ptr<Dataset> ds = WriteDataset(dir / "ds", 6);
  std::optional<CollatedBatch> kept;
  {
    LoaderOptions o = SmallOptions();
    o.collate = Collate::kPad;
    o.batch_size = 3;
    o.order = Order::Unshuffled();
    auto loader = Loader::Create(ds, o);
    ASSERT_TRUE(loader.ok());
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    kept = (*next)->collated;
  }
  ASSERT_TRUE(kept.has_value());
  auto want = ds->Read(0);
  ASSERT_TRUE(want.ok());
  const TensorView& ids = want->tensors()[0];
  EXPECT_EQ(std::memcmp(kept->tensors[0].data, ids.data, ids.nbytes), 0);
}

}  // namespace
}  // namespace libshard
