// Micro-benchmarks of the streaming loader: the raw sequential read and the Loader over an
// EAGLE-3-like dataset (warm page cache unless you drop it; `libshard bench DIR` is the
// cold-cache end-to-end measurement).
//
// The dataset is created on first use under $LIBSHARD_BENCH_DATASET (default
// /var/tmp/libshard_bench_ds) with about $LIBSHARD_BENCH_GB GB (default 1) of samples shaped like
// EAGLE-3 dumps: input_ids/loss_mask int64 [L], hidden_state bf16 [1,L,H], aux_hidden_state bf16
// [1,L,3H], H = 2048, L in 1000..3000.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "yardstick/raw_read.h"
#include "libshard/writer.h"

namespace libshard {
namespace {

std::string BenchDir() {
  const char* d = std::getenv("LIBSHARD_BENCH_DATASET");
  return d != nullptr && *d ? d : "/var/tmp/libshard_bench_ds";
}

// Fills `dst` with cheap pseudo-random bytes (incompressible, like real activations).
void Fill(std::span<std::byte> dst, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= dst.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(dst.data() + i, &x, 8);
  }
  for (; i < dst.size(); ++i) dst[i] = static_cast<std::byte>(x >> (8 * (i % 8)));
}

Result<std::shared_ptr<Dataset>> BenchDataset() {
  static Result<std::shared_ptr<Dataset>> cached = []() -> Result<std::shared_ptr<Dataset>> {
    const std::string dir = BenchDir();
    if (std::filesystem::exists(std::filesystem::path(dir) / "manifest.json")) {
      return Dataset::Open(dir);
    }
    const char* gb_env = std::getenv("LIBSHARD_BENCH_GB");
    const double gb = gb_env != nullptr ? std::atof(gb_env) : 1.0;
    const uint64_t hidden = 2048;
    Schema schema;
    schema.fields = {{"input_ids", DType::kInt64, 1, 0},
                     {"loss_mask", DType::kInt64, 1, 0},
                     {"hidden_state", DType::kBFloat16, 3, 1},
                     {"aux_hidden_state", DType::kBFloat16, 3, 1}};
    schema.length_field = 0;
    WriterOptions wo;
    wo.fsync = false;
    wo.created_by = "loader_bench";
    LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<Writer> w, Writer::Create(dir, schema, wo));
    uint64_t written = 0;
    for (uint64_t i = 0; static_cast<double>(written) < gb * 1e9; ++i) {
      const uint64_t len = 1000 + (i * 7919) % 2001;
      SampleInput s;
      auto add = [&](const char* name, DType dtype, Shape shape) {
        TensorInput t;
        t.name = name;
        t.dtype = dtype;
        t.shape = std::move(shape);
        t.fill = [i, name](std::span<std::byte> dst) {
          Fill(dst, i * 31 + std::hash<std::string>()(name));
          return Status::OK();
        };
        s.tensors.push_back(std::move(t));
      };
      add("input_ids", DType::kInt64, {len});
      add("loss_mask", DType::kInt64, {len});
      add("hidden_state", DType::kBFloat16, {1, len, hidden});
      add("aux_hidden_state", DType::kBFloat16, {1, len, 3 * hidden});
      s.source.path = "data_" + std::to_string(i) + ".pt";
      LIBSHARD_RETURN_IF_ERROR(w->Append(s));
      written += len * (16 + 8 * hidden);
    }
    LIBSHARD_RETURN_IF_ERROR(w->Finish().status());
    return Dataset::Open(dir);
  }();
  return cached;
}

void BM_RawSequentialRead(benchmark::State& state) {
  auto ds = BenchDataset();
  if (!ds.ok()) {
    state.SkipWithError(ds.status().ToString().c_str());
    return;
  }
  std::vector<std::string> files;
  for (const ShardInfo& s : (*ds)->shards()) files.push_back(s.path);
  uint64_t bytes = 0;
  for (auto _ : state) {
    auto r = RawSequentialRead(files);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    bytes += r->bytes;
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_RawSequentialRead)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LoaderEpoch(benchmark::State& state) {
  auto ds = BenchDataset();
  if (!ds.ok()) {
    state.SkipWithError(ds.status().ToString().c_str());
    return;
  }
  LoaderOptions o;
  o.order = state.range(0) != 0 ? Order::Shuffled() : Order::Unshuffled();
  o.verify_checksums = state.range(1) != 0;
  o.pin_memory = PinMemory::kOff;
  o.memory_budget = uint64_t{1} << 30;
  auto loader = Loader::Create(*ds, o);
  if (!loader.ok()) {
    state.SkipWithError(loader.status().ToString().c_str());
    return;
  }
  uint64_t epoch = 0;
  uint64_t bytes = 0;
  for (auto _ : state) {
    if (!(*loader)->SetEpoch(epoch++).ok()) break;
    const uint64_t before = (*loader)->stats().bytes_read;
    while (true) {
      auto next = (*loader)->Next();
      if (!next.ok()) {
        state.SkipWithError(next.status().ToString().c_str());
        return;
      }
      if (!next->has_value()) break;
    }
    bytes += (*loader)->stats().bytes_read - before;
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_LoaderEpoch)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"shuffle", "verify"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace libshard
