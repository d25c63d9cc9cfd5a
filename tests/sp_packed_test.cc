// Sequence parallelism over a packed batch (sp_rule='speculators' with
// collate='speculators-eagle3', speculators#871's --sp-size): SP rank r of N gets, bit for bit,
// positions [r·T/N, (r+1)·T/N) of every tensor of the whole packed batch but document_ids (whole),
// and its loader reads only the stored rows of the samples behind that part (about 1/N of the
// batch's bytes, plus row-block rounding at each end of each field of each sample); the same with
// the fp8 hidden states hs-connectors writes. A group of one is the whole batch. The options are
// checked, naming the option.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "codec/float8.h"
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
constexpr uint64_t kLayers = 4;         // L + 1
constexpr uint64_t kWidth = 64;         // H: hidden rows of 512 bytes (bf16), 256 (fp8)
constexpr uint64_t kSamples = 12;
constexpr uint64_t kRow = 1024;         // T, --total-seq-len
constexpr uint64_t kBatch = 3;

uint64_t SampleLength(uint64_t i) { return i == 4 ? 1 : 150 + 61 * i; }  // 1 .. 821 rows

std::shared_ptr<Dataset> WriteDataset(const fs::path& dir, bool fp8) {
  codec::ScopedWriterRowBlockBytes blocks(kBlockBytes);
  Schema schema;
  schema.fields = {{"hidden_states", fp8 ? DType::kFloat8E4M3FN : DType::kBFloat16, 3, 0},
                   {"token_ids", DType::kInt64, 1, 0}};
  if (fp8) schema.fields.push_back({"hidden_states_scales", DType::kFloat32, 3, 0});
  schema.length_field = 1;
  auto w = Writer::Create(dir.string(), schema, FastOptions());
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  for (uint64_t i = 0; i < kSamples; ++i) {
    const uint64_t s = SampleLength(i);
    std::vector<int64_t> ids(s);
    for (uint64_t k = 0; k < s; ++k) ids[k] = static_cast<int64_t>(i * 10000 + k);
    std::vector<uint16_t> bf(s * kLayers * kWidth);
    std::vector<uint8_t> q(s * kLayers * kWidth);
    std::vector<float> scales(s);
    for (uint64_t k = 0; k < bf.size(); ++k) {
      bf[k] = codec::F32ToBF16(static_cast<float>((i * 7 + k) % 1000) * 0.25f - 100.0f);
      q[k] = static_cast<uint8_t>((i * 31 + k * 7) % 0x7e);  // finite e4m3 values
    }
    for (uint64_t k = 0; k < s; ++k) scales[k] = 0.5f + static_cast<float>(k % 13);
    SampleInput in;
    if (fp8) {
      in.tensors = {
          TensorInput{"hidden_states", DType::kFloat8E4M3FN, {s, kLayers, kWidth}, q.data(), {}},
          TensorInput{"token_ids", DType::kInt64, {s}, ids.data(), {}},
          TensorInput{"hidden_states_scales", DType::kFloat32, {s, 1, 1}, scales.data(), {}}};
    } else {
      in.tensors = {
          TensorInput{"hidden_states", DType::kBFloat16, {s, kLayers, kWidth}, bf.data(), {}},
          TensorInput{"token_ids", DType::kInt64, {s}, ids.data(), {}}};
    }
    Status st = (*w)->Append(in);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto summary = (*w)->Finish();
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

LoaderOptions Options(uint32_t rank, uint32_t world, uint32_t degree) {
  LoaderOptions o;
  o.order = Order::Shuffled(7);
  o.rank = rank;
  o.world_size = world;
  o.batch_size = kBatch;
  o.collate = Collate::kSpeculatorsEagle3;
  o.recipe_len = kRow;
  o.memory_budget = 16 << 20;
  o.pin_memory = PinMemory::kOff;
  if (degree > 0) {
    o.sequence_parallel.degree = degree;
    o.sequence_parallel.rule = SplitRule::kSpeculators;
  }
  return o;
}

struct Tensor {
  std::string name;
  Shape shape;
  std::vector<std::byte> bytes;
};
struct Got {
  std::vector<std::vector<Tensor>> batches;
  std::vector<std::vector<uint64_t>> indices;
  std::vector<std::vector<int64_t>> lengths;
  uint64_t bytes_read = 0;
};

Got Load(const std::shared_ptr<Dataset>& ds, const LoaderOptions& o) {
  Got out;
  auto loader = Loader::Create(ds, o);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return out;
  while (true) {
    auto b = (*loader)->Next();
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok() || !b->has_value()) break;
    EXPECT_TRUE((*b)->collated.has_value());
    if (!(*b)->collated.has_value()) break;
    const CollatedBatch& c = *(*b)->collated;
    std::vector<Tensor> ts;
    for (const TensorView& t : c.tensors)
      ts.push_back({std::string(t.name), t.shape,
                    std::vector<std::byte>(t.data, t.data + t.nbytes)});
    out.batches.push_back(std::move(ts));
    out.indices.push_back(c.indices);
    out.lengths.push_back(c.lengths);
  }
  out.bytes_read = (*loader)->stats().bytes_read;
  return out;
}

// Positions [r·T/N, (r+1)·T/N) along dim 1 of a [1, T, ...] tensor (torch.chunk's part).
Tensor Part(const Tensor& whole, uint32_t r, uint32_t n) {
  const uint64_t t = whole.shape[1];
  const uint64_t row = whole.bytes.size() / t;
  const uint64_t per = t / n;
  Tensor out{whole.name, whole.shape, {}};
  out.shape[1] = per;
  out.bytes.assign(whole.bytes.begin() + static_cast<ptrdiff_t>(r * per * row),
                   whole.bytes.begin() + static_cast<ptrdiff_t>((r + 1) * per * row));
  return out;
}

void ExpectPartsOfTheWhole(const std::shared_ptr<Dataset>& ds, bool fp8, uint64_t max_len = 0) {
  LoaderOptions whole_options = Options(0, 1, 0);
  whole_options.max_len = max_len;
  const Got whole = Load(ds, whole_options);
  ASSERT_EQ(whole.batches.size(), kSamples / kBatch);
  uint64_t stored = 0;  // the bytes of every sample
  for (uint64_t i = 0; i < kSamples; ++i)
    stored += SampleLength(i) * (kLayers * kWidth * (fp8 ? 1 : 2) + 8 + (fp8 ? 4 : 0));
  // A rank's share, plus at most a row block at each end of each field of each sample.
  const uint64_t fields = fp8 ? 3 : 2;
  const uint64_t slack = kSamples * fields * 2 * kBlockBytes;
  for (uint32_t n : {1u, 2u, 4u}) {
    SCOPED_TRACE("sp " + std::to_string(n) + (fp8 ? " fp8" : " bf16"));
    uint64_t sum = 0;
    for (uint32_t r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      LoaderOptions o = Options(r, n, n);
      o.max_len = max_len;
      const Got got = Load(ds, o);
      ASSERT_EQ(got.batches.size(), whole.batches.size());
      EXPECT_EQ(got.indices, whole.indices);
      EXPECT_EQ(got.lengths, whole.lengths);
      for (size_t b = 0; b < whole.batches.size(); ++b) {
        const std::vector<Tensor>& w = whole.batches[b];
        const std::vector<Tensor>& g = got.batches[b];
        ASSERT_EQ(g.size(), w.size());
        for (size_t k = 0; k < w.size(); ++k) {
          SCOPED_TRACE("batch " + std::to_string(b) + " " + w[k].name);
          const Tensor want = w[k].name == "document_ids" ? w[k] : Part(w[k], r, n);
          EXPECT_EQ(g[k].name, want.name);
          EXPECT_EQ(g[k].shape, want.shape);
          EXPECT_TRUE(g[k].bytes == want.bytes) << "the part differs from the whole's";
        }
      }
      EXPECT_LE(got.bytes_read, stored / n + slack) << "whole " << whole.bytes_read;
      sum += got.bytes_read;
    }
    EXPECT_LE(sum, whole.bytes_read + n * slack);
    if (n == 1) EXPECT_LE(sum, whole.bytes_read + slack);
    if (n == 4) EXPECT_LT(sum / n, whole.bytes_read / 2) << "each rank read the whole batch";
    std::printf("sp %u%s: whole batches read %llu bytes, each rank %.3f of it on average\n", n,
                fp8 ? " fp8" : "", static_cast<unsigned long long>(whole.bytes_read),
                static_cast<double>(sum) / n / static_cast<double>(whole.bytes_read));
  }
}

TEST(SpPackedTest, EachRankBuildsItsPartOfThePackedBatchFromItsRows) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", false);
  ASSERT_NE(ds, nullptr);
  ASSERT_TRUE(ds->has_row_blocks());
  ExpectPartsOfTheWhole(ds, false);
}

// The loader's max_len cuts every sample before the recipe packs it, with SP as without.
TEST(SpPackedTest, MaxLenCutsTheSamplesFirst) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", false);
  ASSERT_NE(ds, nullptr);
  ExpectPartsOfTheWhole(ds, false, 300);
}

TEST(SpPackedTest, Fp8HiddenStatesToo) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", true);
  ASSERT_NE(ds, nullptr);
  ASSERT_TRUE(ds->has_row_blocks());
  ExpectPartsOfTheWhole(ds, true);
}

TEST(SpPackedTest, OptionsAreCheckedNamingTheOption) {
  TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", false);
  ASSERT_NE(ds, nullptr);
  LoaderOptions o = Options(0, 3, 3);  // 1024 is not a multiple of 3
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"sequence_parallel", "does not divide recipe_len 1024"});
  o = Options(0, 2, 2);
  o.collate = Collate::kNone;
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"sp_rule", "speculators-eagle3"});
  o = Options(0, 2, 2);
  o.sequence_parallel.rule = SplitRule::kEven;
  ExpectError(Loader::Create(ds, o).status(), StatusCode::kInvalidArgument,
              {"sp_rule", "'even' splits samples", "speculators"});
}

}  // namespace
}  // namespace libshard::testing
