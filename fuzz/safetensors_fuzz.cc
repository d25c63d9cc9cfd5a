// libFuzzer target for the .safetensors reader: header parsing, bounds checks and tensor reads.
// Seed with tests/data/pt/*.safetensors.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "readers/byte_source.h"
#include "readers/safetensors_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard::convert;
  const auto* b = reinterpret_cast<const std::byte*>(data);
  auto src =
      std::make_unique<MemoryByteSource>("fuzz.safetensors", std::vector<std::byte>(b, b + size));
  SourceOptions options;
  options.max_header_bytes = 1 << 20;
  auto r = SafetensorsSource::Open(std::move(src), size, false, options);
  if (!r.ok()) return 0;
  for (size_t i = 0; i < (*r)->tensors().size(); ++i) {
    std::vector<std::byte> buf((*r)->tensors()[i].nbytes);
    (*r)->ReadTensor(i, buf).IgnoreError();
  }
  return 0;
}
