// `libshard bench DIR`: the streaming Loader's throughput and CPU cost on a dataset, beside the
// device's sequential limit (an io_uring O_DIRECT QD32 1 MiB read of the same shard files)
// measured in the same run, with the page cache dropped before each measurement when possible.
#include <algorithm>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cache_options.h"
#include "cli/command.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "yardstick/raw_read.h"
#include "pack/option_parsing.h"

namespace libshard::cli {
namespace {

struct BenchArgs {
  std::string dir;
  CacheArgs cache;
  bool shuffle = false;
  bool verify = true;
  std::string fields;
  uint32_t queue_depth = 64;
  uint32_t epochs = 1;
  std::string memory_budget = "2GiB";
  std::string read_size = "4MiB";
  std::string engine = "auto";
  std::string io_mode = "auto";
  uint64_t max_len = 0;
  uint32_t workers = 0;
  bool no_drop_caches = false;
  bool skip_raw = false;
};

// Drops the page cache so every measurement reads from the device. Returns what was done.
std::string DropCaches(bool allowed) {
  if (!allowed) return "page cache kept (--no-drop-caches)";
  if (::geteuid() != 0) return "page cache NOT dropped (not root): buffered figures may be cached";
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.flush();
  if (!f) return "page cache NOT dropped (/proc/sys/vm/drop_caches not writable)";
  return "page cache dropped before each measurement";
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int RunBench(const BenchArgs& a) {
  DatasetOptions opts;
  opts.caller = Caller::kCli;
  if (Status st = ApplyCacheOptions(a.cache, &opts); !st.ok())
    return UsageError("bench", st.message());
  auto opened = Dataset::Open(a.dir, opts);
  if (!opened.ok()) return Fail("bench", opened.status());
  std::shared_ptr<Dataset> ds = *opened;

  LoaderOptions o;
  o.order = a.shuffle ? Order::Shuffled() : Order::Unshuffled();
  o.verify_checksums = a.verify;
  o.fields = SplitCommas(a.fields);
  o.queue_depth = a.queue_depth;
  o.max_len = a.max_len;
  o.worker_threads = a.workers;
  o.slow_wait_warning_seconds = 60;
  auto budget = convert::ParseByteSize(a.memory_budget);
  if (!budget.ok()) return UsageError("bench", "--memory-budget: " + budget.status().message());
  auto read_size = convert::ParseByteSize(a.read_size);
  if (!read_size.ok()) return UsageError("bench", "--read-size: " + read_size.status().message());
  o.memory_budget = *budget;
  o.read_size = *read_size;
  auto engine = ParseIoEngineKind(a.engine);
  if (!engine.ok()) return UsageError("bench", "--engine: " + engine.status().message());
  o.engine = *engine;
  auto io_mode = ParseIoMode(a.io_mode);
  if (!io_mode.ok()) return UsageError("bench", "--io-mode: " + io_mode.status().message());
  o.io_mode = *io_mode;
  if (a.epochs == 0) return UsageError("bench", "--epochs must be >= 1");

  std::vector<std::string> files;
  for (const ShardInfo& s : ds->shards()) files.push_back(s.path);
  std::printf("dataset: %s: %llu samples, %zu shards, %s stored\n", ds->path().c_str(),
              static_cast<unsigned long long>(ds->size()), files.size(),
              convert::FormatBytes(ds->total_stored_bytes()).c_str());
  const bool drop = !a.no_drop_caches;

  // The device limit: the better of a fio-like read (QD32, 1 MiB) and a read with the loader's
  // own I/O shape (its queue depth and read size), so the loader is never compared with a
  // yardstick that leaves the device idle.
  double raw_gbps = 0;
  if (!a.skip_raw) {
    RawReadOptions shapes[2];
    shapes[1].queue_depth = o.queue_depth;
    shapes[1].block_size = o.read_size;
    for (const RawReadOptions& shape : shapes) {
      std::printf("%s\n", DropCaches(drop).c_str());
      auto raw = RawSequentialRead(files, shape);
      if (!raw.ok()) return Fail("bench", raw.status());
      raw_gbps = std::max(raw_gbps, raw->gbps());
      std::printf("raw sequential read (%s, %s, QD%u, %s): %.2f GB/s (%s in %s), %.4f CPU-s/GB\n",
                  raw->engine.c_str(), raw->direct_io ? "O_DIRECT" : "buffered",
                  shape.queue_depth, convert::FormatBytes(shape.block_size).c_str(), raw->gbps(),
                  convert::FormatBytes(raw->bytes).c_str(),
                  convert::FormatDuration(raw->seconds).c_str(),
                  raw->bytes ? raw->cpu_seconds / (static_cast<double>(raw->bytes) / 1e9) : 0.0);
    }
    std::printf("raw sequential read, best: %.2f GB/s (the device limit below)\n", raw_gbps);
  }

  auto created = Loader::Create(ds, o);
  if (!created.ok()) return Fail("bench", created.status());
  Loader& loader = **created;
  uint64_t total_read = 0, total_decoded = 0;
  double total_seconds = 0, total_cpu = 0;
  for (uint32_t epoch = 0; epoch < a.epochs; ++epoch) {
    const std::string cache = DropCaches(drop);
    if (epoch == 0 && a.skip_raw) std::printf("%s\n", cache.c_str());
    if (Status st = loader.SetEpoch(epoch); !st.ok()) return Fail("bench", st);
    const uint64_t read0 = loader.stats().bytes_read;
    const double cpu0 = ProcessCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t samples = 0, decoded = 0;
    while (true) {
      auto next = loader.Next();
      if (!next.ok()) return Fail("bench", next.status());
      if (!next->has_value()) break;
      samples += (*next)->samples.size();
      // The tensor bytes handed out (decoded: field codecs and zstd expand what was read).
      for (const Sample& sample : (*next)->samples)
        for (const TensorView& t : sample.tensors()) decoded += t.nbytes;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = ProcessCpuSeconds() - cpu0;
    const uint64_t bytes = loader.stats().bytes_read - read0;
    total_read += bytes;
    total_decoded += decoded;
    total_seconds += secs;
    total_cpu += cpu;
    const double gbps = secs > 0 ? static_cast<double>(bytes) / secs / 1e9 : 0;
    std::printf("loader epoch %u: %llu samples, %s in %s: %.2f GB/s, %.4f CPU-s/GB", epoch,
                static_cast<unsigned long long>(samples), convert::FormatBytes(bytes).c_str(),
                convert::FormatDuration(secs).c_str(), gbps,
                bytes ? cpu / (static_cast<double>(bytes) / 1e9) : 0.0);
    if (raw_gbps > 0) std::printf(", %.1f%% of raw", 100 * gbps / raw_gbps);
    std::printf("; decoded %s: %.2f GB/s, %.4f CPU-s per decoded GB\n",
                convert::FormatBytes(decoded).c_str(),
                secs > 0 ? static_cast<double>(decoded) / secs / 1e9 : 0.0,
                decoded ? cpu / (static_cast<double>(decoded) / 1e9) : 0.0);
  }
  const LoaderStats s = loader.stats();
  const double gbps = total_seconds > 0 ? static_cast<double>(total_read) / total_seconds / 1e9 : 0;
  std::printf("loader (%s, %s, qd %u, read %s, workers %u, shuffle %s, verify %s, fields %s): "
              "%.2f GB/s, %.4f CPU-s/GB",
              s.engine.c_str(), s.direct_io ? "O_DIRECT" : "buffered", o.queue_depth,
              convert::FormatBytes(o.read_size).c_str(), AutoWorkerThreads(*ds, o),
              a.shuffle ? "on" : "off",
              a.verify ? "on" : "off", a.fields.empty() ? "all" : a.fields.c_str(), gbps,
              total_read ? total_cpu / (static_cast<double>(total_read) / 1e9) : 0.0);
  if (raw_gbps > 0) std::printf(", %.1f%% of raw", 100 * gbps / raw_gbps);
  std::printf("\n");
  std::printf("decoded: %.2f GB/s, %.4f CPU-s per decoded GB (tensor bytes handed out)\n",
              total_seconds > 0 ? static_cast<double>(total_decoded) / total_seconds / 1e9 : 0.0,
              total_decoded ? total_cpu / (static_cast<double>(total_decoded) / 1e9) : 0.0);
  std::printf("arena peak %s of %s; %s%s%s%s%s\n", convert::FormatBytes(s.arena_peak).c_str(),
              convert::FormatBytes(s.arena_budget).c_str(), s.pin_status.c_str(),
              s.engine_status.empty() ? "" : "; ", s.engine_status.c_str(),
              s.io_status.empty() ? "" : "; ", s.io_status.c_str());
  return kExitOk;
}

}  // namespace

Command AddBenchCommand(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand(
      "bench", "Measure the streaming loader's read throughput and CPU cost against the raw "
               "sequential O_DIRECT read of the same shard files");
  c->add_option("DIR", args->dir,
                 "Dataset directory or object-store URL (s3://BUCKET/PREFIX, gs://BUCKET/PREFIX)")
      ->required();
  c->add_flag("--shuffle", args->shuffle, "Read in a shuffled order (default: dataset order)");
  c->add_flag("--verify,!--no-verify", args->verify,
              "Verify every sample's xxh3 checksum (default, as the loader does; --no-verify: "
              "serve stored bytes unchecked)");
  c->add_option("--fields", args->fields, "Comma-separated fields to read (default: all)");
  c->add_option("--max-len", args->max_len, "Read only the first N rows of the sequence axis");
  c->add_option("--queue-depth", args->queue_depth, "Reads in flight (default 64)");
  c->add_option("--epochs", args->epochs, "Epochs to read (default 1)");
  c->add_option("--memory-budget", args->memory_budget, "Loader arena size (default 2GiB)");
  c->add_option("--read-size", args->read_size, "Sub-read size for large samples (default 4MiB)");
  c->add_option("--engine", args->engine, "auto, uring or pread (default auto)");
  c->add_option("--io-mode", args->io_mode, "auto, direct or buffered (default auto)");
  c->add_option("--workers", args->workers, "Verification/decoding threads (default 0: one per core for a compressed dataset, else 1)");
  c->add_flag("--no-drop-caches", args->no_drop_caches, "Do not drop the page cache");
  c->add_flag("--skip-raw", args->skip_raw, "Skip the raw sequential read");
  AddCacheOptions(c, &args->cache);
  return {c, [args] { return RunBench(*args); }};
}

}  // namespace libshard::cli
