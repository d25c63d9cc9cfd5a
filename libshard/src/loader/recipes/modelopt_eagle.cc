// collate='modelopt-eagle': NVIDIA ModelOpt 0.47's offline EAGLE batch, as a DataLoader over
// OfflineSupervisedDataset(answer_only_loss) with EagleOfflineDataCollator(train_len) returns it
// (modelopt/torch/speculative/eagle/utils.py).
//
// A stored sample (a `<conversation_id>.pt` dump): input_ids [S] (a signed integer dtype),
// hidden_states [S, H], aux_hidden_states [S, A], optionally loss_mask [S]. Per sample, as
// OfflineSupervisedDataset.__getitem__:
//   labels         = input_ids[1:] followed by -100 (IGNORE_TOKEN_ID), in input_ids' dtype
//   loss_mask      = the stored loss_mask converted to input_ids' dtype when the loader reads
//                    it (answer_only_loss=True: read it with `fields`), else ones
//   attention_mask = ones, in input_ids' dtype
// and, as the collator, every tensor truncated or zero-padded along dim 0 to T = recipe_len
// (train_len) and stacked:
//   input_ids, attention_mask, loss_mask, labels [B, T] (input_ids' dtype);
//   base_model_outputs/base_model_hidden_states [B, T, H], base_model_outputs/aux_hidden_states
//   [B, T, A] (dtypes as stored).
// (The labels are padded with 0, not -100: ModelOpt's collator pads with new_zeros.) The
// collator's base_model_outputs["base_hidden_prenorm"], a Python bool, is the front end's (False
// unless the dump declares hidden_states_prenorm). Hidden sizes that differ between samples
// (torch.stack fails) are InvalidArgument. lengths: each sample's min(S, T).
#include <algorithm>
#include <memory>
#include <string>

#include "loader/recipes/batch_recipe.h"

namespace libshard {
namespace {

using recipe::Tensor;

constexpr std::string_view kIds = "input_ids";
constexpr std::string_view kHidden = "hidden_states";
constexpr std::string_view kAux = "aux_hidden_states";
constexpr std::string_view kMask = "loss_mask";
constexpr std::string_view kOutIds = "input_ids";
constexpr std::string_view kOutAttention = "attention_mask";
constexpr std::string_view kOutMask = "loss_mask";
constexpr std::string_view kOutLabels = "labels";
constexpr std::string_view kOutHidden = "base_model_outputs/base_model_hidden_states";
constexpr std::string_view kOutAux = "base_model_outputs/aux_hidden_states";
constexpr int64_t kIgnoreTokenId = -100;

bool IsSignedInteger(DType d) {
  return d == DType::kInt16 || d == DType::kInt32 || d == DType::kInt64;
}

class ModelOptEagle final : public BatchRecipe {
 public:
  ModelOptEagle(uint64_t train_len, bool use_loss_mask, std::string dataset_path)
      : train_len_(train_len), use_loss_mask_(use_loss_mask), path_(std::move(dataset_path)) {}

  Result<CollateLayout> Plan(std::span<const Sample> samples) const override {
    if (samples.empty()) return Status::InvalidArgument("cannot collate an empty batch");
    const BatchRecipeEntry& e = kModelOptEagleRecipe;
    CollateLayout layout;
    const TensorView* first[2] = {};
    DType ids_dtype = DType::kInt64;
    for (size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* ids, Tensor(s, kIds, e, path_));
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* hidden, Tensor(s, kHidden, e, path_));
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* aux, Tensor(s, kAux, e, path_));
      if (use_loss_mask_) {
        LIBSHARD_ASSIGN_OR_RETURN(const TensorView* mask, Tensor(s, kMask, e, path_));
        if (mask->shape.size() != 1 || !recipe::IsIntegerOrBool(mask->dtype))
          return BadShape(s, *mask, "[S] of an integer or bool dtype");
      }
      if (ids->shape.size() != 1 || !IsSignedInteger(ids->dtype))
        return BadShape(s, *ids, "[S] of int16, int32 or int64");
      if (i == 0) ids_dtype = ids->dtype;
      if (ids->dtype != ids_dtype)
        return Status::InvalidArgument("collate='modelopt-eagle': input_ids differ in dtype "
                                       "between samples of " + path_);
      const TensorView* states[2] = {hidden, aux};
      for (int k = 0; k < 2; ++k) {
        const TensorView* v = states[k];
        if (v->shape.size() != 2) return BadShape(s, *v, "[S, H]");
        if (i == 0) first[k] = v;
        if (v->dtype != first[k]->dtype || v->shape[1] != first[k]->shape[1])
          return Status::InvalidArgument(
              "collate='modelopt-eagle': '" + std::string(v->name) + "' of " +
              recipe::SampleText(s, path_) + " is " + recipe::ShapeText(v->shape) + " " +
              std::string(DTypeName(v->dtype)) + ", unlike the batch's first sample (" +
              recipe::ShapeText(first[k]->shape) + " " +
              std::string(DTypeName(first[k]->dtype)) +
              "); ModelOpt's collator cannot stack them either");
      }
      layout.lengths.push_back(static_cast<int64_t>(std::min<uint64_t>(ids->shape[0], train_len_)));
    }
    const uint64_t b = samples.size();
    const uint64_t t = train_len_;
    for (std::string_view name : {kOutIds, kOutAttention, kOutMask, kOutLabels})
      LIBSHARD_RETURN_IF_ERROR(recipe::AddTensor(&layout, name, ids_dtype, {b, t}, path_));
    LIBSHARD_RETURN_IF_ERROR(recipe::AddTensor(&layout, kOutHidden, first[0]->dtype,
                                               {b, t, first[0]->shape[1]}, path_));
    LIBSHARD_RETURN_IF_ERROR(recipe::AddTensor(&layout, kOutAux, first[1]->dtype,
                                               {b, t, first[1]->shape[1]}, path_));
    layout.max_seqlen = static_cast<int64_t>(t);
    return layout;
  }

  void Fill(const CollateLayout& layout, std::span<const Sample> samples,
            std::byte* region) const override {
    const uint64_t t = train_len_;
    const CollatedField& ids_out = layout.fields[0];
    const DType dt = ids_out.dtype;
    const uint64_t es = DTypeSize(dt);
    for (size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      const TensorView& ids = *s.Find(kIds);
      const uint64_t len = ids.shape[0];
      std::byte* ids_row = region + ids_out.offset + i * t * es;
      std::byte* attention_row = region + layout.fields[1].offset + i * t * es;
      std::byte* mask_row = region + layout.fields[2].offset + i * t * es;
      std::byte* labels_row = region + layout.fields[3].offset + i * t * es;
      recipe::CopyRows(ids_row, t, ids.data, len, es);
      // attention_mask (ones_like(input_ids)) and, without a read loss_mask, the loss mask too.
      const TensorView* mask = use_loss_mask_ ? s.Find(kMask) : nullptr;
      const uint64_t mask_len = mask != nullptr ? mask->shape[0] : len;
      for (uint64_t k = 0; k < t; ++k) {
        recipe::StoreInteger(attention_row, dt, k, k < len ? 1 : 0);
        int64_t m = 0;
        if (k < mask_len) m = mask != nullptr ? recipe::IntegerAt(*mask, k) : 1;
        recipe::StoreInteger(mask_row, dt, k, m);
        // labels[j] = input_ids[j + 1], labels[len - 1] = -100, zeros past len.
        int64_t label = 0;
        if (k + 1 < len) {
          label = recipe::IntegerAt(ids, k + 1);
        } else if (k + 1 == len) {
          label = kIgnoreTokenId;
        }
        recipe::StoreInteger(labels_row, dt, k, label);
      }
      const TensorView* states[2] = {s.Find(kHidden), s.Find(kAux)};
      for (int k = 0; k < 2; ++k) {
        const CollatedField& out = layout.fields[4 + k];
        const uint64_t row = out.shape[2] * DTypeSize(out.dtype);
        recipe::CopyRows(region + out.offset + i * t * row, t, states[k]->data,
                         states[k]->shape[0], row);
      }
    }
  }

 private:
  Status BadShape(const Sample& s, const TensorView& v, const std::string& want) const {
    return Status::InvalidArgument("collate='modelopt-eagle': '" + std::string(v.name) + "' of " +
                                   recipe::SampleText(s, path_) + " is " +
                                   recipe::ShapeText(v.shape) + " " +
                                   std::string(DTypeName(v.dtype)) + ", but ModelOpt's offline "
                                   "sample has " + want + "; use the trainer's collate");
  }

  const uint64_t train_len_;
  const bool use_loss_mask_;
  const std::string path_;
};

Result<std::unique_ptr<const BatchRecipe>> Make(const Schema& schema, const LoaderOptions& o,
                                                const std::string& path) {
  const BatchRecipeEntry& e = kModelOptEagleRecipe;
  if (o.recipe_len == 0)
    return Status::InvalidArgument(
        "collate='modelopt-eagle' needs recipe_len: ModelOpt's train_len (training_seq_len)");
  using recipe::NeedField;
  LIBSHARD_RETURN_IF_ERROR(
      NeedField(schema, kIds, 1, IsSignedInteger, "int16, int32 or int64", false, e, path)
          .status());
  LIBSHARD_RETURN_IF_ERROR(
      NeedField(schema, kHidden, 2, recipe::IsAny, "any dtype", false, e, path).status());
  LIBSHARD_RETURN_IF_ERROR(
      NeedField(schema, kAux, 2, recipe::IsAny, "any dtype", false, e, path).status());
  // The stored loss mask is used when the loader reads it: with answer_only_loss the front end
  // names it in `fields`, without it leaves it out (ModelOpt then uses ones).
  const bool read_mask =
      schema.Find(kMask).has_value() &&
      (o.fields.empty() || std::find(o.fields.begin(), o.fields.end(), kMask) != o.fields.end());
  if (read_mask)
    LIBSHARD_RETURN_IF_ERROR(NeedField(schema, kMask, 1, recipe::IsIntegerOrBool,
                                       "an integer or bool dtype", false, e, path)
                                 .status());
  return std::unique_ptr<const BatchRecipe>(
      std::make_unique<ModelOptEagle>(o.recipe_len, read_mask, path));
}

}  // namespace

const BatchRecipeEntry kModelOptEagleRecipe = {
    Collate::kModelOptEagle, "modelopt-eagle",
    "ModelOpt 0.47 offline EAGLE: OfflineSupervisedDataset + EagleOfflineDataCollator", Make};

}  // namespace libshard
