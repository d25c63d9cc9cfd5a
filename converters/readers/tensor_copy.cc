#include "readers/tensor_copy.h"

#include <algorithm>
#include <cstring>

namespace libshard::convert {

bool IsContiguous(std::span<const uint64_t> shape, std::span<const uint64_t> strides) {
  uint64_t expected = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] == 0) return true;
    if (shape[k] != 1 && strides[k] != expected) return false;
    expected *= shape[k];
  }
  return true;
}

void GatherStrided(std::span<const std::byte> src, std::span<const uint64_t> shape,
                   std::span<const uint64_t> strides, size_t item, std::span<std::byte> dst) {
  if (dst.empty()) return;
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(dst.data(), src.data(), item);
    return;
  }
  // The innermost dim is copied as one run when its stride is 1.
  const uint64_t inner = shape[rank - 1];
  const uint64_t inner_stride = strides[rank - 1];
  std::vector<uint64_t> idx(rank, 0);
  std::byte* out = dst.data();
  while (true) {
    uint64_t base = 0;
    for (size_t k = 0; k + 1 < rank; ++k) base += idx[k] * strides[k];
    if (inner_stride == 1) {
      std::memcpy(out, src.data() + base * item, inner * item);
      out += inner * item;
    } else {
      for (uint64_t j = 0; j < inner; ++j) {
        std::memcpy(out, src.data() + (base + j * inner_stride) * item, item);
        out += item;
      }
    }
    // Advance the outer multi-index.
    size_t k = rank - 1;
    while (true) {
      if (k == 0) return;
      --k;
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
}

void SwapElementBytes(std::span<std::byte> buf, size_t item) {
  if (item <= 1) return;
  for (size_t off = 0; off + item <= buf.size(); off += item)
    std::reverse(buf.begin() + static_cast<ptrdiff_t>(off),
                 buf.begin() + static_cast<ptrdiff_t>(off + item));
}

}  // namespace libshard::convert
