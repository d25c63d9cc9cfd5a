// libshard::torch, the LibTorch adapter: a Sample or a Batch as torch::Tensors.
//
// On the CPU the tensors are zero-copy views (torch::from_blob) of the sample's memory, a loader
// arena slot or a Dataset::Read buffer. Each view's deleter holds a copy of
// Sample::memory_owner(), so the bytes stay valid for as long as any tensor (or any view of one)
// lives, also after the Sample, the Loader and the Dataset are gone; the loader reuses the arena
// slot only after the last one dies. Keeping tensors alive therefore keeps arena memory in use:
// a consumer that holds on to many of them (instead of copying what it keeps) stalls the loader
// once its memory_budget is spent.
//
// When the loader's arena is pinned (LoaderStats::pinned; it is registered with the CUDA runtime
// when one is present), the CPU tensors are pinned memory too (tensor.is_pinned()), and
// TorchOptions::device = torch::kCUDA gives device tensors copied with non_blocking=true, i.e.
// asynchronous DMA on the current stream. The sample's memory is then held until that stream
// has passed the copies, so the arena never reuses bytes a copy is still reading.
//
// The views are writable (LibTorch has no read-only tensors): writing one changes the sample's
// bytes for every view of the same sample, and nothing else.
//
// Errors: Status/Result like the rest of libshard. Exceptions LibTorch throws (an unavailable
// device, say) are caught and returned as InvalidArgument with LibTorch's message.
// Thread-safety: every function may be called from any thread; the tensors follow LibTorch's
// rules.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libshard/dtype.h"
#include "libshard/loader.h"
#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard {

// A sample's tensors by field name, in the sample's (schema) order.
using TensorDict = torch::OrderedDict<std::string, at::Tensor>;

struct TorchOptions {
  // torch::kCPU: zero-copy views. Any other device: one copy per tensor with
  // .to(device, non_blocking), the only copy between the disk and the device.
  c10::Device device = c10::kCPU;
  // For device copies. Asynchronous only when the arena is pinned; always safe (see above).
  bool non_blocking = true;
};

// The LibTorch element type of every libshard DType (bool, u8..u64, i8..i64, f16, bf16, f32,
// f64, float8_e4m3fn, float8_e5m2); nullopt only for a code that is not a DType.
std::optional<c10::ScalarType> ToScalarType(DType dtype);
// The inverse; nullopt for LibTorch types libshard does not store (complex, quantized, ...).
std::optional<DType> FromScalarType(c10::ScalarType type);

// One tensor of a sample. `owner` keeps `view.data` valid (pass sample.memory_owner()).
// Checks that view.nbytes matches the shape and dtype, that every dimension fits int64, and for
// bool tensors that every byte is 0 or 1 (any other byte is a Corruption error naming the byte).
Result<at::Tensor> ToTensor(const TensorView& view, const std::shared_ptr<const void>& owner,
                            const TorchOptions& options = {});

// Every tensor of `sample`, keyed by field name. Errors name the sample index and the field.
Result<TensorDict> ToTensors(const Sample& sample, const TorchOptions& options = {});

// Every sample of `batch`, in order. InvalidArgument for a collated batch (use the next one).
Result<std::vector<TensorDict>> ToTensors(const Batch& batch, const TorchOptions& options = {});

// A batch the loader collated (LoaderOptions::collate): one tensor per field over the batch's
// region (zero-copy on the CPU, held by each tensor as for a Sample), then "lengths" (int64 [B])
// and, for kPack, "cu_seqlens" (int32 [B + 1]), both small copies. max_seqlen, indices and
// metadata stay in `batch`.
Result<TensorDict> ToTensors(const CollatedBatch& batch, const TorchOptions& options = {});

// The other direction, for writing datasets from LibTorch: a TensorInput for Writer::Append that
// points at `tensor`'s bytes, so `tensor` must outlive that call. The tensor must be a
// contiguous CPU tensor of a type FromScalarType accepts (call .contiguous().cpu() first).
Result<TensorInput> ToTensorInput(std::string name, const at::Tensor& tensor);

}  // namespace libshard
