// The LibTorch adapter (libshard/torch.h). The only translation unit of libshard::torch: LibTorch
// headers are slow to compile, and the core library never sees them.
#include "libshard/torch.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace libshard {
namespace {

// Keeps sample memory alive until the device streams have passed the asynchronous copies that
// read it. Without this, the arena could hand the bytes of a pinned slot to the next read while
// a non_blocking host-to-device copy is still in flight (LibTorch records such events only for
// its own caching host allocator, never for from_blob memory).
//
// A thread polls the oldest event, so memory returns to the loader even when the consumer makes
// no further calls; the loader may be blocked on exactly that memory. Created on the first device
// copy, after the device runtime initialised, so it is destroyed before the runtime shuts down.
class PendingTransfers {
 public:
  static PendingTransfers& Get() {
    static PendingTransfers instance;
    return instance;
  }

  void Add(c10::Event event, std::shared_ptr<const void> owner) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(Entry{std::move(event), std::move(owner)});
    }
    cv_.notify_one();
  }

  PendingTransfers(const PendingTransfers&) = delete;
  PendingTransfers& operator=(const PendingTransfers&) = delete;

  ~PendingTransfers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  struct Entry {
    c10::Event event;
    std::shared_ptr<const void> owner;
  };

  PendingTransfers() : thread_([this] { Run(); }) {}

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stop_ and nothing left
      Entry entry = std::move(pending_.front());
      pending_.pop_front();
      const bool stopping = stop_;
      lock.unlock();
      WaitFor(entry.event, stopping);
      entry.owner.reset();  // outside the lock: releasing may run the arena's bookkeeping
      lock.lock();
    }
  }

  // Returns when the event completed (or the device reported an error: then holding the memory
  // longer helps no one, and the consumer sees the error on its own next device call).
  static void WaitFor(c10::Event& event, bool block) {
    try {
      if (block) {
        event.synchronize();
        return;
      }
      while (!event.query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "libshard::torch: waiting for a device copy failed: %s\n", e.what());
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> pending_;  // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  std::thread thread_;         // last: started after the members it uses
};

// Records an event on `device`'s current stream (where .to() enqueued its copies) and holds
// `owner` until the event completes.
void HoldUntilCopied(const c10::Device& device, std::shared_ptr<const void> owner) {
  if (device.is_meta()) return;  // shapes only: no bytes were read
  c10::impl::VirtualGuardImpl guard(device.type());
  c10::Event event(device.type());
  event.record(guard.getStream(device));
  PendingTransfers::Get().Add(std::move(event), std::move(owner));
}

std::string Quoted(std::string_view name) { return "'" + std::string(name) + "'"; }

// A CPU view of `view`, or an error. May throw c10::Error (callers catch).
Result<at::Tensor> MakeCpuView(const TensorView& view, const std::shared_ptr<const void>& owner) {
  const std::optional<c10::ScalarType> type = ToScalarType(view.dtype);
  if (!type) {
    return Status::InvalidArgument("tensor " + Quoted(view.name) + ": unknown dtype code " +
                                   std::to_string(static_cast<uint32_t>(view.dtype)));
  }
  std::vector<int64_t> sizes;
  sizes.reserve(view.shape.size());
  uint64_t elements = 1;
  bool overflow = false;
  for (uint64_t dim : view.shape) {
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
    sizes.push_back(static_cast<int64_t>(dim));
    if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
    elements *= dim;
  }
  const uint64_t item = DTypeSize(view.dtype);
  if (overflow || (item != 0 && elements > std::numeric_limits<uint64_t>::max() / item)) {
    return Status::InvalidArgument("tensor " + Quoted(view.name) +
                                   ": shape does not fit LibTorch's int64 sizes");
  }
  if (elements * item != view.nbytes) {
    return Status::InvalidArgument("tensor " + Quoted(view.name) + ": " +
                                   std::to_string(view.nbytes) + " bytes do not match its shape (" +
                                   std::to_string(elements) + " elements of " +
                                   std::to_string(item) + " bytes)");
  }
  const at::TensorOptions options = at::TensorOptions().dtype(*type).device(c10::kCPU);
  if (view.nbytes == 0) return at::empty(sizes, options);
  if (view.data == nullptr) {
    return Status::InvalidArgument("tensor " + Quoted(view.name) + ": null data");
  }
  if (view.dtype == DType::kBool) {
    // A bool byte other than 0 or 1 is undefined behaviour in LibTorch's kernels.
    for (uint64_t i = 0; i < view.nbytes; ++i) {
      const auto byte = std::to_integer<unsigned>(view.data[i]);
      if (byte > 1) {
        return Status::Corruption("bool tensor " + Quoted(view.name) + ": byte " +
                                  std::to_string(i) + " is " + std::to_string(byte) +
                                  ", not 0 or 1; the dataset is damaged (run `libshard verify`)");
      }
    }
  }
  // LibTorch wants a mutable pointer; see the header on writable views.
  void* data = const_cast<std::byte*>(view.data);
  return at::for_blob(data, sizes)
      .deleter([keep = owner](void*) {})  // the copy of `owner` dies with the storage
      .options(options)
      .make_tensor();
}

Result<TensorDict> ViewTensors(const std::vector<TensorView>& views,
                               const std::shared_ptr<const void>& owner,
                               const TorchOptions& options) {
  TensorDict dict;
  dict.reserve(views.size());
  for (const TensorView& view : views) {
    LIBSHARD_ASSIGN_OR_RETURN(at::Tensor tensor, MakeCpuView(view, owner));
    if (!options.device.is_cpu()) {
      tensor = tensor.to(tensor.options().device(options.device), options.non_blocking);
    }
    if (dict.contains(std::string(view.name))) {
      return Status::InvalidArgument("two tensors are named " + Quoted(view.name));
    }
    dict.insert(std::string(view.name), std::move(tensor));
  }
  if (!options.device.is_cpu() && options.non_blocking && !dict.is_empty()) {
    HoldUntilCopied(dict.front().value().device(), owner);
  }
  return dict;
}

// A small CPU tensor holding a copy of `values`, moved to the device of `options`.
template <typename T>
at::Tensor VectorTensor(const std::vector<T>& values, c10::ScalarType type,
                        const TorchOptions& options) {
  at::Tensor t =
      at::empty({static_cast<int64_t>(values.size())}, at::TensorOptions().dtype(type));
  if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  return options.device.is_cpu() ? t : t.to(t.options().device(options.device));
}

}  // namespace

std::optional<c10::ScalarType> ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kBool: return c10::ScalarType::Bool;
    case DType::kUInt8: return c10::ScalarType::Byte;
    case DType::kInt8: return c10::ScalarType::Char;
    case DType::kInt16: return c10::ScalarType::Short;
    case DType::kInt32: return c10::ScalarType::Int;
    case DType::kInt64: return c10::ScalarType::Long;
    case DType::kUInt16: return c10::ScalarType::UInt16;
    case DType::kUInt32: return c10::ScalarType::UInt32;
    case DType::kUInt64: return c10::ScalarType::UInt64;
    case DType::kFloat16: return c10::ScalarType::Half;
    case DType::kBFloat16: return c10::ScalarType::BFloat16;
    case DType::kFloat32: return c10::ScalarType::Float;
    case DType::kFloat64: return c10::ScalarType::Double;
    case DType::kFloat8E4M3FN: return c10::ScalarType::Float8_e4m3fn;
    case DType::kFloat8E5M2: return c10::ScalarType::Float8_e5m2;
  }
  return std::nullopt;
}

std::optional<DType> FromScalarType(c10::ScalarType type) {
  for (uint32_t code = 1; code <= kMaxDTypeCode; ++code) {
    const auto dtype = static_cast<DType>(code);
    if (ToScalarType(dtype) == type) return dtype;
  }
  return std::nullopt;
}

Result<at::Tensor> ToTensor(const TensorView& view, const std::shared_ptr<const void>& owner,
                            const TorchOptions& options) {
  try {
    LIBSHARD_ASSIGN_OR_RETURN(at::Tensor tensor, MakeCpuView(view, owner));
    if (options.device.is_cpu()) return tensor;
    at::Tensor copy = tensor.to(tensor.options().device(options.device), options.non_blocking);
    if (options.non_blocking) HoldUntilCopied(copy.device(), owner);
    return copy;
  } catch (const std::exception& e) {
    return Status::InvalidArgument("tensor " + Quoted(view.name) + " to " +
                                   options.device.str() + ": LibTorch: " + e.what());
  }
}

Result<TensorDict> ToTensors(const Sample& sample, const TorchOptions& options) {
  Result<TensorDict> dict = Status::Internal("unset");
  try {
    dict = ViewTensors(sample.tensors(), sample.memory_owner(), options);
  } catch (const std::exception& e) {
    dict = Status::InvalidArgument("to " + options.device.str() + ": LibTorch: " + e.what());
  }
  if (!dict.ok()) {
    return dict.status().WithContext("sample " + std::to_string(sample.index()));
  }
  return dict;
}

Result<TensorDict> ToTensors(const CollatedBatch& batch, const TorchOptions& options) {
  try {
    LIBSHARD_ASSIGN_OR_RETURN(TensorDict dict, ViewTensors(batch.tensors, batch.memory, options));
    for (const char* key : {"lengths", "cu_seqlens"}) {
      if (dict.contains(key)) {
        return Status::InvalidArgument(std::string("a field is named '") + key +
                                       "', which a collated batch uses for its own tensor");
      }
    }
    dict.insert("lengths", VectorTensor(batch.lengths, c10::ScalarType::Long, options));
    if (!batch.cu_seqlens.empty())
      dict.insert("cu_seqlens", VectorTensor(batch.cu_seqlens, c10::ScalarType::Int, options));
    return dict;
  } catch (const std::exception& e) {
    return Status::InvalidArgument("collated batch to " + options.device.str() + ": LibTorch: " +
                                   e.what());
  }
}

Result<std::vector<TensorDict>> ToTensors(const Batch& batch, const TorchOptions& options) {
  if (batch.collated) {
    return Status::InvalidArgument(
        "the batch is collated (LoaderOptions::collate): its tensors are in batch.collated; "
        "call ToTensors(*batch.collated)");
  }
  std::vector<TensorDict> out;
  out.reserve(batch.samples.size());
  for (const Sample& sample : batch.samples) {
    LIBSHARD_ASSIGN_OR_RETURN(TensorDict dict, ToTensors(sample, options));
    out.push_back(std::move(dict));
  }
  return out;
}

Result<TensorInput> ToTensorInput(std::string name, const at::Tensor& tensor) {
  try {
    const std::optional<DType> dtype = FromScalarType(tensor.scalar_type());
    if (!dtype) {
      return Status::Unsupported("tensor '" + name + "': LibTorch type " +
                                 std::string(c10::toString(tensor.scalar_type())) +
                                 " has no libshard dtype");
    }
    if (!tensor.device().is_cpu() || !tensor.is_contiguous()) {
      return Status::InvalidArgument("tensor '" + name + "': must be a contiguous CPU tensor; " +
                                     "call .contiguous().cpu()");
    }
    TensorInput input;
    input.dtype = *dtype;
    for (int64_t dim : tensor.sizes()) input.shape.push_back(static_cast<uint64_t>(dim));
    // The Writer wants a pointer even for an empty tensor, whose data_ptr may be null.
    static constexpr std::byte kNoBytes[1] = {};
    input.data = tensor.numel() == 0 ? static_cast<const void*>(kNoBytes) : tensor.const_data_ptr();
    input.name = std::move(name);
    return input;
  } catch (const std::exception& e) {
    return Status::InvalidArgument("tensor '" + name + "': LibTorch: " + e.what());
  }
}

}  // namespace libshard
