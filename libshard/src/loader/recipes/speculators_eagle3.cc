// collate='speculators-eagle3': vLLM speculators 0.9's packed EAGLE-3 batch, as its training
// DataLoader returns it (speculators/train/data.py ArrowDataset._get_raw_data and
// BaseDataset.__getitem__ per sample, speculators/models/eagle3/data.py shift_batch, then
// CollateFn(total_seq_len) over the batch the multipack sampler drew), except the loss mask,
// which lives in speculators' Arrow dataset, not in the hidden-states files (the front end adds
// it: libshard/speculators.py).
//
// A stored sample (hs_{i}.safetensors): hidden_states [S, L+1, H] bfloat16 (the final layer
// last) and token_ids [S]; or, as hs-connectors' fp8 backend writes it, hidden_states in
// float8_e4m3fn with hidden_states_scales [S, 1, 1] float32, dequantized as
// dequantize_fp8_tensor(q, scale, bfloat16) does: bf16(q) * bf16(scale), rounded to bfloat16.
// Per sample, after the shift (n = max(S - 1, 0) rows):
//   input_ids = token_ids[1:], hidden_states = hs[:-1, :-1] flattened to [n, L*H],
//   verifier_last_hidden_states = hs[1:, -1] [n, H], position_ids = 1 .. S-1 (int64).
// The batch packs the samples in order into one row of T = recipe_len (total_seq_len)
// positions, each sample's rows truncated to what is left and the samples after a full row
// dropped; zeros pad the rest:
//   input_ids [1, T] (token_ids' dtype), hidden_states [1, T, L*H] bf16,
//   verifier_last_hidden_states [1, T, H] bf16, position_ids [1, T] int64,
//   document_ids [1, T] int64: the sample's number in the batch for each position, -1 on pads.
// lengths: the rows each sample contributes (0 for a dropped one), the trainer's `lengths`.
//
// Sequence parallelism (sp_rule='speculators', speculators#871's --sp-size): SP rank r of N gets
// its part of the packed row, positions [r·T/N, (r+1)·T/N) of every tensor but document_ids
// (whole), as split_batch_for_sp cuts the batch above; the loader reads of each sample only the
// stored rows behind that part (PackedRecipeRows: packed row k of a sample is its stored rows k
// and k + 1), so the samples hold row ranges (Sample::rows()) and the part is built from them.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec/float8.h"
#include "libshard/sequence_parallel.h"
#include "loader/recipes/batch_recipe.h"

namespace libshard {
namespace {

using recipe::Tensor;

constexpr std::string_view kHidden = "hidden_states";
constexpr std::string_view kScales = "hidden_states_scales";
constexpr std::string_view kTokens = "token_ids";
constexpr std::string_view kOutIds = "input_ids";
constexpr std::string_view kOutHidden = "hidden_states";
constexpr std::string_view kOutVerifier = "verifier_last_hidden_states";
constexpr std::string_view kOutPositions = "position_ids";
constexpr std::string_view kOutDocuments = "document_ids";

uint64_t PackedRows(uint64_t stored_length) { return stored_length > 0 ? stored_length - 1 : 0; }
// Packed row k of a sample (after the shift): input_ids = token_ids[k + 1], hidden_states =
// hs[k], verifier = hs[k + 1]: its stored rows k and k + 1.
constexpr PackedRecipeRows kPacked = {PackedRows, 1};

bool IsBf16OrFp8(DType d) { return d == DType::kBFloat16 || d == DType::kFloat8E4M3FN; }
bool IsFloat32(DType d) { return d == DType::kFloat32; }

class SpeculatorsEagle3 final : public BatchRecipe {
 public:
  // The batch's part [part_start, part_stop) of the packed row (the whole row without SP).
  // max_len: the loader's cut of every sample (0: none), which a row-range read's
  // Sample::length() does not show.
  SpeculatorsEagle3(uint64_t total_seq_len, uint64_t part_start, uint64_t part_stop,
                    uint64_t max_len, std::string dataset_path)
      : t_(total_seq_len),
        start_(part_start),
        stop_(part_stop),
        max_len_(max_len),
        path_(std::move(dataset_path)) {}

  Result<CollateLayout> Plan(std::span<const Sample> samples) const override {
    if (samples.empty()) return Status::InvalidArgument("cannot collate an empty batch");
    const BatchRecipeEntry& e = kSpeculatorsEagle3Recipe;
    CollateLayout layout;
    uint64_t layers = 0;  // L + 1
    uint64_t width = 0;   // H
    DType token_dtype = DType::kInt64;
    std::vector<uint64_t> stored;  // S of each sample
    stored.reserve(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* hs, Tensor(s, kHidden, e, path_));
      LIBSHARD_ASSIGN_OR_RETURN(const TensorView* tokens, Tensor(s, kTokens, e, path_));
      if (hs->shape.size() != 3 || hs->shape[1] == 0 || !IsBf16OrFp8(hs->dtype))
        return Bad(s, *hs, "[S, L+1, H] bfloat16 (or float8_e4m3fn with its scales)");
      if (tokens->shape.size() != 1 || !recipe::IsInteger(tokens->dtype) ||
          tokens->shape[0] != hs->shape[0])
        return Bad(s, *tokens, "[S] of an integer dtype, S the hidden states' length (" +
                                   std::to_string(hs->shape[0]) + ")");
      if (hs->dtype == DType::kFloat8E4M3FN) {
        LIBSHARD_ASSIGN_OR_RETURN(const TensorView* scales, Tensor(s, kScales, e, path_));
        if (scales->dtype != DType::kFloat32 || scales->shape != Shape{hs->shape[0], 1, 1})
          return Bad(s, *scales, "[S, 1, 1] float32");
      }
      if (i == 0) {
        layers = hs->shape[1];
        width = hs->shape[2];
        token_dtype = tokens->dtype;
      }
      if (hs->shape[1] != layers || hs->shape[2] != width || tokens->dtype != token_dtype)
        return Status::InvalidArgument(
            "collate='speculators-eagle3': " + recipe::SampleText(s, path_) + " has " +
            recipe::ShapeText(hs->shape) + " hidden states and " +
            std::string(DTypeName(tokens->dtype)) + " token ids, unlike the batch's first "
            "sample; speculators cannot pack them either");
      // A sequence-parallel sample holds rows [rows.start, rows.stop) of its S (the loader read
      // what its part needs); another holds all S.
      const RowRange rows = Rows(s, *hs);
      if (hs->shape[0] != rows.stop - rows.start)
        return Bad(s, *hs, "the " + std::to_string(rows.stop - rows.start) + " rows read");
      stored.push_back(!s.has_sequence_slice() ? hs->shape[0]
                       : max_len_ > 0          ? std::min(s.length(), max_len_)
                                               : s.length());
    }
    const std::vector<uint64_t> lengths = recipe::PackedLengths(kPacked, stored, t_);
    for (size_t i = 0; i < samples.size(); ++i) {
      layout.lengths.push_back(static_cast<int64_t>(lengths[i]));
      // The rows the part needs were read.
      const RowRange need = recipe::PackedStoredRows(kPacked, lengths, i, start_, stop_);
      const RowRange have = Rows(samples[i], *samples[i].Find(kHidden));
      if (need.stop > need.start && (need.start < have.start || need.stop > have.stop))
        return Status::Internal("collate='speculators-eagle3': " +
                                recipe::SampleText(samples[i], path_) + " holds rows [" +
                                std::to_string(have.start) + ", " + std::to_string(have.stop) +
                                "), but its part of the packed row needs [" +
                                std::to_string(need.start) + ", " + std::to_string(need.stop) +
                                ")");
    }
    const uint64_t part = stop_ - start_;
    uint64_t flat = 0;
    if (__builtin_mul_overflow(layers - 1, width, &flat))
      return Status::InvalidArgument("collate='speculators-eagle3': hidden states of " + path_ +
                                     " overflow 64-bit sizes");
    LIBSHARD_RETURN_IF_ERROR(recipe::AddTensor(&layout, kOutIds, token_dtype, {1, part}, path_));
    LIBSHARD_RETURN_IF_ERROR(
        recipe::AddTensor(&layout, kOutHidden, DType::kBFloat16, {1, part, flat}, path_));
    LIBSHARD_RETURN_IF_ERROR(
        recipe::AddTensor(&layout, kOutVerifier, DType::kBFloat16, {1, part, width}, path_));
    LIBSHARD_RETURN_IF_ERROR(
        recipe::AddTensor(&layout, kOutPositions, DType::kInt64, {1, part}, path_));
    LIBSHARD_RETURN_IF_ERROR(
        recipe::AddTensor(&layout, kOutDocuments, DType::kInt64, {1, t_}, path_));
    layout.max_seqlen = static_cast<int64_t>(t_);
    return layout;
  }

  void Fill(const CollateLayout& layout, std::span<const Sample> samples,
            std::byte* region) const override {
    const CollatedField& ids_out = layout.fields[0];
    const CollatedField& hidden_out = layout.fields[1];
    const CollatedField& verifier_out = layout.fields[2];
    std::byte* positions = region + layout.fields[3].offset;
    std::byte* documents = region + layout.fields[4].offset;
    const uint64_t tes = DTypeSize(ids_out.dtype);
    const uint64_t flat = hidden_out.shape[2];
    const uint64_t width = verifier_out.shape[2];
    const uint64_t part = stop_ - start_;
    uint64_t offset = 0;  // in the whole row
    uint64_t filled = 0;  // rows of the part written
    for (size_t i = 0; i < samples.size(); ++i) {
      const auto rows = static_cast<uint64_t>(layout.lengths[i]);
      for (uint64_t r = 0; r < rows; ++r)
        recipe::StoreInteger(documents, DType::kInt64, offset + r, static_cast<int64_t>(i));
      // The sample's rows of the whole row [first, offset) in the part [start_, stop_): its
      // packed rows b .. b + n - 1, landing at row `at` of the part.
      const uint64_t first = offset;
      offset += rows;
      const uint64_t lo = std::max(start_, first);
      const uint64_t hi = std::min(stop_, offset);
      if (lo >= hi) continue;
      const uint64_t b = lo - first;
      const uint64_t n = hi - lo;
      const uint64_t at = lo - start_;
      const Sample& s = samples[i];
      const TensorView& hs = *s.Find(kHidden);
      const TensorView& tokens = *s.Find(kTokens);
      const uint64_t base = Rows(s, hs).start;  // stored row of the tensors' row 0
      std::memcpy(region + ids_out.offset + at * tes, tokens.data + (b + 1 - base) * tes, n * tes);
      for (uint64_t r = 0; r < n; ++r)
        recipe::StoreInteger(positions, DType::kInt64, at + r, static_cast<int64_t>(b + r + 1));
      std::byte* hidden = region + hidden_out.offset + at * flat * 2;
      std::byte* verifier = region + verifier_out.offset + at * width * 2;
      const uint64_t layers = hs.shape[1];
      if (hs.dtype == DType::kBFloat16) {
        const uint64_t in_row = layers * width * 2;
        for (uint64_t r = 0; r < n; ++r) {
          // hidden_states = hs[k, :-1] (packed row k of the sample), verifier = hs[k + 1, -1].
          const uint64_t k = b + r - base;
          std::memcpy(hidden + r * flat * 2, hs.data + k * in_row, flat * 2);
          std::memcpy(verifier + r * width * 2, hs.data + (k + 1) * in_row + flat * 2,
                      width * 2);
        }
      } else {
        const TensorView& scales = *s.Find(kScales);
        const uint64_t in_row = layers * width;
        for (uint64_t r = 0; r < n; ++r) {
          const uint64_t k = b + r - base;
          Dequantize(hs.data + k * in_row, ScaleAt(scales, k), flat, hidden + r * flat * 2);
          Dequantize(hs.data + (k + 1) * in_row + flat, ScaleAt(scales, k + 1), width,
                     verifier + r * width * 2);
        }
      }
      filled = at + n;
    }
    for (uint64_t k = offset; k < t_; ++k) recipe::StoreInteger(documents, DType::kInt64, k, -1);
    const uint64_t rest = part - filled;
    if (rest > 0) {
      std::memset(region + ids_out.offset + filled * tes, 0, rest * tes);
      std::memset(region + hidden_out.offset + filled * flat * 2, 0, rest * flat * 2);
      std::memset(region + verifier_out.offset + filled * width * 2, 0, rest * width * 2);
      std::memset(positions + filled * 8, 0, rest * 8);
    }
  }

 private:
  Status Bad(const Sample& s, const TensorView& v, const std::string& want) const {
    return Status::InvalidArgument(
        "collate='speculators-eagle3': '" + std::string(v.name) + "' of " +
        recipe::SampleText(s, path_) + " is " + recipe::ShapeText(v.shape) + " " +
        std::string(DTypeName(v.dtype)) + ", but a speculators hidden-states sample has " + want +
        "; use the trainer's collate");
  }

  // The stored rows a sample's tensors hold: a sequence-parallel sample's row range, else all.
  static RowRange Rows(const Sample& s, const TensorView& hs) {
    return s.has_sequence_slice() ? s.rows() : RowRange{0, hs.shape[0]};
  }

  static float ScaleAt(const TensorView& scales, uint64_t row) {
    float f;
    std::memcpy(&f, scales.data + row * 4, 4);
    // scale.to(bfloat16), as dequantize_fp8_tensor casts it.
    return codec::BF16ToF32(codec::F32ToBF16(f));
  }

  // q.to(bfloat16) * scale, both bfloat16, rounded to bfloat16: the product of two 8-bit
  // significands is exact in float32, so one rounding, as torch's bfloat16 multiply.
  static void Dequantize(const std::byte* q, float scale, uint64_t n, std::byte* out) {
    for (uint64_t k = 0; k < n; ++k) {
      const float v = codec::E4M3ToF32(static_cast<uint8_t>(q[k])) * scale;
      const uint16_t b = codec::F32ToBF16(v);
      std::memcpy(out + k * 2, &b, 2);
    }
  }

  const uint64_t t_;
  const uint64_t start_;
  const uint64_t stop_;
  const uint64_t max_len_;
  const std::string path_;
};

Result<std::unique_ptr<const BatchRecipe>> Make(const Schema& schema, const LoaderOptions& o,
                                                const std::string& path) {
  const BatchRecipeEntry& e = kSpeculatorsEagle3Recipe;
  if (o.recipe_len == 0)
    return Status::InvalidArgument(
        "collate='speculators-eagle3' needs recipe_len: speculators' --total-seq-len");
  using recipe::NeedField;
  LIBSHARD_ASSIGN_OR_RETURN(
      int hs, NeedField(schema, kHidden, 3, IsBf16OrFp8, "bfloat16 or float8_e4m3fn", false, e,
                        path));
  LIBSHARD_RETURN_IF_ERROR(
      NeedField(schema, kTokens, 1, recipe::IsInteger, "an integer dtype", false, e, path)
          .status());
  if (schema.fields[static_cast<size_t>(hs)].dtype == DType::kFloat8E4M3FN)
    LIBSHARD_RETURN_IF_ERROR(
        NeedField(schema, kScales, 3, IsFloat32, "float32", false, e, path).status());
  // The loader checked the rule and that the degree divides recipe_len (option_table.cc).
  uint64_t start = 0;
  uint64_t stop = o.recipe_len;
  const SequenceParallel& sp = o.sequence_parallel;
  if (sp.enabled() && sp.rule == SplitRule::kSpeculators) {
    SplitRequest request;
    request.length = o.recipe_len;
    request.sp_size = sp.degree;
    request.sp_rank = o.rank % sp.degree;
    LIBSHARD_ASSIGN_OR_RETURN(const SequenceSlice slice, SliceOf(sp.rule, request));
    start = slice.start;
    stop = slice.stop;
  }
  return std::unique_ptr<const BatchRecipe>(
      std::make_unique<SpeculatorsEagle3>(o.recipe_len, start, stop, o.max_len, path));
}


}  // namespace

const BatchRecipeEntry kSpeculatorsEagle3Recipe = {
    Collate::kSpeculatorsEagle3, "speculators-eagle3",
    "speculators 0.9 EAGLE-3: ArrowDataset + shift_batch + CollateFn", Make, &kPacked};

}  // namespace libshard
