// libFuzzer target for the torch.save reader: inputs starting with "PK" go through the zip
// parser, the restricted unpickler and every tensor read; anything else is fed to the
// unpickler directly (seed it with data.pkl files, e.g. `unzip -p tests/data/pt/*.pt '*/data.pkl'`
// split per file). Build the library with -fsanitize=fuzzer-no-link,address,undefined for
// coverage of the reader code (see fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "readers/byte_source.h"
#include "readers/torch_pickle.h"
#include "readers/torch_zip_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard::convert;
  const auto* b = reinterpret_cast<const std::byte*>(data);
  if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
    auto src = std::make_unique<MemoryByteSource>("fuzz.pt", std::vector<std::byte>(b, b + size));
    SourceOptions options;
    options.max_header_bytes = 1 << 20;
    options.max_tensor_bytes = 1 << 24;
    auto r = TorchZipSource::Open(std::move(src), size, false, options);
    if (!r.ok()) return 0;
    for (size_t i = 0; i < (*r)->tensors().size(); ++i) {
      std::vector<std::byte> buf((*r)->tensors()[i].nbytes);
      (*r)->ReadTensor(i, buf).IgnoreError();
    }
    return 0;
  }
  UnpickleTorch(std::span(b, size), "fuzz.pkl").status().IgnoreError();
  return 0;
}
