// Helpers for the format, writer and dataset tests: deterministic samples, dataset writing and
// bit-exact comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/sample.h"
#include "libshard/schema.h"
#include "libshard/writer.h"

namespace libshard::testing {

inline uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A sample with its tensor bytes owned here (SampleInput only points at them).
struct OwnedSample {
  SampleInput input;
  std::vector<std::vector<std::byte>> bytes;  // per tensor, in input.tensors order
};

// The EAGLE-3-like schema: input_ids int64 [L], loss_mask int64 [L], hidden_state bf16 [1,L,H].
inline Schema EagleSchema() {
  Schema s;
  s.fields = {{"input_ids", DType::kInt64, 1, 0},
              {"loss_mask", DType::kInt64, 1, 0},
              {"hidden_state", DType::kBFloat16, 3, 1}};
  s.length_field = 0;
  return s;
}

// Deterministic contents for `shapes` (one per schema field). `compressible` makes values from a
// small alphabet (as real bf16 activations largely are) so zstd saves space.
inline OwnedSample MakeSample(const Schema& schema, const std::vector<Shape>& shapes, uint64_t seed,
                              bool compressible = false) {
  OwnedSample s;
  uint64_t state = seed * 7919 + 1;
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const Field& field = schema.fields[f];
    uint64_t n = NumElements(shapes[f]) * DTypeSize(field.dtype);
    std::vector<std::byte> b(n);
    for (uint64_t k = 0; k < n; ++k) {
      uint64_t r = SplitMix(&state);
      if (compressible) r = (k % 2 == 1) ? 0x3f : (r % 4);
      if (field.dtype == DType::kBool) r &= 1;
      b[k] = static_cast<std::byte>(r);
    }
    s.bytes.push_back(std::move(b));
  }
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    TensorInput t;
    t.name = schema.fields[f].name;
    t.dtype = schema.fields[f].dtype;
    t.shape = shapes[f];
    t.data = s.bytes[f].data();
    s.input.tensors.push_back(std::move(t));
  }
  s.input.source.path = "dump/data_" + std::to_string(seed) + ".pt";
  s.input.source.size = 1000 + seed;
  s.input.source.mtime_ns = 1700000000000000000ll + static_cast<int64_t>(seed);
  s.input.source.content_hash = 0xABCD0000ull + seed;
  s.input.metadata = {{"conversation_id", std::string("conv-") + std::to_string(seed)},
                      {"turn", static_cast<int64_t>(seed)},
                      {"score", 0.5 + static_cast<double>(seed)},
                      {"is_train", seed % 2 == 0}};
  return s;
}

inline OwnedSample MakeEagleSample(uint64_t seed, uint64_t len, uint64_t hidden,
                                   bool compressible = false) {
  return MakeSample(EagleSchema(), {{len}, {len}, {1, len, hidden}}, seed, compressible);
}

// The i-th sample of the standard test sequence (varying lengths).
inline OwnedSample StandardSample(uint64_t i, bool compressible = false) {
  return MakeEagleSample(i, 3 + (i * 5) % 17, 24, compressible);
}

// Asserts that `got` holds exactly the tensors, metadata of `want`.
inline void ExpectSampleEq(const Sample& got, const OwnedSample& want) {
  ASSERT_EQ(got.tensors().size(), want.input.tensors.size());
  for (size_t f = 0; f < want.input.tensors.size(); ++f) {
    const TensorInput& w = want.input.tensors[f];
    const TensorView* t = got.Find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->dtype, w.dtype) << w.name;
    EXPECT_EQ(t->shape, w.shape) << w.name;
    ASSERT_EQ(t->nbytes, want.bytes[f].size()) << w.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % kTensorAlignment, 0u) << w.name;
    EXPECT_TRUE(t->nbytes == 0 || std::memcmp(t->data, want.bytes[f].data(), t->nbytes) == 0)
        << "tensor '" << w.name << "' bytes differ";
  }
  EXPECT_EQ(got.metadata(), want.input.metadata);
}

// The bytes and shape of `t` (a whole tensor of `field`) cut to rows [rows.start, rows.stop)
// along its seq_dim (clipped to its length), as a row-range read must give them.
inline std::pair<std::vector<std::byte>, Shape> CutRows(const TensorView& t, const Field& field,
                                                        RowRange rows) {
  if (field.seq_dim < 0)
    return {std::vector<std::byte>(t.data, t.data + t.nbytes), t.shape};
  const auto s = static_cast<size_t>(field.seq_dim);
  uint64_t outer = 1, token = DTypeSize(field.dtype);
  for (size_t d = 0; d < s; ++d) outer *= t.shape[d];
  for (size_t d = s + 1; d < t.shape.size(); ++d) token *= t.shape[d];
  const uint64_t seq = t.shape[s];
  const uint64_t begin = std::min(rows.start, seq), end = std::min(rows.stop, seq);
  std::vector<std::byte> out;
  for (uint64_t o = 0; o < outer; ++o)
    out.insert(out.end(), t.data + (o * seq + begin) * token, t.data + (o * seq + end) * token);
  Shape shape = t.shape;
  shape[s] = end - begin;
  return {std::move(out), std::move(shape)};
}

// Dataset::Read(i, {rows}) gives, bit for bit, Read(i) cut to `rows` (every field, 64-byte
// aligned views), and says which rows of how many it served.
inline void ExpectRowRangeRead(const Dataset& ds, uint64_t i, RowRange rows) {
  SCOPED_TRACE("sample " + std::to_string(i) + " rows [" + std::to_string(rows.start) + ", " +
               std::to_string(rows.stop) + ")");
  auto whole = ds.Read(i);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ReadRequest req;
  req.rows = rows;
  auto cut = ds.Read(i, req);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  ASSERT_EQ(cut->tensors().size(), whole->tensors().size());
  for (size_t f = 0; f < ds.schema().fields.size(); ++f) {
    const Field& field = ds.schema().fields[f];
    const TensorView* w = whole->Find(field.name);
    const TensorView* g = cut->Find(field.name);
    ASSERT_NE(w, nullptr);
    ASSERT_NE(g, nullptr);
    auto [bytes, shape] = CutRows(*w, field, rows);
    EXPECT_EQ(g->shape, shape) << field.name;
    EXPECT_EQ(g->dtype, w->dtype) << field.name;
    ASSERT_EQ(g->nbytes, bytes.size()) << field.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(g->data) % kTensorAlignment, 0u) << field.name;
    EXPECT_TRUE(bytes.empty() || std::memcmp(g->data, bytes.data(), bytes.size()) == 0)
        << field.name << ": the rows differ from the whole read's";
  }
  EXPECT_EQ(cut->length(), ds.length(i));
  const uint64_t len = ds.schema().length_field >= 0 ? ds.length(i) : RowRange::kEnd;
  EXPECT_EQ(cut->rows(), (RowRange{std::min(rows.start, len), std::min(rows.stop, len)}));
  EXPECT_EQ(cut->metadata(), whole->metadata());
}

// Writes samples [0, n) of StandardSample into `dir`.
inline void WriteStandard(const std::filesystem::path& dir, uint64_t n,
                          const WriterOptions& options = {}, bool compressible = false,
                          uint64_t first = 0) {
  auto w = Writer::Create(dir.string(), EagleSchema(), options);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = first; i < first + n; ++i) {
    OwnedSample s = StandardSample(i, compressible);
    Status st = (*w)->Append(s.input);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  auto summary = (*w)->Finish();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
}

inline WriterOptions FastOptions() {
  WriterOptions o;
  o.fsync = false;
  o.created_by = "libshard tests";
  return o;
}

// Expects a status with `code` whose message contains every string of `parts`.
inline void ExpectError(const Status& st, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  for (const std::string& p : parts)
    EXPECT_NE(st.message().find(p), std::string::npos)
        << "message lacks '" << p << "': " << st.ToString();
}

}  // namespace libshard::testing
