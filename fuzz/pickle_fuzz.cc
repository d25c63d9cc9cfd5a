// libFuzzer target for the restricted unpickler (converters/readers/torch_pickle.h), fed raw
// data.pkl bytes. Whatever it accepts must satisfy UnpickleTorch's stated contract: every
// non-empty view lies inside its storage, and strides match the rank.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "readers/torch_pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  auto r = convert::UnpickleTorch(fuzz::AsBytes(data, size), "fuzz.pkl");
  if (!r.ok()) return 0;
  for (const convert::PickledTensor& t : r->tensors) {
    if (t.strides.size() != t.shape.size()) __builtin_trap();
    uint64_t n = 1;
    bool empty = false;
    for (uint64_t d : t.shape) {
      if (d == 0) empty = true;
      if (!empty && __builtin_mul_overflow(n, d, &n)) __builtin_trap();
    }
    if (empty) continue;
    // Last element's offset (in elements) must lie inside the storage.
    uint64_t last = t.storage_offset;
    for (size_t k = 0; k < t.shape.size(); ++k) {
      uint64_t step;
      if (__builtin_mul_overflow(t.shape[k] - 1, t.strides[k], &step) ||
          __builtin_add_overflow(last, step, &last))
        __builtin_trap();
    }
    uint64_t end_bytes;
    if (__builtin_mul_overflow(last + 1, DTypeSize(t.dtype), &end_bytes) ||
        end_bytes > t.storage_nbytes)
      __builtin_trap();
  }
  return 0;
}
