// The recipe table and the helpers the recipes share.
#include "loader/recipes/batch_recipe.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

namespace libshard {
namespace {

constexpr std::array<const BatchRecipeEntry*, 3> kRecipes = {
    &kSpecForgeEagle3Recipe, &kModelOptEagleRecipe, &kSpeculatorsEagle3Recipe};

bool Mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool Add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

const BatchRecipeEntry* FindBatchRecipe(Collate id) {
  for (const BatchRecipeEntry* e : kRecipes)
    if (e->id == id) return e;
  return nullptr;
}

std::span<const BatchRecipeEntry* const> BatchRecipes() { return kRecipes; }

namespace recipe {

bool IsInteger(DType d) {
  switch (d) {
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}
bool IsIntegerOrBool(DType d) { return d == DType::kBool || IsInteger(d); }
bool IsAny(DType) { return true; }
bool IsBFloat16(DType d) { return d == DType::kBFloat16; }

Result<int> NeedField(const Schema& schema, std::string_view name, uint32_t rank,
                      bool (*dtype_ok)(DType), std::string_view dtype_words, bool optional,
                      const BatchRecipeEntry& entry, const std::string& dataset_path) {
  const std::optional<size_t> f = schema.Find(name);
  const std::string who = "collate='" + std::string(entry.name) + "' (" +
                          std::string(entry.trainer) + ")";
  if (!f) {
    if (optional) return -1;
    std::string known;
    for (const libshard::Field& fd : schema.fields)
      known += (known.empty() ? "" : ", ") + fd.name;
    return Status::InvalidArgument(who + " needs the field '" + std::string(name) + "', which " +
                                   dataset_path + " does not have (fields: " + known +
                                   "); pack the trainer's own files, or use the trainer's "
                                   "collate");
  }
  const libshard::Field& field = schema.fields[*f];
  if (field.rank != rank || !dtype_ok(field.dtype))
    return Status::InvalidArgument(
        who + " needs '" + std::string(name) + "' of rank " + std::to_string(rank) + " and " +
        std::string(dtype_words) + ", but " + dataset_path + " stores it with rank " +
        std::to_string(field.rank) + " as " + std::string(DTypeName(field.dtype)) +
        "; use the trainer's collate for this dataset");
  return static_cast<int>(*f);
}

Result<const TensorView*> Tensor(const Sample& sample, std::string_view name,
                                 const BatchRecipeEntry& entry, const std::string& dataset_path) {
  const TensorView* v = sample.Find(name);
  if (v == nullptr)
    return Status::InvalidArgument("collate='" + std::string(entry.name) + "' needs the field '" +
                                   std::string(name) + "' of " + SampleText(sample, dataset_path) +
                                   ", which the loader did not read; read it (fields=...)");
  uint64_t elements = 1;
  uint64_t bytes = 0;
  for (uint64_t d : v->shape)
    if (!Mul(elements, d, &elements)) elements = UINT64_MAX;
  if (elements == UINT64_MAX || !Mul(elements, DTypeSize(v->dtype), &bytes) ||
      bytes != v->nbytes)
    return Status::InvalidArgument("field '" + std::string(name) + "' of " +
                                   SampleText(sample, dataset_path) + ": shape " +
                                   ShapeText(v->shape) + " does not match its " +
                                   std::to_string(v->nbytes) +
                                   " bytes; run `libshard verify` on the dataset");
  return v;
}

Status AddTensor(CollateLayout* layout, std::string_view name, DType dtype, Shape shape,
                 const std::string& dataset_path) {
  CollatedField out;
  out.name = name;
  out.dtype = dtype;
  uint64_t elements = 1;
  for (uint64_t d : shape)
    if (!Mul(elements, d, &elements))
      return Status::InvalidArgument("the batch tensor '" + std::string(name) + "' " +
                                     ShapeText(shape) + " of " + dataset_path +
                                     " overflows 64-bit sizes");
  if (!Mul(elements, DTypeSize(dtype), &out.nbytes))
    return Status::InvalidArgument("the batch tensor '" + std::string(name) + "' " +
                                   ShapeText(shape) + " of " + dataset_path +
                                   " overflows 64-bit sizes");
  out.shape = std::move(shape);
  out.offset = AlignUp(layout->total_bytes, kTensorAlignment);
  uint64_t end = 0;
  if (!Add(out.offset, out.nbytes, &end) || end > (uint64_t{1} << 62))
    return Status::InvalidArgument("the batch of " + dataset_path + " overflows 64-bit sizes");
  layout->total_bytes = AlignUp(end, kTensorAlignment);
  layout->fields.push_back(std::move(out));
  return Status::OK();
}

const CollatedField& Field(const CollateLayout& layout, std::string_view name) {
  for (const CollatedField& f : layout.fields)
    if (f.name == name) return f;
  return layout.fields.front();  // unreachable for a layout the recipe planned
}

int64_t IntegerAt(const TensorView& v, uint64_t k) {
  const std::byte* p = v.data + k * DTypeSize(v.dtype);
  switch (v.dtype) {
    case DType::kBool:
    case DType::kUInt8: {
      uint8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case DType::kInt8: {
      int8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case DType::kInt16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case DType::kUInt16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case DType::kInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DType::kUInt32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    default: {  // int64, uint64
      uint64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<int64_t>(x);
    }
  }
}

void StoreInteger(std::byte* dst, DType dtype, uint64_t k, int64_t value) {
  std::byte* p = dst + k * DTypeSize(dtype);
  const auto u = static_cast<uint64_t>(value);
  switch (DTypeSize(dtype)) {
    case 1: {
      const uint8_t x = dtype == DType::kBool ? (value != 0 ? 1 : 0) : static_cast<uint8_t>(u);
      std::memcpy(p, &x, 1);
      return;
    }
    case 2: {
      const auto x = static_cast<uint16_t>(u);
      std::memcpy(p, &x, 2);
      return;
    }
    case 4: {
      const auto x = static_cast<uint32_t>(u);
      std::memcpy(p, &x, 4);
      return;
    }
    default:
      std::memcpy(p, &u, 8);
      return;
  }
}

void CopyRows(std::byte* dst, uint64_t dst_rows, const std::byte* src, uint64_t src_rows,
              uint64_t row_bytes) {
  const uint64_t rows = std::min(src_rows, dst_rows);
  if (rows * row_bytes > 0) std::memcpy(dst, src, rows * row_bytes);
  if ((dst_rows - rows) * row_bytes > 0)
    std::memset(dst + rows * row_bytes, 0, (dst_rows - rows) * row_bytes);
}

std::vector<uint64_t> PackedLengths(const PackedRecipeRows& packed,
                                    std::span<const uint64_t> stored_lengths, uint64_t total) {
  std::vector<uint64_t> out;
  out.reserve(stored_lengths.size());
  uint64_t offset = 0;
  for (uint64_t s : stored_lengths) {
    const uint64_t rows = offset < total ? std::min(packed.rows(s), total - offset) : 0;
    offset += rows;
    out.push_back(rows);
  }
  return out;
}

RowRange PackedStoredRows(const PackedRecipeRows& packed, std::span<const uint64_t> lengths,
                          size_t k, uint64_t start, uint64_t stop) {
  uint64_t offset = 0;  // the sums are bounded by the row's length
  for (size_t j = 0; j < k; ++j) offset += lengths[j];
  const uint64_t b = std::max(start, offset);
  const uint64_t e = std::min(stop, offset + lengths[k]);
  if (b >= e) return RowRange{0, 0};
  return RowRange{b - offset, e - offset + packed.lookahead};
}

std::string ShapeText(const Shape& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

std::string SampleText(const Sample& sample, const std::string& dataset_path) {
  return "sample " + std::to_string(sample.index()) + " of " + dataset_path;
}

}  // namespace recipe
}  // namespace libshard
