// libFuzzer target for the .safetensors reader: header parsing, bounds checks and tensor reads.
// An accepted tensor must lie inside the file (its bytes are read from it), so its size can never
// pass the input size.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz_util.h"
#include "readers/byte_source.h"
#include "readers/safetensors_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  using namespace libshard::convert;
  auto bytes = fuzz::AsBytes(data, size);
  SourceOptions options;
  options.max_header_bytes = 1 << 20;
  auto r = SafetensorsSource::Open(
      std::make_unique<MemoryByteSource>("fuzz.safetensors", fuzz::Copy(bytes)), size, false,
      options);
  if (!r.ok()) return 0;
  for (size_t i = 0; i < (*r)->tensors().size(); ++i) {
    const uint64_t n = (*r)->tensors()[i].nbytes;
    if (n > size) __builtin_trap();
    std::vector<std::byte> buf(n);
    (*r)->ReadTensor(i, buf).IgnoreError();
  }
  return 0;
}
