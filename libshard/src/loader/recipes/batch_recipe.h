// Batch recipes: a trainer's own batch format, built in C++ (LoaderOptions::collate names one;
// docs/guide/trainers.md). Where a trainer turns samples into a batch by a fixed rule (truncate,
// shift, pad, pack), a recipe applies that rule to the loader's samples and writes the batch the
// trainer's Python collate would return, byte for byte, into one region of the batch arena: the
// same tensor names, dtypes, shapes and bytes, in the trainer's key order.
//
// The recipe table, like the codec table: one entry per recipe, each recipe in its own file
// (specforge_eagle3.cc, modelopt_eagle.cc, speculators_eagle3.cc), all behind BatchRecipe. The
// Collator (loader/collate.h) holds the one its Collate value names and delegates Plan and Fill
// to it, so the collate stage, the batch arena and the bindings serve recipes as they serve
// pad/pack batches.
//
// Contract of every recipe: Plan checks what it reads (the fields it needs, their dtypes and
// ranks, the sample's dimensions, the sizes) and fails with InvalidArgument naming the sample,
// the field and the dataset, never reading out of bounds on any sample; Fill then writes every
// byte of the region's tensors (pads included) from the samples alone. A tensor's name is a
// string literal (the trainer's key; "/" separates the keys of a nested dict). Internal to
// loader/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/loader.h"
#include "libshard/sample.h"
#include "libshard/schema.h"
#include "libshard/status.h"
#include "loader/collate.h"

namespace libshard {

class BatchRecipe {
 public:
  virtual ~BatchRecipe() = default;
  // The layout of the batch: its tensors (CollatedField: name, dtype, shape, offset, nbytes),
  // the region's size, and per sample a length in `lengths` (what the recipe documents).
  virtual Result<CollateLayout> Plan(std::span<const Sample> samples) const = 0;
  // Writes the batch into `region` (at least layout.total_bytes, 64-byte aligned).
  // Precondition: `layout` is Plan(samples).
  virtual void Fill(const CollateLayout& layout, std::span<const Sample> samples,
                    std::byte* region) const = 0;
};

// How a recipe that packs a batch into one row (speculators-eagle3) fills the row from its
// samples, so that a sequence-parallel loader under the 'speculators' rule (SplitRuleInfo::packed)
// reads only the stored rows behind its part of the row (docs/guide/long-context.md). The samples
// lie in the row one after another, sample k contributing min(rows(S_k), what is left of the row)
// rows; the row's packed rows [b, e) of a sample need its stored rows [b, e + lookahead).
struct PackedRecipeRows {
  uint64_t (*rows)(uint64_t stored_length) = nullptr;
  uint64_t lookahead = 0;
};

struct BatchRecipeEntry {
  Collate id;
  std::string_view name;     // LoaderOptions' spelling, e.g. "specforge-eagle3"
  std::string_view trainer;  // what it reproduces, for errors and docs
  // The recipe for a dataset of `schema` (its fields checked here: missing fields and wrong
  // dtypes or ranks are InvalidArgument naming them and the trainer). `options` are the
  // loader's resolved options (recipe_len, fields).
  Result<std::unique_ptr<const BatchRecipe>> (*make)(const Schema& schema,
                                                     const LoaderOptions& options,
                                                     const std::string& dataset_path);
  // Null: the recipe does not pack a batch into one row.
  const PackedRecipeRows* packed = nullptr;
};

// The entry of a recipe's Collate value; null for kNone, kPad, kPack.
const BatchRecipeEntry* FindBatchRecipe(Collate id);
// Every recipe, in Collate order.
std::span<const BatchRecipeEntry* const> BatchRecipes();

extern const BatchRecipeEntry kSpecForgeEagle3Recipe;
extern const BatchRecipeEntry kModelOptEagleRecipe;
extern const BatchRecipeEntry kSpeculatorsEagle3Recipe;

namespace recipe {

// Helpers the recipes share (batch_recipe.cc).

// A field the recipe reads, checked against the schema: present (unless optional), one of the
// dtypes the predicate accepts, of rank `rank`. Returns its schema index, or -1 for an absent
// optional field.
Result<int> NeedField(const Schema& schema, std::string_view name, uint32_t rank,
                      bool (*dtype_ok)(DType), std::string_view dtype_words, bool optional,
                      const BatchRecipeEntry& entry, const std::string& dataset_path);
bool IsInteger(DType dtype);          // signed or unsigned integers
bool IsIntegerOrBool(DType dtype);
bool IsAny(DType dtype);
bool IsBFloat16(DType dtype);

// The tensor of `sample` named `name`; InvalidArgument naming the sample when it is missing
// (a `fields` selection without it) or its bytes do not match its shape and dtype.
Result<const TensorView*> Tensor(const Sample& sample, std::string_view name,
                                 const BatchRecipeEntry& entry, const std::string& dataset_path);

// Appends a tensor of `dtype` and `shape` to the layout (64-byte aligned); InvalidArgument when
// its size overflows.
Status AddTensor(CollateLayout* layout, std::string_view name, DType dtype, Shape shape,
                 const std::string& dataset_path);

// The field of the layout named `name` (it was added by AddTensor).
const CollatedField& Field(const CollateLayout& layout, std::string_view name);

// The integer value of element k of `v` (an integer or bool tensor), as int64 (uint64 values
// above INT64_MAX wrap, as torch's conversion does).
int64_t IntegerAt(const TensorView& v, uint64_t k);
// Writes `value` as element k of a dst of integer or bool dtype `dtype` (truncating, as torch's
// conversion does; bool: value != 0).
void StoreInteger(std::byte* dst, DType dtype, uint64_t k, int64_t value);

// Copies the first min(src_rows, dst_rows) rows of `row_bytes` from src to dst and zeroes the
// remaining rows of dst (the trainers' zero padding; 0 is the all-zero bit pattern in every
// dtype).
void CopyRows(std::byte* dst, uint64_t dst_rows, const std::byte* src, uint64_t src_rows,
              uint64_t row_bytes);

// The packed rows each sample of a batch contributes to a row of `total` (PackedRecipeRows),
// from the samples' stored lengths, in batch order (0 for a sample after the row is full).
std::vector<uint64_t> PackedLengths(const PackedRecipeRows& packed,
                                    std::span<const uint64_t> stored_lengths, uint64_t total);
// The stored rows sample k of a batch (packed lengths `lengths`) is read for, for the part
// [start, stop) of the packed row: [b, e + lookahead) for its packed rows [b, e) in the part, or
// the empty range {0, 0} when none of its rows fall in the part.
RowRange PackedStoredRows(const PackedRecipeRows& packed, std::span<const uint64_t> lengths,
                          size_t k, uint64_t start, uint64_t stop);

// "[a, b, c]".
std::string ShapeText(const Shape& shape);
// "sample N of DATASET", as the errors name a sample.
std::string SampleText(const Sample& sample, const std::string& dataset_path);

}  // namespace recipe
}  // namespace libshard
