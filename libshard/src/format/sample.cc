#include "libshard/sample.h"

namespace libshard {

uint64_t NumElements(std::span<const uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d == 0) return 0;  // an empty tensor, whatever the other dims
  }
  for (uint64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return UINT64_MAX;
  return n;
}

const TensorView* Sample::Find(std::string_view name) const {
  for (const TensorView& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace libshard
