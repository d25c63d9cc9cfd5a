// libFuzzer target for the cache readers (converters/readers/cache_source.h: DeepSpec's target
// cache, NeMo AutoModel's offline cache, TorchSpec's offline folder). The input is a directory in
// one blob: a first byte choosing the format (0 deepspec, 1 automodel, 2 torchspec, else auto),
// then files, each a u8 name length, the name, a u32 little-endian size and the bytes (a record
// cut short by the end of the input keeps what is there). Every sample an opened cache lists is
// opened, read and hashed; an accepted tensor larger than the whole input means a bound is
// missing (a sample's bytes must come from its files).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "readers/cache_dir.h"
#include "readers/cache_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  using namespace libshard::convert;
  if (size == 0) return 0;
  const SourceFormat format = data[0] == 0   ? SourceFormat::kDeepSpec
                              : data[0] == 1 ? SourceFormat::kAutoModel
                              : data[0] == 2 ? SourceFormat::kTorchSpec
                                             : SourceFormat::kAuto;
  auto dir = std::make_unique<MemoryCacheDir>("fuzz-cache");
  size_t p = 1;
  while (p < size) {
    const size_t name_len = data[p++];
    if (p + name_len > size) break;
    const std::string name(reinterpret_cast<const char*>(data + p), name_len);
    p += name_len;
    uint32_t n = 0;
    for (int k = 0; k < 4 && p < size; ++k) n |= uint32_t{data[p++]} << (8 * k);
    const size_t take = std::min<size_t>(n, size - p);
    dir->Add(name, fuzz::Copy(fuzz::AsBytes(data + p, take)));
    p += take;
  }
  SourceOptions options;
  options.max_header_bytes = 1 << 20;
  options.max_decompressed_bytes = 1 << 24;
  auto cache = OpenCache(std::move(dir), format, options);
  if (!cache.ok()) return 0;
  const auto& samples = (*cache)->samples();
  for (uint64_t i = 0; i < samples.size() && i < 64; ++i) {
    if ((*cache)->Find(samples[i].key) != i) __builtin_trap();
    auto f = (*cache)->OpenSample(i);
    if (!f.ok()) continue;
    for (size_t t = 0; t < (*f)->tensors().size(); ++t) {
      const uint64_t n = (*f)->tensors()[t].nbytes;
      if (n > size && n > fuzz::kMaxReadBytes) __builtin_trap();
      if (n > fuzz::kMaxReadBytes) continue;
      std::vector<std::byte> buf(n);
      (*f)->ReadTensor(t, buf).IgnoreError();
    }
    (*cache)->HashSample(i).status().IgnoreError();
  }
  return 0;
}
