// libFuzzer target for torch.save zip archives: the zip central-directory parser
// (readers/zip_archive.h), the torch zip source on top of it and every tensor read.
//
// Input: one flag byte, then the archive. Flag bit 0 set: CRC-32 checks are off, so mutated
// archives get past them to the pickle, record and view checks (a mutation rarely keeps a CRC
// valid). A seed's flag byte is 0x01 by default (see make_corpus.py).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz_util.h"
#include "readers/byte_source.h"
#include "readers/torch_zip_source.h"
#include "readers/zip_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  using namespace libshard::convert;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  auto bytes = fuzz::AsBytes(data + 1, size - 1);

  // The container alone: every entry's data offset is bounds-checked by DataOffset.
  MemoryByteSource raw("fuzz.pt", fuzz::Copy(bytes));
  auto zip = ZipArchive::Open(raw, 1 << 20);
  if (zip.ok())
    for (const ZipEntry& e : zip->entries()) {
      auto off = zip->DataOffset(raw, e);
      if (off.ok() && (*off > raw.size() || e.size > raw.size() - *off)) __builtin_trap();
    }

  SourceOptions options;
  options.max_header_bytes = 1 << 20;
  options.max_tensor_bytes = fuzz::kMaxReadBytes;
  options.verify_crc32 = (flags & 1) == 0;
  auto src = TorchZipSource::Open(std::make_unique<MemoryByteSource>("fuzz.pt", fuzz::Copy(bytes)),
                                  bytes.size(), false, options);
  if (!src.ok()) return 0;
  for (size_t i = 0; i < (*src)->tensors().size(); ++i) {
    const uint64_t n = (*src)->tensors()[i].nbytes;
    if (n > options.max_tensor_bytes) __builtin_trap();  // the option's contract
    std::vector<std::byte> buf(n);
    (*src)->ReadTensor(i, buf).IgnoreError();
  }
  return 0;
}
