// index_bench DIR [--world W] [--rank R] [--warm] [--shuffle] [--order V] [--max-tokens T]:
// what opening a dataset costs one rank (issue 14): index bytes per sample, Dataset::Open time,
// time to the first sample of rank R of W, and the resident memory the index adds. The first
// sample is timed twice: `read_first_ms` = Open + Dataset::Read of it (the index's share), and
// `first_sample_ms` = Open + Loader::Create + the first Next() (what a training job sees; the
// loader's arena, threads and ring included); `loader_create_ms` is Loader::Create alone (the
// epoch's order is built there). Drops the page cache first (sync; echo 3 > /proc/sys/vm/drop_caches; needs root)
// unless --warm. One JSON object on stdout.
//
// The default order is unshuffled: the index's cost alone. --shuffle adds the epoch's shuffle
// (docs/ORDER.md), the order's cost, not the index's: with --order 2 (the default) O(1) per
// position, nothing of size N; with --order 1 the Fisher-Yates permutation, O(N) time and 8N
// bytes on every rank (about 1 s at 10^7 samples). --max-tokens adds token batching (every
// length, O(N)).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "libshard/dataset.h"
#include "libshard/loader.h"

namespace {

// Resident set size of this process in bytes (/proc/self/statm).
uint64_t Rss() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

bool DropCaches() {
  sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace libshard;
  if (argc < 2) {
    std::fprintf(stderr, "usage: index_bench DIR [--world W] [--rank R] [--warm] [--shuffle] "
                         "[--order V] [--max-tokens T]\n");
    return 2;
  }
  const std::string dir = argv[1];
  LoaderOptions lo;
  lo.world_size = 1024;
  lo.rank = 0;
  lo.order = Order::Unshuffled();
  lo.memory_budget = uint64_t{64} << 20;
  lo.worker_threads = 1;
  bool warm = false;
  bool shuffle = false;
  uint32_t version = kOrderLatest;
  for (int k = 2; k < argc; ++k) {
    const std::string a = argv[k];
    if (a == "--warm") warm = true;
    else if (a == "--shuffle") shuffle = true;
    else if (a == "--world" && k + 1 < argc) lo.world_size = std::strtoul(argv[++k], nullptr, 10);
    else if (a == "--rank" && k + 1 < argc) lo.rank = std::strtoul(argv[++k], nullptr, 10);
    else if (a == "--order" && k + 1 < argc) version = std::strtoul(argv[++k], nullptr, 10);
    else if (a == "--max-tokens" && k + 1 < argc) lo.max_tokens = std::strtoull(argv[++k], nullptr, 10);
    else {
      std::fprintf(stderr, "index_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  lo.order = shuffle ? Order::Shuffled(0, version) : Order::Unshuffled();
  uint64_t index_bytes = 0;
  std::string index_name;
  for (const char* name : {"index.lsi", "index.a.lsi"}) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(std::filesystem::path(dir) / name, ec);
    if (!ec) index_bytes = size, index_name = name;
  }
  const bool cold = !warm && DropCaches();
  const uint64_t rss0 = Rss();
  const auto t0 = std::chrono::steady_clock::now();
  auto ds = Dataset::Open(dir);
  const auto t1 = std::chrono::steady_clock::now();
  if (!ds.ok()) {
    std::fprintf(stderr, "index_bench: %s\n", ds.status().ToString().c_str());
    return 1;
  }
  const uint64_t rss1 = Rss();
  // The first sample of rank R in order (unshuffled: sample R) through Dataset::Read alone: the
  // index's part of the time to the first sample, without the loader's set-up (arena, threads,
  // ring, order).
  const auto r0 = std::chrono::steady_clock::now();
  auto direct = (*ds)->Read(shuffle ? 0 : lo.rank % std::max<uint64_t>((*ds)->size(), 1));
  const auto r1 = std::chrono::steady_clock::now();
  if (!direct.ok()) {
    std::fprintf(stderr, "index_bench: Read: %s\n", direct.status().ToString().c_str());
    return 1;
  }
  const auto t1b = std::chrono::steady_clock::now();
  auto loader = Loader::Create(*ds, lo);
  if (!loader.ok()) {
    std::fprintf(stderr, "index_bench: %s\n", loader.status().ToString().c_str());
    return 1;
  }
  const auto t1c = std::chrono::steady_clock::now();
  auto batch = (*loader)->Next();
  const auto t2 = std::chrono::steady_clock::now();
  if (!batch.ok() || !batch->has_value()) {
    std::fprintf(stderr, "index_bench: first sample: %s\n",
                 batch.ok() ? "none" : batch.status().ToString().c_str());
    return 1;
  }
  const uint64_t first = (*batch)->samples.front().index();
  const uint64_t rss2 = Rss();
  const uint64_t n = (*ds)->size();
  std::printf(
      "{\"dir\": \"%s\", \"index\": \"%s\", \"samples\": %llu, \"index_bytes\": %llu, "
      "\"bytes_per_sample\": %.1f, \"cold_cache\": %s, \"rank\": %u, \"world\": %u, "
      "\"shuffle\": %s, \"order\": %u, \"max_tokens\": %llu, \"open_ms\": %.1f, "
      "\"read_first_ms\": %.1f, "
      "\"loader_create_ms\": %.1f, \"loader_first_sample_ms\": %.1f, \"first_sample_ms\": %.1f, "
      "\"first_sample\": %llu, \"rss_index_mb\": %.1f, \"rss_after_first_sample_mb\": %.1f}\n",
      dir.c_str(), index_name.c_str(), static_cast<unsigned long long>(n),
      static_cast<unsigned long long>(index_bytes),
      n ? static_cast<double>(index_bytes) / static_cast<double>(n) : 0.0, cold ? "true" : "false",
      lo.rank, lo.world_size, shuffle ? "true" : "false", version,
      static_cast<unsigned long long>(lo.max_tokens), Ms(t0, t1), Ms(t0, t1) + Ms(r0, r1),
      Ms(t1b, t1c), Ms(t1b, t2), Ms(t0, t1) + Ms(t1b, t2),
      static_cast<unsigned long long>(first), static_cast<double>(rss1 - rss0) / 1e6,
      static_cast<double>(rss2 - rss0) / 1e6);
  return 0;
}
