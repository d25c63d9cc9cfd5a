// collate='specforge-eagle3': SpecForge 0.2's offline EAGLE-3 batch, as its FeatureDataLoader
// returns it with the eagle3 provider's normalizer and collator, without sequence parallelism
// (specforge/algorithms/eagle3/data.py normalize_offline_sample(raw, max_len) per sample, then
// specforge/data/utils.py DataCollatorWithPadding with sp_degree = ulysses_degree = 1).
//
// A stored sample (prepare_hidden_states.py): input_ids [S], loss_mask [S], aux_hidden_state
// [1, S, 3H], hidden_state [1, S, H]. With T = recipe_len (SpecForge's max_len), per sample:
//   input_ids      = input_ids[:T]                       -> [1, Li]
//   loss_mask      = loss_mask[:T], last element set to 0 -> [1, Lm]  (when Lm > 0)
//   attention_mask = ones(Lm) as int64                   -> [1, Lm]
//   hidden_state   = aux_hidden_state[0, :T]             -> [1, La, 3H]
//   target         = hidden_state[0, :T]                 -> [1, Lh, H]
// and the batch, N = the longest Li, every tensor zero-padded on the right to N:
//   input_ids [B, N], attention_mask [B, N] int64, loss_mask [B, N], hidden_state [B, N, 3H],
//   target [B, N, H]  (dtypes as stored; keys in this order).
// A field longer than N (SpecForge's collate fails on it) or trailing dimensions that differ
// between samples (torch.cat fails) are InvalidArgument. lengths: each sample's Li.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loader/recipes/batch_recipe.h"

namespace libshard {
namespace {

using recipe::Tensor;

constexpr std::string_view kIds = "input_ids";
constexpr std::string_view kMask = "loss_mask";
constexpr std::string_view kAux = "aux_hidden_state";
constexpr std::string_view kHidden = "hidden_state";
// The batch's keys, in DataCollatorWithPadding's order.
constexpr std::string_view kOutIds = "input_ids";
constexpr std::string_view kOutAttention = "attention_mask";
constexpr std::string_view kOutMask = "loss_mask";
constexpr std::string_view kOutHidden = "hidden_state";
constexpr std::string_view kOutTarget = "target";

class SpecForgeEagle3 final : public BatchRecipe {
 public:
  SpecForgeEagle3(uint64_t max_len, std::string dataset_path)
      : max_len_(max_len), path_(std::move(dataset_path)) {}

  Result<CollateLayout> Plan(std::span<const Sample> samples) const override {
    if (samples.empty()) return Status::InvalidArgument("cannot collate an empty batch");
    const BatchRecipeEntry& e = kSpecForgeEagle3Recipe;
    uint64_t n = 0;
    uint64_t aux_width = 0;
    uint64_t hidden_width = 0;
    DType dtypes[4] = {};
    CollateLayout layout;
    for (size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* ids, Tensor(s, kIds, e, path_));
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* mask, Tensor(s, kMask, e, path_));
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* aux, Tensor(s, kAux, e, path_));
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* hidden, Tensor(s, kHidden, e, path_));
      const TensorView* views[4] = {ids, mask, aux, hidden};
      for (int k = 0; k < 4; ++k) {
        const TensorView* v = views[k];
        const size_t rank = k < 2 ? 1 : 3;
        if (v->shape.size() != rank || (rank == 3 && v->shape[0] != 1))
          return Status::InvalidArgument(
              "collate='specforge-eagle3': '" + std::string(v->name) + "' of " +
              recipe::SampleText(s, path_) + " has shape " + recipe::ShapeText(v->shape) +
              ", but SpecForge's offline EAGLE-3 sample has " +
              (rank == 1 ? "[S]" : "[1, S, X]") + "; use the trainer's collate");
        if (i == 0) dtypes[k] = v->dtype;
        if (v->dtype != dtypes[k])
          return Status::InvalidArgument("collate='specforge-eagle3': '" + std::string(v->name) +
                                         "' differs in dtype between samples of " + path_);
      }
      if (i == 0) {
        aux_width = aux->shape[2];
        hidden_width = hidden->shape[2];
      }
      if (aux->shape[2] != aux_width || hidden->shape[2] != hidden_width)
        return Status::InvalidArgument(
            "collate='specforge-eagle3': " + recipe::SampleText(s, path_) +
            " has hidden sizes " + recipe::ShapeText(aux->shape) + " / " +
            recipe::ShapeText(hidden->shape) + " unlike the batch's first sample (" +
            std::to_string(aux_width) + " / " + std::to_string(hidden_width) +
            "); SpecForge cannot batch them either");
      const uint64_t li = std::min<uint64_t>(ids->shape[0], max_len_);
      layout.lengths.push_back(static_cast<int64_t>(li));
      n = std::max(n, li);
    }
    // SpecForge pads every field to the longest input_ids; a longer field cannot be padded.
    for (const Sample& s : samples) {
      for (std::string_view name : {kMask, kAux, kHidden}) {
        const TensorView* v = s.Find(name);
        const uint64_t len = std::min<uint64_t>(v->shape[name == kMask ? 0 : 1], max_len_);
        if (len > n)
          return Status::InvalidArgument(
              "collate='specforge-eagle3': '" + std::string(name) + "' of " +
              recipe::SampleText(s, path_) + " holds " + std::to_string(len) +
              " positions (after max_len " + std::to_string(max_len_) +
              ") but the batch's longest input_ids " + std::to_string(n) +
              "; SpecForge's collate cannot pad it either: fix the sample");
      }
    }
    const uint64_t b = samples.size();
    LIBSHARD_RETURN_IF_ERROR(recipe::AddTensor(&layout, kOutIds, dtypes[0], {b, n}, path_));
    LIBSHARD_RETURN_IF_ERROR(
        recipe::AddTensor(&layout, kOutAttention, DType::kInt64, {b, n}, path_));
    LIBSHARD_RETURN_IF_ERROR(recipe::AddTensor(&layout, kOutMask, dtypes[1], {b, n}, path_));
    LIBSHARD_RETURN_IF_ERROR(
        recipe::AddTensor(&layout, kOutHidden, dtypes[2], {b, n, aux_width}, path_));
    LIBSHARD_RETURN_IF_ERROR(
        recipe::AddTensor(&layout, kOutTarget, dtypes[3], {b, n, hidden_width}, path_));
    layout.max_seqlen = static_cast<int64_t>(n);
    return layout;
  }

  void Fill(const CollateLayout& layout, std::span<const Sample> samples,
            std::byte* region) const override {
    const CollatedField& ids_out = layout.fields[0];
    const CollatedField& attention_out = layout.fields[1];
    const CollatedField& mask_out = layout.fields[2];
    const CollatedField& hidden_out = layout.fields[3];
    const CollatedField& target_out = layout.fields[4];
    const uint64_t n = ids_out.shape[1];
    for (size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      const TensorView& ids = *s.Find(kIds);
      const TensorView& mask = *s.Find(kMask);
      const TensorView& aux = *s.Find(kAux);
      const TensorView& hidden = *s.Find(kHidden);
      {
        const uint64_t es = DTypeSize(ids.dtype);
        recipe::CopyRows(region + ids_out.offset + i * n * es, n, ids.data,
                         std::min<uint64_t>(ids.shape[0], max_len_), es);
      }
      const uint64_t lm = std::min<uint64_t>(mask.shape[0], max_len_);
      {
        const uint64_t es = DTypeSize(mask.dtype);
        std::byte* row = region + mask_out.offset + i * n * es;
        recipe::CopyRows(row, n, mask.data, lm, es);
        if (lm > 0) std::memset(row + (lm - 1) * es, 0, es);  // loss_mask[0, -1] = 0
        std::byte* attention = region + attention_out.offset + i * n * 8;
        for (uint64_t k = 0; k < n; ++k) recipe::StoreInteger(attention, DType::kInt64, k, k < lm);
      }
      {
        const uint64_t row = aux.shape[2] * DTypeSize(aux.dtype);
        recipe::CopyRows(region + hidden_out.offset + i * n * row, n, aux.data,
                         std::min<uint64_t>(aux.shape[1], max_len_), row);
      }
      {
        const uint64_t row = hidden.shape[2] * DTypeSize(hidden.dtype);
        recipe::CopyRows(region + target_out.offset + i * n * row, n, hidden.data,
                         std::min<uint64_t>(hidden.shape[1], max_len_), row);
      }
    }
  }

 private:
  const uint64_t max_len_;
  const std::string path_;
};

Result<std::unique_ptr<const BatchRecipe>> Make(const Schema& schema, const LoaderOptions& o,
                                                const std::string& path) {
  const BatchRecipeEntry& e = kSpecForgeEagle3Recipe;
  if (o.recipe_len == 0)
    return Status::InvalidArgument(
        "collate='specforge-eagle3' needs recipe_len: SpecForge's max_len (data.max_length)");
  using recipe::NeedField;
  LIBSHARD_RETURN_IF_ERROR(
      NeedField(schema, kIds, 1, recipe::IsIntegerOrBool, "an integer dtype", false, e, path)
          .status());
  LIBSHARD_RETURN_IF_ERROR(
      NeedField(schema, kMask, 1, recipe::IsAny, "any dtype", false, e, path).status());
  LIBSHARD_RETURN_IF_ERROR(
      NeedField(schema, kAux, 3, recipe::IsAny, "any dtype", false, e, path).status());
  LIBSHARD_RETURN_IF_ERROR(
      NeedField(schema, kHidden, 3, recipe::IsAny, "any dtype", false, e, path).status());
  return std::unique_ptr<const BatchRecipe>(std::make_unique<SpecForgeEagle3>(o.recipe_len, path));
}

}  // namespace

const BatchRecipeEntry kSpecForgeEagle3Recipe = {
    Collate::kSpecForgeEagle3, "specforge-eagle3",
    "SpecForge 0.2 offline EAGLE-3: normalize_offline_sample + DataCollatorWithPadding", Make};

}  // namespace libshard
