// ValidateLoaderOptions: bounds of the loader's numeric settings (loader.h).
#include <cmath>
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "libshard/loader.h"

namespace libshard {
namespace {

Status OutOfRange(const char* name, uint64_t value, uint64_t lo, uint64_t hi, const char* hint) {
  return Status::InvalidArgument(std::string(name) + " " + std::to_string(value) +
                                 " is out of range; use " + std::to_string(lo) + ".." +
                                 std::to_string(hi) + hint);
}

}  // namespace

uint32_t AutoWorkerThreads(const Dataset& dataset, const LoaderOptions& options) {
  if (options.worker_threads > 0) return options.worker_threads;
  // Stored compressed (field codecs, fp8, or zstd that paid off): decoding scales with the
  // threads.
  const std::vector<uint8_t> codecs = dataset.field_codecs();
  const bool coded = std::any_of(codecs.begin(), codecs.end(), [](uint8_t c) { return c != 0; });
  if (!coded && dataset.total_stored_bytes() >= dataset.total_raw_bytes()) return 1;
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min(cores, kAutoDecodeWorkers);
}

Status ValidateLoaderOptions(const LoaderOptions& o) {
  if (o.order < 1 || o.order > 2)
    return OutOfRange("order", o.order, 1, 2,
                      " (2: the default O(1) shuffle; 1: the order of libshard before versions)");
  if (o.resume && (o.resume->order < 1 || o.resume->order > 2))
    return OutOfRange("resume.order", o.resume->order, 1, 2,
                      " (the state was saved by a newer libshard; resume it with that version)");
  // Threads are started one per worker: an unbounded count exhausts the process's threads
  // (EAGAIN) seconds later instead of failing at once.
  if (o.worker_threads > kMaxLoaderWorkerThreads)
    return OutOfRange("worker_threads", o.worker_threads, 0, kMaxLoaderWorkerThreads,
                      " (checksum and decoding threads; 0 chooses from the dataset and the cores)");
  if (o.queue_depth < 1 || o.queue_depth > kMaxLoaderQueueDepth)
    return OutOfRange("queue_depth", o.queue_depth, 1, kMaxLoaderQueueDepth,
                      " (reads in flight; 64 is a good default)");
  if (o.memory_budget < kMinLoaderMemoryBudget || o.memory_budget > kMaxLoaderMemoryBudget)
    return OutOfRange("memory_budget", o.memory_budget, kMinLoaderMemoryBudget,
                      kMaxLoaderMemoryBudget, " bytes (a few GiB is typical)");
  if (o.read_size > kMaxLoaderReadSize)
    return OutOfRange("read_size", o.read_size, 0, kMaxLoaderReadSize,
                      " bytes (rounded up to 4096; 4 MiB is a good default)");
  if (o.batch_size > kMaxLoaderBatchSize)
    return OutOfRange("batch_size", o.batch_size, 0, kMaxLoaderBatchSize, " samples");
  if (o.token_budget > TokenBudget::kPadded)
    return OutOfRange("token_budget", static_cast<uint32_t>(o.token_budget), 0, 2,
                      " (auto, sum, padded)");
  if (o.oversized > OversizedSample::kError)
    return OutOfRange("oversized", static_cast<uint32_t>(o.oversized), 0, 1, " (batch, error)");
  if (o.collate > Collate::kPack)
    return OutOfRange("collate", static_cast<uint32_t>(o.collate), 0, 2, " (none, pad, pack)");
  if (o.bucket_window > kMaxLoaderBucketWindow)
    return OutOfRange("bucket_window", o.bucket_window, 0, kMaxLoaderBucketWindow,
                      " samples (a few thousand is typical)");
  if (o.bucket_window > 0 && o.max_tokens == 0 && o.batch_size <= 1)
    return Status::InvalidArgument(
        "bucket_window " + std::to_string(o.bucket_window) +
        " needs batches to group samples into: set max_tokens or batch_size > 1, or "
        "bucket_window 0");
  for (const auto& [name, value] : o.padding_values)
    if (std::isnan(value))
      return Status::InvalidArgument("padding_values['" + name + "'] is NaN; give a number");
  if (std::isnan(o.slow_wait_warning_seconds) || o.slow_wait_warning_seconds < 0)
    return Status::InvalidArgument("slow_wait_warning_seconds " +
                                   std::to_string(o.slow_wait_warning_seconds) +
                                   " must be a number >= 0 (0 turns the warning off)");
  if (std::isnan(o.stats_interval_seconds) || o.stats_interval_seconds < 0)
    return Status::InvalidArgument("stats_interval_seconds " +
                                   std::to_string(o.stats_interval_seconds) +
                                   " must be a number >= 0 (0 turns periodic stats off)");
  return Status::OK();
}

}  // namespace libshard
