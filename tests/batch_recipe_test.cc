// Tests for the batch recipes (loader/recipes/): each trainer's batch on hand-made samples,
// checked element by element against the trainer's rule written out here (the Python suites
// tests/python/test_trainer_*.py check the same batches against the trainers' own code); the
// options that select them; the errors for samples a trainer cannot batch; and recipes served
// by a Loader over a written dataset.
#include "loader/recipes/batch_recipe.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codec/float8.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/writer.h"
#include "loader/collate.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

// One hand-made tensor: its values as int64 (integers) or float (floats, stored rounded).
struct Spec {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<double> values;  // NumElements(shape) values, or empty for k + 1
};

struct Owned {
  std::vector<std::shared_ptr<std::vector<std::byte>>> buffers;
  std::vector<std::unique_ptr<std::string>> names;
  std::vector<Sample> samples;
};

void Put(std::byte* p, DType dtype, double v) {
  switch (dtype) {
    case DType::kBFloat16: {
      const uint16_t b = codec::F32ToBF16(static_cast<float>(v));
      std::memcpy(p, &b, 2);
      return;
    }
    case DType::kFloat32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::kFloat8E4M3FN:
      *p = static_cast<std::byte>(codec::F32ToE4M3(static_cast<float>(v)));
      return;
    default:
      recipe::StoreInteger(p, dtype, 0, static_cast<int64_t>(v));
  }
}

void Add(Owned* o, uint64_t index, const std::vector<Spec>& specs) {
  std::vector<TensorView> views;
  for (const Spec& s : specs) {
    o->names.push_back(std::make_unique<std::string>(s.name));
    const uint64_t n = NumElements(s.shape);
    const size_t es = DTypeSize(s.dtype);
    auto buf = std::make_shared<std::vector<std::byte>>(n * es + 1);
    for (uint64_t k = 0; k < n; ++k)
      Put(buf->data() + k * es, s.dtype, s.values.empty() ? double(k + 1) : s.values[k]);
    views.push_back(TensorView{*o->names.back(), s.dtype, s.shape, buf->data(), n * es});
    o->buffers.push_back(buf);
  }
  o->samples.emplace_back(index, std::move(views), Metadata{}, nullptr);
}

Schema MakeSchema(const std::vector<std::tuple<std::string, DType, uint32_t>>& fields) {
  Schema s;
  for (const auto& [name, dtype, rank] : fields) s.fields.push_back(Field{name, dtype, rank, -1});
  return s;
}

struct Built {
  CollateLayout layout;
  std::vector<std::byte> bytes;
  CollatedBatch batch;
};

Result<Built> Build(const Schema& schema, const LoaderOptions& o, const Owned& owned) {
  LIBSHARD_ASSIGN_OR_RETURN(Collator c, Collator::Make(schema, o, "/data/ds"));
  Built b;
  LIBSHARD_ASSIGN_OR_RETURN(b.layout, c.Plan(owned.samples));
  b.bytes.assign(b.layout.total_bytes + 64, std::byte{0xAB});  // no stale zero passes as a pad
  auto p = reinterpret_cast<uintptr_t>(b.bytes.data());
  std::byte* region = b.bytes.data() + (64 - p % 64) % 64;
  b.batch = c.Fill(b.layout, owned.samples, region, nullptr);
  return b;
}

double Get(const TensorView& t, uint64_t k) {
  const std::byte* p = t.data + k * DTypeSize(t.dtype);
  if (t.dtype == DType::kBFloat16) {
    uint16_t b;
    std::memcpy(&b, p, 2);
    return codec::BF16ToF32(b);
  }
  TensorView one = t;
  one.data = p;
  return static_cast<double>(recipe::IntegerAt(one, 0));
}

const TensorView& Find(const CollatedBatch& b, std::string_view name) {
  for (const TensorView& t : b.tensors)
    if (t.name == name) return t;
  ADD_FAILURE() << "no tensor " << name;
  return b.tensors.front();
}

std::vector<std::string> Names(const CollatedBatch& b) {
  std::vector<std::string> out;
  for (const TensorView& t : b.tensors) out.emplace_back(t.name);
  return out;
}

LoaderOptions Recipe(Collate c, uint64_t len) {
  LoaderOptions o;
  o.collate = c;
  o.recipe_len = len;
  return o;
}

// ---- SpecForge ---------------------------------------------------------------------------------

Schema SpecForgeSchema() {
  return MakeSchema({{"input_ids", DType::kInt64, 1},
                     {"loss_mask", DType::kInt64, 1},
                     {"aux_hidden_state", DType::kBFloat16, 3},
                     {"hidden_state", DType::kBFloat16, 3}});
}

void AddSpecForge(Owned* o, uint64_t index, uint64_t s, uint64_t h) {
  std::vector<double> ids, mask;
  for (uint64_t k = 0; k < s; ++k) {
    ids.push_back(double(100 * index + k + 1));
    mask.push_back(1);
  }
  Add(o, index, {{"input_ids", DType::kInt64, {s}, ids},
                 {"loss_mask", DType::kInt64, {s}, mask},
                 {"aux_hidden_state", DType::kBFloat16, {1, s, 3 * h}, {}},
                 {"hidden_state", DType::kBFloat16, {1, s, h}, {}}});
}

TEST(SpecForgeEagle3, TruncatesShiftsTheMaskAndPads) {
  Owned o;
  AddSpecForge(&o, 0, 3, 2);
  AddSpecForge(&o, 1, 7, 2);  // longer than max_len 5
  auto b = Build(SpecForgeSchema(), Recipe(Collate::kSpecForgeEagle3, 5), o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const CollatedBatch& batch = b->batch;
  EXPECT_EQ(Names(batch), (std::vector<std::string>{"input_ids", "attention_mask", "loss_mask",
                                                    "hidden_state", "target"}));
  const TensorView& ids = Find(batch, "input_ids");
  ASSERT_EQ(ids.shape, (Shape{2, 5}));
  const double want_ids[2][5] = {{1, 2, 3, 0, 0}, {101, 102, 103, 104, 105}};
  const double want_mask[2][5] = {{1, 1, 0, 0, 0}, {1, 1, 1, 1, 0}};
  const double want_attention[2][5] = {{1, 1, 1, 0, 0}, {1, 1, 1, 1, 1}};
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(Get(ids, i * 5 + k), want_ids[i][k]);
      EXPECT_EQ(Get(Find(batch, "loss_mask"), i * 5 + k), want_mask[i][k]);
      EXPECT_EQ(Get(Find(batch, "attention_mask"), i * 5 + k), want_attention[i][k]);
    }
  }
  EXPECT_EQ(Find(batch, "attention_mask").dtype, DType::kInt64);
  const TensorView& hidden = Find(batch, "hidden_state");  // the stored aux_hidden_state
  ASSERT_EQ(hidden.shape, (Shape{2, 5, 6}));
  for (uint64_t k = 0; k < 30; ++k) {
    EXPECT_EQ(Get(hidden, k), k < 18 ? double(k + 1) : 0.0) << k;  // 3 rows, then zeros
    EXPECT_EQ(Get(hidden, 30 + k), double(k + 1)) << k;            // the first 5 of 7 rows
  }
  EXPECT_EQ(Find(batch, "target").shape, (Shape{2, 5, 2}));
  EXPECT_EQ(batch.lengths, (std::vector<int64_t>{3, 5}));
}

TEST(SpecForgeEagle3, RefusesWhatSpecForgeCannotBatch) {
  Owned o;
  AddSpecForge(&o, 0, 3, 2);
  AddSpecForge(&o, 1, 4, 4);  // another hidden size
  auto b = Build(SpecForgeSchema(), Recipe(Collate::kSpecForgeEagle3, 8), o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("sample 1 of /data/ds"), std::string::npos)
      << b.status().ToString();

  // A loss_mask longer than the batch's longest input_ids cannot be padded.
  Owned l;
  Add(&l, 7, {{"input_ids", DType::kInt64, {2}, {}},
              {"loss_mask", DType::kInt64, {4}, {}},
              {"aux_hidden_state", DType::kBFloat16, {1, 2, 3}, {}},
              {"hidden_state", DType::kBFloat16, {1, 2, 1}, {}}});
  b = Build(SpecForgeSchema(), Recipe(Collate::kSpecForgeEagle3, 8), l);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("'loss_mask' of sample 7"), std::string::npos);

  // A field the dataset lacks is named with the trainer at Make.
  Schema missing = MakeSchema({{"input_ids", DType::kInt64, 1}});
  auto c = Collator::Make(missing, Recipe(Collate::kSpecForgeEagle3, 8), "/data/ds");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'loss_mask'"), std::string::npos);
  EXPECT_NE(c.status().message().find("SpecForge"), std::string::npos);
  Schema wrong_rank = SpecForgeSchema();
  wrong_rank.fields[2].rank = 2;
  c = Collator::Make(wrong_rank, Recipe(Collate::kSpecForgeEagle3, 8), "/data/ds");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rank 3"), std::string::npos);
}

// ---- ModelOpt ----------------------------------------------------------------------------------

Schema ModelOptSchema(bool loss_mask) {
  auto s = MakeSchema({{"input_ids", DType::kInt64, 1},
                       {"hidden_states", DType::kBFloat16, 2},
                       {"aux_hidden_states", DType::kBFloat16, 2}});
  if (loss_mask) s.fields.push_back(Field{"loss_mask", DType::kInt64, 1, -1});
  return s;
}

void AddModelOpt(Owned* o, uint64_t index, uint64_t s) {
  std::vector<double> ids, mask;
  for (uint64_t k = 0; k < s; ++k) {
    ids.push_back(double(10 * index + k + 1));
    mask.push_back(k % 2 ? 3 : 0);  // converted as stored, 3 stays 3
  }
  Add(o, index, {{"input_ids", DType::kInt64, {s}, ids},
                 {"hidden_states", DType::kBFloat16, {s, 2}, {}},
                 {"aux_hidden_states", DType::kBFloat16, {s, 6}, {}},
                 {"loss_mask", DType::kInt64, {s}, mask}});
}

TEST(ModelOptEagle, LabelsMasksAndPadOrTruncate) {
  for (bool answer_only : {false, true}) {
    Owned o;
    AddModelOpt(&o, 0, 3);
    AddModelOpt(&o, 1, 6);  // longer than train_len 4
    LoaderOptions opts = Recipe(Collate::kModelOptEagle, 4);
    opts.fields = {"input_ids", "hidden_states", "aux_hidden_states"};
    if (answer_only) opts.fields.push_back("loss_mask");
    auto b = Build(ModelOptSchema(true), opts, o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const CollatedBatch& batch = b->batch;
    EXPECT_EQ(Names(batch),
              (std::vector<std::string>{"input_ids", "attention_mask", "loss_mask", "labels",
                                        "base_model_outputs/base_model_hidden_states",
                                        "base_model_outputs/aux_hidden_states"}));
    const double ids[2][4] = {{1, 2, 3, 0}, {11, 12, 13, 14}};
    const double labels[2][4] = {{2, 3, -100, 0}, {12, 13, 14, 15}};
    const double attention[2][4] = {{1, 1, 1, 0}, {1, 1, 1, 1}};
    const double stored[2][4] = {{0, 3, 0, 0}, {0, 3, 0, 3}};
    for (int i = 0; i < 2; ++i) {
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(Get(Find(batch, "input_ids"), i * 4 + k), ids[i][k]);
        EXPECT_EQ(Get(Find(batch, "labels"), i * 4 + k), labels[i][k]);
        EXPECT_EQ(Get(Find(batch, "attention_mask"), i * 4 + k), attention[i][k]);
        EXPECT_EQ(Get(Find(batch, "loss_mask"), i * 4 + k),
                  answer_only ? stored[i][k] : attention[i][k]);
      }
    }
    const TensorView& aux = Find(batch, "base_model_outputs/aux_hidden_states");
    ASSERT_EQ(aux.shape, (Shape{2, 4, 6}));
    for (uint64_t k = 0; k < 24; ++k) EXPECT_EQ(Get(aux, k), k < 18 ? double(k + 1) : 0.0);
    EXPECT_EQ(batch.lengths, (std::vector<int64_t>{3, 4}));
  }
}

TEST(ModelOptEagle, NeedsASignedIntegerInputIds) {
  Schema s = ModelOptSchema(false);
  s.fields[0].dtype = DType::kUInt8;  // torch.full_like(uint8, -100) fails in ModelOpt too
  auto c = Collator::Make(s, Recipe(Collate::kModelOptEagle, 8), "/data/ds");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("ModelOpt"), std::string::npos);
}

// ---- speculators -------------------------------------------------------------------------------

TEST(SpeculatorsEagle3, ShiftsPacksAndNumbersDocuments) {
  // hs [S, L+1 = 3, H = 2]: element values k + 1 in row-major order.
  Owned o;
  for (uint64_t i = 0; i < 3; ++i) {
    const uint64_t s = i == 0 ? 4 : (i == 1 ? 1 : 6);
    std::vector<double> tokens;
    for (uint64_t k = 0; k < s; ++k) tokens.push_back(double(10 * i + k));
    Add(&o, i, {{"hidden_states", DType::kBFloat16, {s, 3, 2}, {}},
                {"token_ids", DType::kInt64, {s}, tokens}});
  }
  Schema schema = MakeSchema({{"hidden_states", DType::kBFloat16, 3},
                              {"token_ids", DType::kInt64, 1}});
  auto b = Build(schema, Recipe(Collate::kSpeculatorsEagle3, 6), o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const CollatedBatch& batch = b->batch;
  EXPECT_EQ(Names(batch), (std::vector<std::string>{"input_ids", "hidden_states",
                                                    "verifier_last_hidden_states",
                                                    "position_ids", "document_ids"}));
  // Shifted rows: 3 (sample 0), 0 (sample 1), 3 of 5 (sample 2, truncated at T = 6).
  EXPECT_EQ(batch.lengths, (std::vector<int64_t>{3, 0, 3}));
  const double ids[6] = {1, 2, 3, 21, 22, 23};
  const double positions[6] = {1, 2, 3, 1, 2, 3};
  const double documents[6] = {0, 0, 0, 2, 2, 2};
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(Get(Find(batch, "input_ids"), k), ids[k]);
    EXPECT_EQ(Get(Find(batch, "position_ids"), k), positions[k]);
    EXPECT_EQ(Get(Find(batch, "document_ids"), k), documents[k]);
  }
  const TensorView& hidden = Find(batch, "hidden_states");
  const TensorView& verifier = Find(batch, "verifier_last_hidden_states");
  ASSERT_EQ(hidden.shape, (Shape{1, 6, 4}));
  ASSERT_EQ(verifier.shape, (Shape{1, 6, 2}));
  // Sample 0, row r: hidden = hs[r, :2] flattened (elements 6r+1 .. 6r+4), verifier =
  // hs[r + 1, 2] (elements 6(r+1)+5, 6(r+1)+6).
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 4; ++k) EXPECT_EQ(Get(hidden, r * 4 + k), 6 * r + k + 1);
    for (int k = 0; k < 2; ++k) EXPECT_EQ(Get(verifier, r * 2 + k), 6 * (r + 1) + 5 + k);
  }

  // A short batch: pads are 0, document ids -1.
  Owned one;
  Add(&one, 9, {{"hidden_states", DType::kBFloat16, {3, 3, 2}, {}},
                {"token_ids", DType::kInt64, {3}, {}}});
  b = Build(schema, Recipe(Collate::kSpeculatorsEagle3, 5), one);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(Get(Find(b->batch, "document_ids"), k), k < 2 ? 0 : -1);
    EXPECT_EQ(Get(Find(b->batch, "position_ids"), k), k < 2 ? k + 1 : 0);
  }
  for (int k = 8; k < 20; ++k) EXPECT_EQ(Get(Find(b->batch, "hidden_states"), k), 0);
}

TEST(SpeculatorsEagle3, DequantizesFp8AsHsConnectors) {
  // q.to(bf16) * scale.to(bf16), rounded to bf16.
  const std::vector<double> q = {1.5, -2, 0.25, 448, -0.015625, 3, 7, 0.5, 1, 2, 4, 8};
  const std::vector<double> scales = {0.0123456, 3.3, 1e-3};
  Owned o;
  Add(&o, 0, {{"hidden_states", DType::kFloat8E4M3FN, {3, 2, 2}, q},
              {"hidden_states_scales", DType::kFloat32, {3, 1, 1}, scales},
              {"token_ids", DType::kInt64, {3}, {}}});
  Schema schema = MakeSchema({{"hidden_states", DType::kFloat8E4M3FN, 3},
                              {"hidden_states_scales", DType::kFloat32, 3},
                              {"token_ids", DType::kInt64, 1}});
  auto b = Build(schema, Recipe(Collate::kSpeculatorsEagle3, 2), o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto deq = [&](size_t row, size_t k) {
    const float s = codec::BF16ToF32(codec::F32ToBF16(static_cast<float>(scales[row])));
    const float v = codec::E4M3ToF32(codec::F32ToE4M3(static_cast<float>(q[row * 4 + k])));
    return double(codec::BF16ToF32(codec::F32ToBF16(v * s)));
  };
  const TensorView& hidden = Find(b->batch, "hidden_states");
  const TensorView& verifier = Find(b->batch, "verifier_last_hidden_states");
  for (size_t r = 0; r < 2; ++r) {
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(Get(hidden, r * 2 + k), deq(r, k));
      EXPECT_EQ(Get(verifier, r * 2 + k), deq(r + 1, 2 + k));
    }
  }
}

// ---- Options -----------------------------------------------------------------------------------

TEST(BatchRecipeOptions, NamesAndRecipeLen) {
  for (const BatchRecipeEntry* e : BatchRecipes()) {
    auto parsed = ParseCollate(e->name);
    ASSERT_TRUE(parsed.ok()) << e->name;
    EXPECT_EQ(*parsed, e->id);
    EXPECT_EQ(FindBatchRecipe(e->id), e);
  }
  EXPECT_EQ(FindBatchRecipe(Collate::kPad), nullptr);
  auto bad = ParseCollate("specforge");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("specforge-eagle3"), std::string::npos);

  LoaderOptions o;
  o.collate = Collate::kModelOptEagle;
  Status s = ValidateLoaderOptions(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("recipe_len"), std::string::npos);
  o.recipe_len = 16;
  EXPECT_TRUE(ValidateLoaderOptions(o).ok());
  o.collate = Collate::kPad;
  EXPECT_FALSE(ValidateLoaderOptions(o).ok());  // recipe_len without a recipe

  LoaderOptions t;
  ASSERT_TRUE(LoaderOptionTable().Set(t, "collate", OptionValue::Text("speculators-eagle3")).ok());
  ASSERT_TRUE(LoaderOptionTable().Set(t, "recipe_len", OptionValue::Integer(64)).ok());
  EXPECT_EQ(t.collate, Collate::kSpeculatorsEagle3);
  EXPECT_EQ(t.recipe_len, 64u);
  // Recipes never turn on length bucketing: the trainer's order stands.
  t.batch_size = 8;
  auto resolved = ResolveLoaderOptions(t);
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(resolved->bucket_window, 0u);
}

// ---- Through a Loader --------------------------------------------------------------------------

TEST(BatchRecipeLoader, ServesSpecForgeBatchesOfTheSamplesItReads) {
  testing::TempDir dir;
  const std::filesystem::path path = dir / "ds";
  {
    Schema schema = SpecForgeSchema();
    const int32_t seq_dims[4] = {0, 0, 1, 1};
    for (size_t f = 0; f < 4; ++f) schema.fields[f].seq_dim = seq_dims[f];
    schema.length_field = 0;
    auto w = Writer::Create(path.string(), schema);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = 0; i < 10; ++i) {
      const uint64_t s = 3 + (i * 5) % 9;
      std::vector<int64_t> ids(s), mask(s, 1);
      std::vector<uint16_t> aux(s * 12), hidden(s * 4);
      for (uint64_t k = 0; k < s; ++k) ids[k] = static_cast<int64_t>(i * 1000 + k);
      for (uint64_t k = 0; k < aux.size(); ++k) aux[k] = codec::F32ToBF16(float(i + k));
      for (uint64_t k = 0; k < hidden.size(); ++k) hidden[k] = codec::F32ToBF16(float(i - k));
      SampleInput in;
      in.tensors = {TensorInput{"input_ids", DType::kInt64, {s}, ids.data(), {}},
                    TensorInput{"loss_mask", DType::kInt64, {s}, mask.data(), {}},
                    TensorInput{"aux_hidden_state", DType::kBFloat16, {1, s, 12}, aux.data(), {}},
                    TensorInput{"hidden_state", DType::kBFloat16, {1, s, 4}, hidden.data(), {}}};
      ASSERT_TRUE((*w)->Append(in).ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto ds = Dataset::Open(path.string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  LoaderOptions o = Recipe(Collate::kSpecForgeEagle3, 6);
  o.batch_size = 3;
  o.order = Order::Shuffled(5);
  o.memory_budget = 8 << 20;
  o.pin_memory = PinMemory::kOff;
  auto loader = Loader::Create(*ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  int batches = 0;
  while (true) {
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    ASSERT_TRUE((*next)->collated.has_value());
    const CollatedBatch& batch = *(*next)->collated;
    ASSERT_EQ(batch.indices.size(), batch.lengths.size());
    const TensorView& ids = Find(batch, "input_ids");
    const uint64_t n = ids.shape[1];
    for (size_t i = 0; i < batch.indices.size(); ++i) {
      const uint64_t index = batch.indices[i];
      const uint64_t s = 3 + (index * 5) % 9;
      EXPECT_EQ(static_cast<uint64_t>(batch.lengths[i]), std::min<uint64_t>(s, 6));
      for (uint64_t k = 0; k < n; ++k)
        EXPECT_EQ(Get(ids, i * n + k), k < std::min<uint64_t>(s, 6) ? double(index * 1000 + k) : 0);
    }
    ++batches;
  }
  EXPECT_EQ(batches, 4);
}

}  // namespace
}  // namespace libshard
