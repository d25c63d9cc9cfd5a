// The LibTorch adapter (libshard/torch.h). The only translation unit of libshard::torch: LibTorch
// headers are slow to compile, and the core library never sees them.
#include "libshard/torch.h"

#include <ATen/core/Tensor.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/Event.h>
#include <c10/core/Layout.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace libshard {
namespace {

// Memory kept for the life of the process: released memory whose event had not completed when
// its DeferredRelease was destroyed (handing it back could let a copy read reused bytes). Never
// destroyed, so nothing is freed during exit while the device may still read it.
class KeptForever {
 public:
  static void Keep(std::shared_ptr<const void> memory) {
    static KeptForever* const kept = [] {
      alignas(KeptForever) static unsigned char storage[sizeof(KeptForever)];
      return ::new (storage) KeptForever();  // placement: no destructor runs at exit
    }();
    std::lock_guard<std::mutex> lock(kept->mu_);
    kept->memory_.push_back(std::move(memory));
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<const void>> memory_;
};

class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(c10::Event event) : event_(std::move(event)) {}
  bool Query() override { return event_.query(); }

 private:
  c10::Event event_;
};

// CUDA events through c10's registry of device guards: LibTorch's CUDA library registers the
// CUDA guard when it is loaded; a CPU-only LibTorch has none, and then nothing is asynchronous.
// Device copies (TorchOptions::device) record on their own device's type, as before.
class CudaEvents final : public DeviceEventSource {
 public:
  bool MayBeReadAsynchronously(const void* data) override {
    if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) return false;
    try {
      // Pinned (cudaHostRegister'ed arena, or cudaHostAlloc) memory is the only host memory a
      // CUDA copy reads after returning; pageable memory is staged before the call returns.
      return at::detail::getCUDAHooks().isPinnedPtr(data);
    } catch (const std::exception&) {
      return false;
    }
  }
  // `device` may be another accelerator (TorchOptions::device): any type with a device guard.
  std::unique_ptr<DeviceEvent> Record(std::optional<c10::Device> device) override {
    c10::impl::VirtualGuardImpl guard(device.has_value() ? device->type()
                                                         : c10::DeviceType::CUDA);
    const c10::Device where = device.has_value() ? *device : guard.getDevice();
    c10::Event event(where.type());
    event.record(guard.getStream(where));
    return std::make_unique<CudaEvent>(std::move(event));
  }
};

constexpr std::chrono::microseconds kMinPoll{20};
constexpr std::chrono::microseconds kMaxPoll{1000};

void Warn(std::atomic<bool>& once, const std::string& message) {
  if (!once.exchange(true)) std::fprintf(stderr, "libshard::torch: %s\n", message.c_str());
}

// What the views of one sample hold instead of the memory itself: when the last view dies, the
// memory goes to the DeferredRelease (with an event on the current stream), not to the loader.
class ReleaseGuard {
 public:
  ReleaseGuard(std::shared_ptr<const void> memory, std::shared_ptr<DeferredRelease> release,
               uint64_t bytes)
      : memory_(std::move(memory)), release_(std::move(release)), bytes_(bytes) {}
  ReleaseGuard(const ReleaseGuard&) = delete;
  ReleaseGuard& operator=(const ReleaseGuard&) = delete;
  ~ReleaseGuard() { release_->Release(std::move(memory_), bytes_); }

 private:
  std::shared_ptr<const void> memory_;
  std::shared_ptr<DeferredRelease> release_;
  uint64_t bytes_;
};

// The DeferredRelease for views of `data`, or null when none is needed (nothing can read `data`
// asynchronously). The default one is created only then, after the CUDA runtime initialised
// (it pinned `data`), so it is destroyed before the runtime shuts down.
std::shared_ptr<DeferredRelease> ReleaseFor(const TorchOptions& options, const void* data) {
  if (options.release) {
    return options.release->MayBeReadAsynchronously(data) ? options.release : nullptr;
  }
  if (!CudaEventSource()->MayBeReadAsynchronously(data)) return nullptr;
  return DeferredRelease::Default();
}

// Records an event on `device`'s current stream (where .to() enqueued its copies) and holds
// `owner` until the event completes.
void HoldUntilCopied(const TorchOptions& options, const c10::Device& device,
                     std::shared_ptr<const void> owner, uint64_t bytes) {
  if (device.is_meta()) return;  // shapes only: no bytes were read
  const std::shared_ptr<DeferredRelease> release =
      options.release ? options.release : DeferredRelease::Default();
  release->Release(std::move(owner), bytes, device);
}

uint64_t TotalBytes(const std::vector<TensorView>& views) {
  uint64_t bytes = 0;
  for (const TensorView& view : views) bytes += view.nbytes;
  return bytes;
}

const void* FirstData(const std::vector<TensorView>& views) {
  for (const TensorView& view : views) {
    if (view.nbytes > 0 && view.data != nullptr) return view.data;
  }
  return nullptr;
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
  // CPU views of memory a device may read asynchronously share one ReleaseGuard; device copies
  // are held explicitly below.
  std::shared_ptr<const void> holder = owner;
  if (options.device.is_cpu()) {
    if (const void* data = FirstData(views)) {
      if (std::shared_ptr<DeferredRelease> release = ReleaseFor(options, data)) {
        holder = std::make_shared<const ReleaseGuard>(owner, std::move(release), TotalBytes(views));
      }
    }
  }
  TensorDict dict;
  dict.reserve(views.size());
  for (const TensorView& view : views) {
    LIBSHARD_ASSIGN_OR_RETURN(at::Tensor tensor, MakeCpuView(view, holder));
    if (!options.device.is_cpu()) {
      tensor = tensor.to(tensor.options().device(options.device), options.non_blocking);
    }
    if (dict.contains(std::string(view.name))) {
      return Status::InvalidArgument("two tensors are named " + Quoted(view.name));
    }
    dict.insert(std::string(view.name), std::move(tensor));
  }
  if (!options.device.is_cpu() && options.non_blocking && !dict.is_empty()) {
    HoldUntilCopied(options, dict.front().value().device(), owner, TotalBytes(views));
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

std::shared_ptr<DeviceEventSource> CudaEventSource() {
  static const std::shared_ptr<DeviceEventSource> source = std::make_shared<CudaEvents>();
  return source;
}

struct DeferredRelease::State {
  struct Entry {
    std::unique_ptr<DeviceEvent> event;
    std::shared_ptr<const void> memory;
    uint64_t bytes;
  };

  explicit State(DeferredReleaseOptions o) : options(std::move(o)) {
    if (!options.events) options.events = CudaEventSource();
    if (options.max_pending == 0) options.max_pending = 1;
  }

  // Queries every pending event (streams complete out of order), removes the completed ones and
  // moves their memory to `done`, which the caller releases outside the lock. Requires mu.
  void PollLocked(std::vector<std::shared_ptr<const void>>& done) {
    for (auto it = pending.begin(); it != pending.end();) {
      bool completed = true;
      try {
        completed = it->event->Query();
      } catch (const std::exception& e) {
        ++stats.event_errors;
        Warn(warned_error, std::string("a device event failed; its memory is released: ") +
                               e.what());
      }
      if (!completed) {
        ++it;
        continue;
      }
      done.push_back(std::move(it->memory));
      pending_bytes -= it->bytes;
      ++stats.released;
      it = pending.erase(it);
    }
  }

  bool Full(uint64_t bytes) const {
    if (pending.empty()) return false;  // one release is always admitted
    return pending.size() + 1 > options.max_pending ||
           pending_bytes + bytes > options.max_pending_bytes;
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu);
    std::chrono::microseconds interval = kMinPoll;
    while (!stop) {
      if (pending.empty()) {
        work.wait(lock, [this] { return stop || !pending.empty(); });
        interval = kMinPoll;
        continue;
      }
      std::vector<std::shared_ptr<const void>> done;
      PollLocked(done);
      if (!done.empty()) {
        lock.unlock();
        done.clear();  // outside the lock: releasing runs the arena's bookkeeping
        room.notify_all();
        lock.lock();
        interval = kMinPoll;
        continue;
      }
      work.wait_for(lock, interval, [this] { return stop; });
      interval = std::min(interval * 2, kMaxPoll);
    }
  }

  DeferredReleaseOptions options;
  mutable std::mutex mu;
  std::condition_variable work;  // pending gained an entry, or stop
  std::condition_variable room;  // entries were released
  std::deque<Entry> pending;     // guarded by mu
  uint64_t pending_bytes = 0;    // guarded by mu
  DeferredReleaseStats stats;    // guarded by mu (pending, pending_bytes filled in by stats())
  bool stop = false;             // guarded by mu
  std::thread poller;            // started by the first deferred release
  std::thread::id poller_id;     // guarded by mu
  std::atomic<bool> warned_error{false};
  std::atomic<bool> warned_bound{false};
};

DeferredRelease::DeferredRelease(DeferredReleaseOptions options, Passkey)
    : state_(std::make_unique<State>(std::move(options))) {}

std::shared_ptr<DeferredRelease> DeferredRelease::Create(DeferredReleaseOptions options) {
  return std::make_shared<DeferredRelease>(std::move(options), Passkey{});
}

std::shared_ptr<DeferredRelease> DeferredRelease::Default() {
  static const std::shared_ptr<DeferredRelease> instance = Create();
  return instance;
}

DeferredRelease::~DeferredRelease() {
  State& s = *state_;
  std::thread poller;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stop = true;
    poller = std::move(s.poller);
  }
  s.work.notify_all();
  if (poller.joinable()) poller.join();
  // The poller is gone: poll here, at most max_wait, then keep what is still pending.
  const auto deadline = std::chrono::steady_clock::now() + s.options.max_wait;
  std::chrono::microseconds interval = kMinPoll;
  std::unique_lock<std::mutex> lock(s.mu);
  while (!s.pending.empty()) {
    std::vector<std::shared_ptr<const void>> done;
    s.PollLocked(done);
    const bool give_up = std::chrono::steady_clock::now() >= deadline;
    lock.unlock();
    done.clear();  // outside the lock, as in Run()
    if (!give_up) std::this_thread::sleep_for(interval);
    interval = std::min(interval * 2, kMaxPoll);
    lock.lock();
    if (give_up) break;
  }
  if (!s.pending.empty()) {
    std::fprintf(stderr,
                 "libshard::torch: %zu releases (%llu bytes) still wait for the device after "
                 "%lld ms; their memory stays allocated for the life of the process\n",
                 s.pending.size(), static_cast<unsigned long long>(s.pending_bytes),
                 static_cast<long long>(s.options.max_wait.count()));
    for (State::Entry& entry : s.pending) KeptForever::Keep(std::move(entry.memory));
    s.pending.clear();
  }
}

bool DeferredRelease::MayBeReadAsynchronously(const void* data) const {
  try {
    return state_->options.events->MayBeReadAsynchronously(data);
  } catch (const std::exception&) {
    return false;
  }
}

void DeferredRelease::Release(std::shared_ptr<const void> memory, uint64_t bytes,
                              std::optional<c10::Device> device) noexcept {
  State& s = *state_;
  if (memory == nullptr) return;
  std::unique_ptr<DeviceEvent> event;
  try {
    // On the releasing thread: its current stream is where it queued its copies.
    event = s.options.events->Record(device);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.event_errors;
    Warn(s.warned_error,
         std::string("recording a device event failed; the memory is released at once: ") +
             e.what());
    return;  // `memory` goes here
  } catch (...) {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.event_errors;
    return;
  }
  if (event == nullptr) return;
  State::Entry entry{std::move(event), std::move(memory), bytes};
  try {
    std::unique_lock<std::mutex> lock(s.mu);
    ++s.stats.deferred;
    if (s.Full(bytes) && std::this_thread::get_id() != s.poller_id) {
      ++s.stats.waited;
      const auto deadline = std::chrono::steady_clock::now() + s.options.max_wait;
      const bool room = s.room.wait_until(lock, deadline, [&] { return !s.Full(bytes); });
      if (!room) {
        ++s.stats.over_bound;
        Warn(s.warned_bound,
             "the device has not completed the copies of " + std::to_string(s.pending.size()) +
                 " released samples within " + std::to_string(s.options.max_wait.count()) +
                 " ms; holding more memory than DeferredReleaseOptions bounds (never reused "
                 "before its copy completed)");
      }
    }
    if (!s.poller.joinable()) {
      s.poller = std::thread([&s] { s.Run(); });
      s.poller_id = s.poller.get_id();
    }
    // Strong guarantee: if the allocation throws, `entry` is intact and handled below.
    s.pending.push_back(std::move(entry));
    s.pending_bytes += bytes;
    s.stats.peak_pending = std::max<uint64_t>(s.stats.peak_pending, s.pending.size());
  } catch (const std::exception& e) {
    // No thread or no memory for the queue: wait here, at most max_wait, then keep the memory;
    // never hand it back before its event completed.
    std::fprintf(stderr, "libshard::torch: deferred release failed (%s); waiting for the device\n",
                 e.what());
    const auto deadline = std::chrono::steady_clock::now() + s.options.max_wait;
    try {
      while (!entry.event->Query()) {
        if (std::chrono::steady_clock::now() >= deadline) {
          KeptForever::Keep(std::move(entry.memory));
          return;
        }
        std::this_thread::sleep_for(kMaxPoll);
      }
    } catch (...) {
    }
    return;
  }
  s.work.notify_one();
}

bool DeferredRelease::Drain(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  return s.room.wait_for(lock, timeout, [&] { return s.pending.empty(); });
}

DeferredReleaseStats DeferredRelease::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  DeferredReleaseStats out = state_->stats;
  out.pending = state_->pending.size();
  out.pending_bytes = state_->pending_bytes;
  return out;
}

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
    if (options.device.is_cpu()) {
      std::shared_ptr<const void> holder = owner;
      if (view.nbytes > 0 && view.data != nullptr) {
        if (std::shared_ptr<DeferredRelease> release = ReleaseFor(options, view.data))
          holder = std::make_shared<const ReleaseGuard>(owner, std::move(release), view.nbytes);
      }
      return MakeCpuView(view, holder);
    }
    LIBSHARD_ASSIGN_OR_RETURN(at::Tensor tensor, MakeCpuView(view, owner));
    at::Tensor copy = tensor.to(tensor.options().device(options.device), options.non_blocking);
    if (options.non_blocking) HoldUntilCopied(options, copy.device(), owner, view.nbytes);
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
    // Tensors without plain bytes first: .contiguous().cpu() would not help them.
    if (tensor.is_nested()) {
      return Status::InvalidArgument("tensor '" + name + "': a nested tensor has no single " +
                                     "shape; write each component, or pad it first");
    }
    if (tensor.layout() != c10::kStrided) {
      return Status::InvalidArgument("tensor '" + name + "': layout " +
                                     c10::str(tensor.layout()) +
                                     " is not strided (no plain bytes); call .to_dense() first");
    }
    if (tensor.is_meta()) {
      return Status::InvalidArgument("tensor '" + name + "': on the meta device it has no data; " +
                                     "materialise it on a real device first");
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
