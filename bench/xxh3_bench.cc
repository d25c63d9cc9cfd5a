// xxh3-64 per build (format/checksum.h): GB/s on one core (10^9 bytes a second) for every build
// of xxh3 this CPU runs, and for the system libxxhash (XXH3_64bits, the library's checksum
// before issue 21: a baseline SSE2 build), on a 1 MiB buffer (cache-resident: the hash's own
// speed) and a 64 MiB one (from memory: what checking a sample costs the loader's workers).
//
//   build/bench/xxh3_bench [--benchmark_repetitions=3 --benchmark_report_aggregates_only=true]
//
// The buffer starts 8 bytes past a page (a sample's bytes are not vector-aligned in general).
#include <benchmark/benchmark.h>

#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "format/checksum.h"

namespace libshard::format {
namespace {

// The same random buffer for every benchmark of a size, touched before timing: `size` bytes from
// 8 bytes past a page boundary.
const unsigned char* Buffer(size_t size) {
  static std::map<size_t, std::vector<unsigned char>> buffers;
  auto [it, fresh] = buffers.try_emplace(size);
  std::vector<unsigned char>& b = it->second;
  if (fresh) {
    b.resize(size + 8192);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i + 8 <= b.size(); i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(b.data() + i, &x, 8);
    }
  }
  const auto addr = reinterpret_cast<uintptr_t>(b.data());
  return b.data() + (4096 - addr % 4096) % 4096 + 8;
}

template <typename Hash>
void Run(benchmark::State& state, Hash hash) {
  const size_t size = static_cast<size_t>(state.range(0));
  const unsigned char* p = Buffer(size);
  for (auto _ : state) benchmark::DoNotOptimize(hash(p, size));
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(size) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

const bool kRegistered = [] {
  for (int64_t size : {int64_t{1} << 20, int64_t{64} << 20}) {
    benchmark::RegisterBenchmark("xxh3/system_libxxhash", [](benchmark::State& s) {
      Run(s, [](const void* p, size_t n) { return XXH3_64bits(p, n); });
    })->Arg(size)->Unit(benchmark::kMicrosecond);
    for (Xxh3Isa isa : SupportedXxh3Isas()) {
      const std::string name = "xxh3/" + std::string(Xxh3IsaName(isa));
      benchmark::RegisterBenchmark(name.c_str(), [isa](benchmark::State& s) {
        Run(s, [isa](const void* p, size_t n) { return Xxh3Using(isa, p, n); });
      })->Arg(size)->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark("xxh3/dispatched", [](benchmark::State& s) {
      Run(s, [](const void* p, size_t n) { return Xxh3(p, n); });
    })->Arg(size)->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
}  // namespace libshard::format
