#include "readers/safetensors_source.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "libshard_support/text.h"

namespace libshard::convert {

namespace {

std::optional<DType> SafetensorsDType(std::string_view s) {
  static constexpr std::pair<std::string_view, DType> kMap[] = {
      {"BOOL", DType::kBool},       {"U8", DType::kUInt8},       {"I8", DType::kInt8},
      {"I16", DType::kInt16},       {"I32", DType::kInt32},      {"I64", DType::kInt64},
      {"U16", DType::kUInt16},      {"U32", DType::kUInt32},     {"U64", DType::kUInt64},
      {"F16", DType::kFloat16},     {"BF16", DType::kBFloat16},  {"F32", DType::kFloat32},
      {"F64", DType::kFloat64},     {"F8_E4M3", DType::kFloat8E4M3FN},
      {"F8_E5M2", DType::kFloat8E5M2},
  };
  for (const auto& [n, d] : kMap)
    if (n == s) return d;
  return std::nullopt;
}

// A safetensors header nests 3 deep ({name: {"shape": [..]}}); anything deeper is refused before
// parsing, so a hostile header of 200,000 '[' costs one linear scan (the parser and the value's
// destructor must never see such depth).
constexpr size_t kMaxHeaderNesting = 64;

}  // namespace

Result<std::unique_ptr<SafetensorsSource>> SafetensorsSource::Open(
    std::unique_ptr<ByteSource> src, uint64_t file_size, bool gzipped,
    const SourceOptions& options) {
  using Json = nlohmann::ordered_json;
  const std::string& file = src->name();
  auto bad = [&](const std::string& what) {
    return Status::Corruption(file + ": safetensors header: " + what +
                              "; the file is damaged or not a safetensors file");
  };
  std::byte lenb[8];
  LIBSHARD_RETURN_IF_ERROR(src->ReadAt(0, lenb, "safetensors header length"));
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | std::to_integer<uint64_t>(lenb[k]);
  if (n > options.max_header_bytes)
    return Status::ResourceExhausted(file + ": safetensors header of " + std::to_string(n) +
                                     " bytes exceeds the limit of " +
                                     std::to_string(options.max_header_bytes));
  if (n > src->size() - 8)
    return bad("length " + std::to_string(n) + " runs past the end of the file (" +
               std::to_string(src->size()) + " bytes; truncated?)");
  std::string text(n, '\0');
  LIBSHARD_RETURN_IF_ERROR(
      src->ReadAt(8, std::as_writable_bytes(std::span(text)), "safetensors header"));
  if (JsonTooDeepAt(text, kMaxHeaderNesting) != std::string_view::npos)
    return bad("JSON nested deeper than " + std::to_string(kMaxHeaderNesting) +
               " levels (a safetensors header nests 3)");
  // Count top-level keys while parsing: a duplicate would silently collapse in the object.
  size_t top_keys = 0;
  Json::parser_callback_t count = [&top_keys](int depth, Json::parse_event_t event, Json&) {
    if (event == Json::parse_event_t::key && depth == 1) ++top_keys;
    return true;
  };
  Json header = Json::parse(text, count, /*allow_exceptions=*/false);
  if (header.is_discarded()) return bad("invalid JSON");
  if (!header.is_object()) return bad("not a JSON object");
  if (top_keys != header.size()) return bad("duplicate tensor names");

  const uint64_t data_start = 8 + n;
  const uint64_t data_size = src->size() - data_start;
  auto out = std::unique_ptr<SafetensorsSource>(new SafetensorsSource());
  out->file_size_ = file_size;
  out->gzipped_ = gzipped;
  struct Extent {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Extent> extents;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) return bad("__metadata__['" + k + "'] is not a string");
        out->metadata_.push_back({k, MetaValue(s.get<std::string>())});
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (name.empty()) return bad("empty tensor name");
    if (!v.is_object()) return bad(where + " is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto of = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return bad(where + " has no string 'dtype'");
    if (sh == v.end() || !sh->is_array()) return bad(where + " has no array 'shape'");
    if (of == v.end() || !of->is_array() || of->size() != 2 || !(*of)[0].is_number_unsigned() ||
        !(*of)[1].is_number_unsigned())
      return bad(where + " has no 'data_offsets' [begin, end]");
    const std::string dts = dt->get<std::string>();
    auto dtype = SafetensorsDType(dts);
    if (!dtype)
      return Status::Unsupported(file + ": " + where + " has dtype '" + dts +
                                 "', which libshard does not store (supported: BOOL U8 I8 I16 I32 "
                                 "I64 U16 U32 U64 F16 BF16 F32 F64 F8_E4M3 F8_E5M2)");
    SourceTensor t;
    t.name = name;
    t.dtype = *dtype;
    if (sh->size() > 64) return bad(where + " has more than 64 dims");
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return bad(where + " has a non-integer or negative dim");
      uint64_t x = d.get<uint64_t>();
      if (__builtin_mul_overflow(numel, x, &numel)) return bad(where + " element count overflows");
      t.shape.push_back(x);
    }
    if (__builtin_mul_overflow(numel, DTypeSize(t.dtype), &t.nbytes))
      return bad(where + " byte size overflows");
    uint64_t begin = (*of)[0].get<uint64_t>(), end = (*of)[1].get<uint64_t>();
    if (begin > end || end > data_size)
      return bad(where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 ") lie outside the data section of " + std::to_string(data_size) +
                 " bytes (truncated?)");
    if (end - begin != t.nbytes)
      return bad(where + " data_offsets span " + std::to_string(end - begin) +
                 " bytes but dtype and shape need " + std::to_string(t.nbytes));
    extents.push_back({begin, end, out->tensors_.size()});
    out->tensors_.push_back(std::move(t));
    out->offsets_.push_back(data_start + begin);
  }
  // As the safetensors library itself requires: sorted by offsets, the tensors tile the data
  // section exactly, from 0 to its end, with no overlap (two tensors sharing bytes) and no gap
  // or trailing bytes (bytes that belong to no tensor).
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;
  for (const Extent& x : extents) {
    if (x.begin != covered) {
      const std::string& name = out->tensors_[x.tensor].name;
      return bad("tensor '" + name + "' data_offsets [" + std::to_string(x.begin) + ", " +
                 std::to_string(x.end) + ") " +
                 (x.begin < covered ? "overlap another tensor's bytes (which end at "
                                    : "leave a gap after the previous tensor (which ends at ") +
                 std::to_string(covered) + "); tensors must tile the data section exactly");
    }
    covered = x.end;
  }
  if (covered != data_size)
    return bad("the tensors cover " + std::to_string(covered) + " bytes of the data section but it has " +
               std::to_string(data_size) + " (trailing bytes that belong to no tensor)");
  out->src_ = std::move(src);
  return out;
}

Status SafetensorsSource::ReadTensor(size_t t, std::span<std::byte> dst) const {
  if (t >= tensors_.size())
    return Status::InvalidArgument(path() + ": tensor index " + std::to_string(t) +
                                   " out of range (" + std::to_string(tensors_.size()) + ")");
  if (dst.size() != tensors_[t].nbytes)
    return Status::InvalidArgument(path() + ": tensor '" + tensors_[t].name + "' has " +
                                   std::to_string(tensors_[t].nbytes) +
                                   " bytes, destination has " + std::to_string(dst.size()));
  return src_->ReadAt(offsets_[t], dst, tensors_[t].name);
}

}  // namespace libshard::convert
