// The GPU check of libshard::torch's deferred release (scripts/gpu_check.sh runs it; issue 25).
//
// A trainer's step: CPU views of a sample in the pinned arena, view.to(kCUDA, non_blocking=true)
// queued behind GPU work (so the copy runs well after .to() returned), the views dropped at once,
// the next sample taken. The arena holds only a few samples, so the loader reuses memory as soon
// as it is handed back. With the default TorchOptions the memory waits for an event recorded at
// the drop; every GPU tensor must then equal the bytes written. A control run releases at once
// (an event source that says nothing is asynchronous) and shows the hazard the guard prevents.
//
// Exit status: 0 when the guarded run is exact, 1 when it is not, 77 when there is no CUDA or
// the arena is not pinned (nothing to check). Prints one line of figures per run.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/torch.h"
#include "libshard/writer.h"

namespace {

using namespace libshard;  // NOLINT: a small program

constexpr uint64_t kSamples = 48;
constexpr uint64_t kLength = 1024;
constexpr uint64_t kHidden = 2048;  // 4 MiB of bf16 per sample
constexpr uint64_t kBytes = kLength * kHidden * 2;

std::vector<std::byte> Bytes(uint64_t sample) {
  std::vector<std::byte> out(kBytes);
  std::mt19937_64 rng(sample * 7919 + 1);
  for (size_t i = 0; i < out.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  return out;
}

bool Write(const std::string& dir) {
  Schema schema;
  schema.fields = {Field{"hidden_state", DType::kUInt8, 1, 0}};
  schema.length_field = 0;
  WriterOptions options;
  options.fsync = false;
  auto writer = Writer::Create(dir, schema, options);
  if (!writer.ok()) {
    std::fprintf(stderr, "writer: %s\n", writer.status().ToString().c_str());
    return false;
  }
  for (uint64_t i = 0; i < kSamples; ++i) {
    const std::vector<std::byte> bytes = Bytes(i);
    SampleInput input;
    input.source.path = "s" + std::to_string(i);
    TensorInput t;
    t.name = "hidden_state";
    t.dtype = DType::kUInt8;
    t.shape = {kBytes};
    t.data = bytes.data();
    input.tensors.push_back(std::move(t));
    if (Status st = (*writer)->Append(input); !st.ok()) {
      std::fprintf(stderr, "append: %s\n", st.ToString().c_str());
      return false;
    }
  }
  return (*writer)->Finish().ok();
}

// A source that never defers: the behaviour without the guard.
class Immediate final : public DeviceEventSource {
 public:
  bool MayBeReadAsynchronously(const void*) override { return false; }
  std::unique_ptr<DeviceEvent> Record(std::optional<c10::Device>) override { return nullptr; }
};

struct Outcome {
  int wrong = -1;
  bool pinned = false;
  double seconds = 0;
};

Outcome Run(const std::shared_ptr<const Dataset>& dataset, const TorchOptions& options,
            const at::Tensor& a, at::Tensor b) {
  Outcome out;
  LoaderOptions lo;
  lo.order = Order::Unshuffled();
  lo.memory_budget = 4 * (kBytes + (64 << 10));  // about four samples: reused at once
  auto created = Loader::Create(dataset, lo);
  if (!created.ok()) {
    std::fprintf(stderr, "loader: %s\n", created.status().ToString().c_str());
    return out;
  }
  std::unique_ptr<Loader> loader = std::move(*created);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::pair<uint64_t, at::Tensor>> on_gpu;
  for (;;) {
    auto batch = loader->Next();
    if (!batch.ok()) {
      std::fprintf(stderr, "next: %s\n", batch.status().ToString().c_str());
      return out;
    }
    if (!batch->has_value()) break;
    const Sample& sample = (*batch)->samples.at(0);
    at::Tensor gpu;
    {
      auto views = ToTensors(sample, options);
      if (!views.ok()) {
        std::fprintf(stderr, "views: %s\n", views.status().ToString().c_str());
        return out;
      }
      // GPU work ahead of the copy on the current stream: the copy starts only after it, long
      // after .to() returned and the views are gone.
      for (int k = 0; k < 4; ++k) at::mm_out(b, a, a);
      gpu = (*views)["hidden_state"].to(at::TensorOptions().device(at::kCUDA), true);
    }
    const uint64_t index = sample.index();
    *batch = std::nullopt;  // the sample's last holder: the memory goes to the release
    on_gpu.emplace_back(index, std::move(gpu));
  }
  out.pinned = loader->stats().pinned;
  loader.reset();
  out.wrong = 0;
  for (const auto& [index, gpu] : on_gpu) {
    const at::Tensor host = gpu.cpu();  // synchronous: after every copy queued before it
    const std::vector<std::byte> want = Bytes(index);
    if (std::memcmp(host.const_data_ptr(), want.data(), want.size()) != 0) ++out.wrong;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace

int main() {
  if (!at::hasCUDA()) {
    std::printf("torch_nonblocking_check: skipped: LibTorch has no CUDA device\n");
    return 77;
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / "libshard_nonblocking_check").string();
  std::filesystem::remove_all(dir);
  if (!Write(dir)) return 1;
  auto dataset = Dataset::Open(dir);
  if (!dataset.ok()) {
    std::fprintf(stderr, "open: %s\n", dataset.status().ToString().c_str());
    return 1;
  }
  const at::Tensor a =
      at::randn({4096, 4096}, at::TensorOptions().device(at::kCUDA).dtype(at::kFloat));
  at::Tensor b = at::empty_like(a);

  TorchOptions guarded;  // the default: DeferredRelease::Default() with CUDA events
  const Outcome ok = Run(*dataset, guarded, a, b);
  const DeferredReleaseStats stats = DeferredRelease::Default()->stats();

  TorchOptions control;
  DeferredReleaseOptions immediate;
  immediate.events = std::make_shared<Immediate>();
  control.release = DeferredRelease::Create(immediate);
  const Outcome bad = Run(*dataset, control, a, b);

  std::printf("torch_nonblocking_check: arena pinned=%d; guarded: %d of %llu samples wrong on the "
              "GPU (%.2f s; deferred %llu, released %llu, waited %llu, peak pending %llu); "
              "control without the guard: %d of %llu wrong\n",
              ok.pinned ? 1 : 0, ok.wrong, static_cast<unsigned long long>(kSamples), ok.seconds,
              static_cast<unsigned long long>(stats.deferred),
              static_cast<unsigned long long>(stats.released),
              static_cast<unsigned long long>(stats.waited),
              static_cast<unsigned long long>(stats.peak_pending), bad.wrong,
              static_cast<unsigned long long>(kSamples));
  std::filesystem::remove_all(dir);
  if (!ok.pinned) {
    std::printf("torch_nonblocking_check: skipped: the arena is not pinned (no hazard)\n");
    return 77;
  }
  if (ok.wrong != 0 || stats.deferred == 0) return 1;
  return 0;
}
