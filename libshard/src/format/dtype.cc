#include "libshard/dtype.h"

namespace libshard {

namespace {
struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, 1, "bool"},           {DType::kUInt8, 1, "uint8"},
    {DType::kInt8, 1, "int8"},           {DType::kInt16, 2, "int16"},
    {DType::kInt32, 4, "int32"},         {DType::kInt64, 8, "int64"},
    {DType::kUInt16, 2, "uint16"},       {DType::kUInt32, 4, "uint32"},
    {DType::kUInt64, 8, "uint64"},       {DType::kFloat16, 2, "float16"},
    {DType::kBFloat16, 2, "bfloat16"},   {DType::kFloat32, 4, "float32"},
    {DType::kFloat64, 8, "float64"},     {DType::kFloat8E4M3FN, 1, "float8_e4m3fn"},
    {DType::kFloat8E5M2, 1, "float8_e5m2"},
};
}  // namespace

bool IsValidDType(uint32_t code) { return code >= 1 && code <= kMaxDTypeCode; }

size_t DTypeSize(DType dtype) {
  uint32_t c = static_cast<uint32_t>(dtype);
  return IsValidDType(c) ? kDTypes[c - 1].size : 0;
}

std::string_view DTypeName(DType dtype) {
  uint32_t c = static_cast<uint32_t>(dtype);
  return IsValidDType(c) ? kDTypes[c - 1].name : std::string_view("invalid");
}

std::optional<DType> DTypeFromName(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (const auto& d : kDTypes)
    if (d.name == name) return d.dtype;
  if (name == "half") return DType::kFloat16;
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  if (name == "long") return DType::kInt64;
  if (name == "int") return DType::kInt32;
  if (name == "short") return DType::kInt16;
  return std::nullopt;
}

}  // namespace libshard
