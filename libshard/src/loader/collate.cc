#include "loader/collate.h"

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#include "codec/float8.h"
#include "loader/recipes/batch_recipe.h"

namespace libshard {
namespace {

// a * b and a + b, false on overflow of uint64.
bool Mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool Add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

std::string ShapeText(const Shape& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

std::string ValueText(double v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

Status Overflow(DType dtype, double value) {
  return Status::InvalidArgument("padding value " + ValueText(value) + " cannot be converted to " +
                                 std::string(DTypeName(dtype)) +
                                 " without overflow; give a value the dtype can hold");
}

// Product of shape[begin, end), false on overflow.
bool Product(const Shape& shape, size_t begin, size_t end, uint64_t* out) {
  uint64_t p = 1;
  for (size_t d = begin; d < end; ++d)
    if (!Mul(p, shape[d], &p)) return false;
  *out = p;
  return true;
}

// Writes `count` elements of `esize` bytes with the bit pattern `bits` (little end first).
void FillPattern(std::byte* dst, uint64_t count, size_t esize, uint64_t bits) {
  if (count == 0) return;
  if (bits == 0) {
    std::memset(dst, 0, count * esize);
    return;
  }
  switch (esize) {
    case 1:
      std::memset(dst, static_cast<int>(bits & 0xFF), count);
      return;
    case 2: {
      const uint16_t v = static_cast<uint16_t>(bits);
      for (uint64_t k = 0; k < count; ++k) std::memcpy(dst + k * 2, &v, 2);
      return;
    }
    case 4: {
      const uint32_t v = static_cast<uint32_t>(bits);
      for (uint64_t k = 0; k < count; ++k) std::memcpy(dst + k * 4, &v, 4);
      return;
    }
    default: {
      for (uint64_t k = 0; k < count; ++k) std::memcpy(dst + k * 8, &bits, 8);
      return;
    }
  }
}

// float8_e5m2 nearest to f (finite, |f| <= 57344), ties to the even code: by search over the
// 124 finite codes of one sign, so no rounding subtlety can differ from IEEE nearest-even.
uint8_t F32ToE5M2(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  uint8_t best = 0;
  double best_err = INFINITY;
  for (uint32_t code = 0; code < 0x7C; ++code) {  // 0x7C is +inf
    const double v = codec::F16ToF32(static_cast<uint16_t>(code << 8));
    const double err = std::fabs(v - a);
    if (err < best_err || (err == best_err && (code & 1) == 0)) {
      best = static_cast<uint8_t>(code);
      best_err = err;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

template <typename T>
Result<uint64_t> IntegerBits(DType dtype, double value, double lo, double hi_exclusive) {
  if (!std::isfinite(value)) return Overflow(dtype, value);
  const double t = std::trunc(value);
  if (t < lo || t >= hi_exclusive) return Overflow(dtype, value);
  if (t < 0) {
    const auto v = static_cast<int64_t>(t);
    return static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(static_cast<T>(v)));
  }
  const auto v = static_cast<uint64_t>(t);
  return static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(v));
}

}  // namespace

Result<uint64_t> PaddingBits(DType dtype, double value) {
  const bool nan = std::isnan(value);
  switch (dtype) {
    case DType::kBool:
      return uint64_t{value != 0 || nan ? 1u : 0u};
    case DType::kUInt8:  // torch accepts -128..255 for uint8 and wraps the negatives
      return IntegerBits<uint8_t>(dtype, value, -128.0, 256.0);
    case DType::kInt8:
      return IntegerBits<int8_t>(dtype, value, -128.0, 128.0);
    case DType::kInt16:
      return IntegerBits<int16_t>(dtype, value, -32768.0, 32768.0);
    case DType::kInt32:
      return IntegerBits<int32_t>(dtype, value, -2147483648.0, 2147483648.0);
    case DType::kInt64:
      return IntegerBits<int64_t>(dtype, value, -9223372036854775808.0, 9223372036854775808.0);
    case DType::kUInt16:
      return IntegerBits<uint16_t>(dtype, value, 0, 65536.0);
    case DType::kUInt32:
      return IntegerBits<uint32_t>(dtype, value, 0, 4294967296.0);
    case DType::kUInt64:
      return IntegerBits<uint64_t>(dtype, value, 0, 18446744073709551616.0);
    case DType::kFloat64:
      return std::bit_cast<uint64_t>(value);
    default:
      break;
  }
  // The narrower floats: torch converts the value to float32 first, then rounds to nearest even.
  double max = FLT_MAX;
  if (dtype == DType::kBFloat16) max = 3.3895313892515355e38;
  if (dtype == DType::kFloat16) max = 65504.0;
  if (dtype == DType::kFloat8E4M3FN) max = codec::kE4M3Max;
  if (dtype == DType::kFloat8E5M2) max = 57344.0;
  if (!nan && std::isfinite(value) && std::fabs(value) > max) return Overflow(dtype, value);
  const float f = nan ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(value);
  switch (dtype) {
    case DType::kFloat32:
      return uint64_t{std::bit_cast<uint32_t>(f)};
    case DType::kBFloat16:
      return uint64_t{codec::F32ToBF16(f)};
    case DType::kFloat16:
      return uint64_t{codec::F32ToF16(f)};
    case DType::kFloat8E4M3FN:
      return uint64_t{codec::F32ToE4M3(f)};
    case DType::kFloat8E5M2:
      if (nan) return uint64_t{0x7F};
      if (std::isinf(f)) return uint64_t{std::signbit(f) ? 0xFCu : 0x7Cu};
      return uint64_t{F32ToE5M2(f)};
    default:
      return Status::InvalidArgument("padding: unknown dtype code " +
                                     std::to_string(static_cast<uint32_t>(dtype)));
  }
}

Result<Collator> Collator::Make(const Schema& schema, Collate mode, double padding_value,
                                const std::vector<std::pair<std::string, double>>& padding_values,
                                std::string dataset_path) {
  if (mode != Collate::kPad && mode != Collate::kPack)
    return Status::InvalidArgument("Collator: collate must be pad or pack");
  Collator c;
  c.mode_ = mode;
  c.dataset_path_ = std::move(dataset_path);
  for (const auto& [name, value] : padding_values) {
    if (!schema.Find(name)) {
      std::string known;
      for (const Field& f : schema.fields) known += (known.empty() ? "" : ", ") + f.name;
      return Status::InvalidArgument("padding_values: '" + name + "' is not a field of " +
                                     c.dataset_path_ + " (fields: " + known + ")");
    }
  }
  for (const Field& field : schema.fields) {
    FieldRule rule;
    rule.name = field.name;
    rule.dtype = field.dtype;
    rule.seq_dim = field.seq_dim;
    double value = padding_value;
    for (const auto& [name, v] : padding_values)
      if (name == field.name) value = v;
    rule.pad_value = value;
    if (mode == Collate::kPad && field.seq_dim >= 0) {
      Result<uint64_t> bits = PaddingBits(field.dtype, value);
      if (!bits.ok()) {
        return Status::InvalidArgument("field '" + field.name + "' of " + c.dataset_path_ + ": " +
                                       bits.status().message() +
                                       " (padding_value, or padding_values['" + field.name +
                                       "'])");
      }
      rule.pad_bits = *bits;
    }
    c.rules_.push_back(std::move(rule));
  }
  if (schema.length_field >= 0 && static_cast<size_t>(schema.length_field) < schema.fields.size())
    c.length_field_ = schema.fields[static_cast<size_t>(schema.length_field)].name;
  return c;
}

Result<Collator> Collator::Make(const Schema& schema, const LoaderOptions& options,
                                std::string dataset_path) {
  const BatchRecipeEntry* entry = FindBatchRecipe(options.collate);
  if (entry == nullptr)
    return Make(schema, options.collate, options.padding_value, options.padding_values,
                std::move(dataset_path));
  Collator c;
  c.mode_ = options.collate;
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<const BatchRecipe> recipe,
                            entry->make(schema, options, dataset_path));
  c.recipe_ = std::move(recipe);
  c.dataset_path_ = std::move(dataset_path);
  return c;
}

const Collator::FieldRule* Collator::Rule(std::string_view name) const {
  for (const FieldRule& r : rules_)
    if (r.name == name) return &r;
  return nullptr;
}

Status Collator::Mismatch(const CollatedField& field, std::span<const Sample> samples,
                          size_t first, size_t other, const std::string& what) const {
  return Status::InvalidArgument(
      "field '" + std::string(field.name) + "': samples " +
      std::to_string(samples[first].index()) + " and " + std::to_string(samples[other].index()) +
      " of " + dataset_path_ + " cannot be batched: " + what +
      "; read only fields that batch (fields=...), or collate=None and batch these samples "
      "yourself");
}

Result<CollateLayout> Collator::Plan(std::span<const Sample> samples) const {
  if (recipe_ != nullptr) return recipe_->Plan(samples);
  if (samples.empty()) return Status::InvalidArgument("cannot collate an empty batch");
  const uint64_t batch = samples.size();
  const size_t nfields = samples[0].tensors().size();
  for (size_t i = 1; i < samples.size(); ++i) {
    if (samples[i].tensors().size() != nfields)
      return Status::InvalidArgument(
          "samples " + std::to_string(samples[0].index()) + " and " +
          std::to_string(samples[i].index()) + " of " + dataset_path_ +
          " have different fields; the loader reads the same fields of every sample");
  }
  CollateLayout layout;
  layout.fields.reserve(nfields);
  uint64_t offset = 0;
  for (size_t f = 0; f < nfields; ++f) {
    const TensorView& v0 = samples[0].tensors()[f];
    const FieldRule* rule = Rule(v0.name);
    CollatedField out;
    out.name = v0.name;
    out.dtype = v0.dtype;
    const size_t rank = v0.shape.size();
    int32_t d = rule != nullptr ? rule->seq_dim : -1;
    if (d >= 0 && static_cast<size_t>(d) >= rank) d = -1;  // a scalar has no sequence dimension
    out.seq_dim = d;
    out.pad_bits = rule != nullptr ? rule->pad_bits : 0;
    if (mode_ == Collate::kPad && d >= 0 && rule != nullptr && v0.dtype != rule->dtype) {
      // Views in another dtype than the schema's (not one the loader makes): pad in theirs.
      Result<uint64_t> bits = PaddingBits(v0.dtype, rule->pad_value);
      if (!bits.ok())
        return Status::InvalidArgument("field '" + rule->name + "' of " + dataset_path_ + ": " +
                                       bits.status().message());
      out.pad_bits = *bits;
    }
    const size_t esize = DTypeSize(v0.dtype);
    uint64_t seq_max = 0;
    uint64_t seq_sum = 0;
    bool dim0_all_one = rank >= 1;
    for (size_t i = 0; i < samples.size(); ++i) {
      const TensorView& v = samples[i].tensors()[f];
      if (v.name != v0.name)
        return Status::InvalidArgument("samples " + std::to_string(samples[0].index()) + " and " +
                                       std::to_string(samples[i].index()) + " of " +
                                       dataset_path_ + " list their fields in different orders");
      if (v.dtype != v0.dtype || v.shape.size() != rank)
        return Mismatch(out, samples, 0, i,
                        "they disagree in rank or dtype (" + ShapeText(v0.shape) + " " +
                            std::string(DTypeName(v0.dtype)) + " vs " + ShapeText(v.shape) + " " +
                            std::string(DTypeName(v.dtype)) + ")");
      for (size_t dd = 0; dd < rank; ++dd) {
        if (static_cast<int32_t>(dd) != d && v.shape[dd] != v0.shape[dd])
          return Mismatch(out, samples, 0, i,
                          "dim " + std::to_string(dd) + " differs (" + ShapeText(v0.shape) +
                              " vs " + ShapeText(v.shape) +
                              ") and is not the field's sequence dimension (" +
                              (d >= 0 ? std::to_string(d) : std::string("none")) + ")");
      }
      uint64_t elements = 0;
      uint64_t bytes = 0;
      if (!Product(v.shape, 0, rank, &elements) || !Mul(elements, esize, &bytes) ||
          bytes != v.nbytes)
        return Status::InvalidArgument("field '" + std::string(v.name) + "' of sample " +
                                       std::to_string(samples[i].index()) + " of " +
                                       dataset_path_ + ": shape " + ShapeText(v.shape) +
                                       " does not match its " + std::to_string(v.nbytes) +
                                       " bytes; run `libshard verify` on the dataset");
      if (rank >= 1 && v.shape[0] != 1) dim0_all_one = false;
      if (d >= 0) {
        const uint64_t len = v.shape[static_cast<size_t>(d)];
        seq_max = std::max(seq_max, len);
        if (!Add(seq_sum, len, &seq_sum))
          return Status::InvalidArgument("field '" + std::string(v.name) +
                                         "': the batch's summed length overflows");
      }
    }
    Shape shape = v0.shape;
    if (mode_ == Collate::kPad) {
      if (d >= 0) shape[static_cast<size_t>(d)] = seq_max;
      // As pad_collate: [1, L, H] samples (dim 0 of size 1, not the sequence dim) concatenate
      // along dim 0; everything else stacks along a new dim 0.
      out.concat = dim0_all_one && d != 0;
      if (out.concat) shape.erase(shape.begin());
      shape.insert(shape.begin(), batch);
    } else if (d >= 0) {
      shape[static_cast<size_t>(d)] = seq_sum;
    } else {
      shape.insert(shape.begin(), batch);
    }
    uint64_t elements = 0;
    if (!Product(shape, 0, shape.size(), &elements) || !Mul(elements, esize, &out.nbytes))
      return Status::InvalidArgument("field '" + std::string(v0.name) + "': the batch shape " +
                                     ShapeText(shape) + " overflows 64-bit sizes (samples of " +
                                     dataset_path_ + ")");
    out.shape = std::move(shape);
    offset = AlignUp(offset, kTensorAlignment);
    out.offset = offset;
    if (!Add(offset, out.nbytes, &offset) || offset > (uint64_t{1} << 62))
      return Status::InvalidArgument("the collated batch of " + std::to_string(batch) +
                                     " samples of " + dataset_path_ + " overflows 64-bit sizes");
    layout.fields.push_back(std::move(out));
  }
  layout.total_bytes = AlignUp(offset, kTensorAlignment);

  // Lengths, as pad_collate / pack_collate: the schema's length field when read, else the
  // first field with a sequence dimension, else 1 per sample.
  const CollatedField* key = nullptr;
  size_t key_index = 0;
  for (size_t f = 0; f < layout.fields.size(); ++f) {
    if (layout.fields[f].seq_dim < 0) continue;
    if (!length_field_.empty() && layout.fields[f].name == length_field_) {
      key = &layout.fields[f];
      key_index = f;
      break;
    }
    if (key == nullptr) {
      key = &layout.fields[f];
      key_index = f;
    }
  }
  layout.lengths.reserve(batch);
  for (const Sample& s : samples) {
    const uint64_t len =
        key == nullptr ? 1 : s.tensors()[key_index].shape[static_cast<size_t>(key->seq_dim)];
    if (len > static_cast<uint64_t>(INT64_MAX))
      return Status::InvalidArgument("sample " + std::to_string(s.index()) + " of " +
                                     dataset_path_ + ": length " + std::to_string(len) +
                                     " does not fit int64");
    layout.lengths.push_back(static_cast<int64_t>(len));
    layout.max_seqlen = std::max(layout.max_seqlen, static_cast<int64_t>(len));
  }
  if (mode_ == Collate::kPack) {
    layout.cu_seqlens.reserve(batch + 1);
    int64_t sum = 0;
    layout.cu_seqlens.push_back(0);
    for (int64_t len : layout.lengths) {
      sum += len;  // each len <= the summed length checked above, or 1 per sample
      if (sum > INT32_MAX)
        return Status::InvalidArgument(
            "the packed batch of " + std::to_string(batch) + " samples of " + dataset_path_ +
            " holds " + std::to_string(sum) +
            " tokens, more than int32 cu_seqlens can count; lower batch_size / max_tokens");
      layout.cu_seqlens.push_back(static_cast<int32_t>(sum));
    }
  }
  return layout;
}

CollatedBatch Collator::Fill(const CollateLayout& layout, std::span<const Sample> samples,
                             std::byte* region, std::shared_ptr<const void> memory) const {
  const uint64_t batch = samples.size();
  CollatedBatch out;
  out.tensors.reserve(layout.fields.size());
  if (recipe_ != nullptr) {
    recipe_->Fill(layout, samples, region);
    for (const CollatedField& field : layout.fields)
      out.tensors.push_back(
          TensorView{field.name, field.dtype, field.shape, region + field.offset, field.nbytes});
  }
  // Pad and pack.
  for (size_t f = 0; recipe_ == nullptr && f < layout.fields.size(); ++f) {
    const CollatedField& field = layout.fields[f];
    std::byte* dst = region + field.offset;
    const size_t esize = DTypeSize(field.dtype);
    const Shape& s0 = samples[0].tensors()[f].shape;
    if (field.seq_dim < 0) {
      // Stacked (or, with kPad, concatenated along dim 0: the same bytes).
      const uint64_t per = batch > 0 ? field.nbytes / batch : 0;
      for (size_t i = 0; i < samples.size(); ++i) {
        const TensorView& v = samples[i].tensors()[f];
        if (per > 0) std::memcpy(dst + i * per, v.data, per);
      }
    } else {
      const auto d = static_cast<size_t>(field.seq_dim);
      uint64_t outer = 1;
      uint64_t row = 1;
      Product(s0, 0, d, &outer);  // no overflow: bounded by the sample's checked size
      Product(s0, d + 1, s0.size(), &row);
      row *= esize;
      if (mode_ == Collate::kPad) {
        const uint64_t lmax = field.concat ? field.shape[d] : field.shape[d + 1];
        const uint64_t per = field.nbytes / batch;  // one padded sample
        for (size_t i = 0; i < samples.size(); ++i) {
          const TensorView& v = samples[i].tensors()[f];
          const uint64_t len = v.shape[d];
          std::byte* base = dst + i * per;
          if (len == lmax) {
            if (v.nbytes > 0) std::memcpy(base, v.data, v.nbytes);
            continue;
          }
          for (uint64_t o = 0; o < outer; ++o) {
            std::byte* block = base + o * lmax * row;
            if (len * row > 0) std::memcpy(block, v.data + o * len * row, len * row);
            FillPattern(block + len * row, (lmax - len) * row / esize, esize, field.pad_bits);
          }
        }
      } else {
        const uint64_t total = field.shape[d];
        uint64_t start = 0;
        for (size_t i = 0; i < samples.size(); ++i) {
          const TensorView& v = samples[i].tensors()[f];
          const uint64_t len = v.shape[d];
          if (len * row > 0) {
            for (uint64_t o = 0; o < outer; ++o)
              std::memcpy(dst + (o * total + start) * row, v.data + o * len * row, len * row);
          }
          start += len;
        }
      }
    }
    TensorView view;
    view.name = field.name;
    view.dtype = field.dtype;
    view.shape = field.shape;
    view.data = dst;
    view.nbytes = field.nbytes;
    out.tensors.push_back(std::move(view));
  }
  out.indices.reserve(batch);
  out.metadata.reserve(batch);
  for (const Sample& s : samples) {
    out.indices.push_back(s.index());
    out.metadata.push_back(s.metadata());
  }
  out.lengths = layout.lengths;
  out.cu_seqlens = layout.cu_seqlens;
  out.max_seqlen = layout.max_seqlen;
  out.memory = std::move(memory);
  return out;
}

}  // namespace libshard
