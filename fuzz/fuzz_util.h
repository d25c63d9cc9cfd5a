// Helpers shared by the fuzz targets. Not part of the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace libshard::fuzz {

// The most bytes a target allocates to read back one tensor a reader accepted. The readers bound
// tensors by the file (safetensors) or by SourceOptions::max_tensor_bytes (zip); a larger accepted
// tensor means such a bound is missing, which the target reports as a crash.
inline constexpr uint64_t kMaxReadBytes = uint64_t{1} << 24;

inline std::span<const std::byte> AsBytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

inline std::vector<std::byte> Copy(std::span<const std::byte> bytes) {
  return {bytes.begin(), bytes.end()};
}

}  // namespace libshard::fuzz
