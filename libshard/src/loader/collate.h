// Collator: a batch of Samples -> one CollatedBatch (libshard/loader.h) in one memory region.
// Pure computation: no threads, no I/O, no allocation of the region (the caller provides it, the
// loader from its batch arena).
//
// Two steps, so that the caller can size and acquire the region between them:
//   Plan(samples)      -> the layout: per field its dtype, batch shape, byte offset in the region
//                         (64-byte aligned) and size; the region's total size; lengths,
//                         cu_seqlens, max_seqlen. Checks that the samples can be batched (same
//                         rank and dtype, every dimension but the sequence one equal) and that
//                         every size fits in 64 bits (shapes are untrusted).
//   Fill(layout, samples, region, memory) -> copies each sample's row blocks (memcpy) into
//                         place, fills pad positions (memset for a value of 0, a typed fill
//                         otherwise) and returns the CollatedBatch over the region.
// The layout rules are those of the Python pad_collate / pack_collate with the schema's
// sequence dimensions (Field::seq_dim), documented on CollatedBatch. A batch recipe (a trainer's
// own batch format, loader/recipes/batch_recipe.h) plans and fills its own layout; the Collator
// delegates to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "libshard/loader.h"
#include "libshard/sample.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard {

class BatchRecipe;

// Where one field of the batch lies in the region.
struct CollatedField {
  std::string_view name;  // the samples' view names (valid while the Dataset lives)
  DType dtype = DType::kUInt8;
  Shape shape;            // the batch tensor's shape
  int32_t seq_dim = -1;   // in the sample's shape, or -1
  bool concat = false;    // kPad: [1, L, H] samples concatenated along dim 0 (no new dim)
  uint64_t offset = 0;    // in the region; multiple of kTensorAlignment
  uint64_t nbytes = 0;
  uint64_t pad_bits = 0;  // kPad: the padding value's element bytes (little end first)
};

struct CollateLayout {
  std::vector<CollatedField> fields;  // in the samples' tensor order (schema order)
  uint64_t total_bytes = 0;           // bytes the region needs
  std::vector<int64_t> lengths;
  std::vector<int32_t> cu_seqlens;    // kPack only
  int64_t max_seqlen = 0;
};

class Collator {
 public:
  // InvalidArgument when `mode` is kNone, a padding_values name is not a field of `schema`, or a
  // padding value cannot be represented in the dtype of a field it would pad (as torch's fill_
  // refuses it). `dataset_path` names the dataset in errors.
  static Result<Collator> Make(const Schema& schema, Collate mode, double padding_value,
                               const std::vector<std::pair<std::string, double>>& padding_values,
                               std::string dataset_path);

  // The collator of LoaderOptions::collate: pad or pack (Make above, with the options' padding
  // values), or the batch recipe it names, made for `schema` (InvalidArgument naming what the
  // recipe misses).
  static Result<Collator> Make(const Schema& schema, const LoaderOptions& options,
                               std::string dataset_path);

  Collate mode() const { return mode_; }

  // The layout of `samples` (at least one, each with the same fields in the same order).
  Result<CollateLayout> Plan(std::span<const Sample> samples) const;

  // Fills `region` (at least layout.total_bytes, 64-byte aligned, valid while `memory` lives)
  // and returns the batch, whose tensors view the region and whose `memory` is `memory`.
  // Preconditions: `layout` is Plan(samples).
  CollatedBatch Fill(const CollateLayout& layout, std::span<const Sample> samples,
                     std::byte* region, std::shared_ptr<const void> memory) const;

 private:
  struct FieldRule {
    std::string name;
    DType dtype = DType::kUInt8;
    int32_t seq_dim = -1;
    double pad_value = 0;
    uint64_t pad_bits = 0;  // pad_value in `dtype`
  };
  Collator() = default;
  const FieldRule* Rule(std::string_view name) const;
  Status Mismatch(const CollatedField& field, std::span<const Sample> samples, size_t first,
                  size_t other, const std::string& what) const;

  Collate mode_ = Collate::kNone;
  std::shared_ptr<const BatchRecipe> recipe_;  // a recipe's Collate value, else null
  std::vector<FieldRule> rules_;  // schema order
  std::string length_field_;      // "" when the schema has none
  std::string dataset_path_;
};

// The element bytes of `value` in `dtype` as torch's fill_ would write them (integers truncated
// toward zero, floats rounded to nearest even), or InvalidArgument when it overflows the dtype.
// Exposed for tests.
Result<uint64_t> PaddingBits(DType dtype, double value);

}  // namespace libshard
