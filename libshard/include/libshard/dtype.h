// Element types of stored tensors. The numeric codes are part of the on-disk format
// (docs/FORMAT.md §3.2) and never change meaning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace libshard {

enum class DType : uint32_t {
  kBool = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt16 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kUInt16 = 7,
  kUInt32 = 8,
  kUInt64 = 9,
  kFloat16 = 10,
  kBFloat16 = 11,
  kFloat32 = 12,
  kFloat64 = 13,
  kFloat8E4M3FN = 14,
  kFloat8E5M2 = 15,
};

inline constexpr uint32_t kMaxDTypeCode = 15;

// Bytes per element; 0 for an unknown code.
size_t DTypeSize(DType dtype);
// True when `code` names a DType of this format version.
bool IsValidDType(uint32_t code);
// The PyTorch spelling without the "torch." prefix: "bfloat16", "float8_e4m3fn", "bool", ...
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName; also accepts the common aliases "half", "float", "double", "long",
// "int", "short". nullopt when unknown.
std::optional<DType> DTypeFromName(std::string_view name);

}  // namespace libshard
