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
// The same holds for copies the caller makes itself: `view.to(torch::kCUDA, /*non_blocking=*/
// true)` on a CPU view of pinned memory returns before the copy has read the bytes, and the
// caller may drop the view at once. When the last CPU view of a sample dies, its memory is
// therefore not handed back to the loader at once: an event is recorded on the current stream of
// the current device of the thread that drops it (after every copy queued there), and the memory
// is released once that event completed (DeferredRelease below; bounded, polled by one thread).
// A copy queued on another stream or device than the one current at the drop is not covered:
// synchronise that stream first, or keep the view until then.
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

#include <chrono>
#include <cstdint>
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

// --- Deferred release of pinned memory behind device work ------------------------------------

// The completion of the device work queued before the event was recorded: a CUDA event, or a
// test's stand-in.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  // True once that work completed. Must not block. An exception counts as completed (holding
  // the memory longer helps no one; the device reports the error to its own next caller).
  virtual bool Query() = 0;
};

// Where DeferredRelease gets its events. The default is CudaEventSource(); tests inject others.
class DeviceEventSource {
 public:
  virtual ~DeviceEventSource() = default;
  // Whether device work may read `data` after the call that queued it returned (for CUDA: the
  // CUDA backend of LibTorch is loaded and `data` is pinned). Asked once per sample, when its
  // views are made, for the first tensor's bytes; false: the memory is released at once.
  virtual bool MayBeReadAsynchronously(const void* data) = 0;
  // An event recorded after the work queued so far on the current stream of `device` (nullopt:
  // the calling thread's current device). May throw.
  virtual std::unique_ptr<DeviceEvent> Record(std::optional<c10::Device> device) = 0;
};

// CUDA through c10's device-agnostic events (c10::Event, c10::impl::VirtualGuardImpl), so it
// links against a CPU-only LibTorch: there (or with no GPU at run time) nothing is ever read
// asynchronously and it records nothing. One instance per process.
std::shared_ptr<DeviceEventSource> CudaEventSource();

struct DeferredReleaseOptions {
  std::shared_ptr<DeviceEventSource> events;  // null: CudaEventSource()
  // The bound: releases (one per sample, or per device copy) awaiting their events, and their
  // bytes. A release that would pass it waits, polling, for older events to complete; after
  // max_wait it is held anyway beyond the bound (never handed back early), counted in
  // DeferredReleaseStats::over_bound and reported once on stderr. A release larger than
  // max_pending_bytes is admitted alone.
  uint64_t max_pending = 1024;
  uint64_t max_pending_bytes = uint64_t{16} << 30;
  std::chrono::milliseconds max_wait{30000};
};

struct DeferredReleaseStats {
  uint64_t pending = 0;        // releases awaiting their event now
  uint64_t pending_bytes = 0;
  uint64_t peak_pending = 0;   // highest `pending` so far
  uint64_t deferred = 0;       // releases that recorded an event
  uint64_t released = 0;       // of those, handed back after their event completed
  uint64_t waited = 0;         // releases that found the bound reached and waited for room
  uint64_t over_bound = 0;     // of those, still over the bound after max_wait: held anyway
  uint64_t event_errors = 0;   // Record or Query threw: released at once
};

// Holds memory until device work queued before its release has completed. One thread polls the
// pending events (every 20 us to 1 ms, backing off while nothing completes) and hands the memory
// back as they complete, so the loader gets it even when the consumer makes no further call.
// Destroying it waits up to max_wait for the pending events; memory whose event is still pending
// then is kept for the life of the process (reported on stderr), never handed back early.
// Memory outlives the Loader that produced it (Sample::memory_owner()), so destroying the loader
// while releases are pending is safe. Thread-safe.
class DeferredRelease {
  struct Passkey {
    explicit Passkey() = default;
  };

 public:
  static std::shared_ptr<DeferredRelease> Create(DeferredReleaseOptions options = {});
  // The process's (CudaEventSource(), default bounds), used when TorchOptions::release is null.
  static std::shared_ptr<DeferredRelease> Default();

  ~DeferredRelease();
  DeferredRelease(const DeferredRelease&) = delete;
  DeferredRelease& operator=(const DeferredRelease&) = delete;
  DeferredRelease(DeferredReleaseOptions options, Passkey);  // use Create()

  bool MayBeReadAsynchronously(const void* data) const;
  // Records an event on `device`'s current stream (nullopt: the current device's) and holds
  // `memory` until it completed. Waits, at most max_wait, while the bound is reached. Never
  // throws; when no event can be recorded, `memory` is released at once.
  void Release(std::shared_ptr<const void> memory, uint64_t bytes,
               std::optional<c10::Device> device = std::nullopt) noexcept;
  // Waits up to `timeout` until nothing is pending; true when nothing is.
  bool Drain(std::chrono::milliseconds timeout);
  DeferredReleaseStats stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct TorchOptions {
  // torch::kCPU: zero-copy views. Any other device: one copy per tensor with
  // .to(device, non_blocking), the only copy between the disk and the device.
  c10::Device device = c10::kCPU;
  // For device copies. Asynchronous only when the arena is pinned; always safe (see above).
  bool non_blocking = true;
  // Where the memory of dropped views and of device copies waits for the device (see above).
  // null: DeferredRelease::Default().
  std::shared_ptr<DeferredRelease> release;
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
