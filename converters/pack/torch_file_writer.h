// Writes `.pt` files in the torch.save zip format (research/eagle3_and_pt_format.md Part B) that
// `torch.load(path, weights_only=True)` reads back: `libshard unpack`.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "libshard/dtype.h"
#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard::convert {

// One tensor of the dict: C-contiguous bytes of NumElements(shape) * DTypeSize(dtype).
struct TorchTensorRef {
  std::string name;
  DType dtype = DType::kUInt8;
  Shape shape;
  std::span<const std::byte> data;
};

// The pickle (protocol 2) of a dict {name: tensor, ..., key: metadata value, ...} exactly as
// torch.save writes one, without memoisation: tensors of dtypes with a legacy typed storage use
// `torch._utils._rebuild_tensor_v2` + `torch.<X>Storage`; uint16/32/64 and float8 use
// `_rebuild_tensor_v3` + `torch.storage.UntypedStorage` + the dtype global, as torch 2.x does.
// Storage keys are "0", "1", ... in tensor order. Tensors come first, then metadata entries.
Result<std::string> EncodeTorchPickle(const std::vector<TorchTensorRef>& tensors,
                                      const Metadata& metadata);

// Writes `path` (via `path.tmp` + rename): a stored (uncompressed) zip with records
// `archive/data.pkl`, `archive/byteorder` ("little"), `archive/data/<key>` (64-byte aligned
// through the 'FB' padding extra field, as PyTorchStreamWriter does), `archive/version` ("3\n"),
// with CRC-32s, and zip64 records when an offset or size passes 4 GiB. Creates parent
// directories. Errors name the file.
Status WriteTorchFile(const std::string& path, const std::vector<TorchTensorRef>& tensors,
                      const Metadata& metadata);

}  // namespace libshard::convert
