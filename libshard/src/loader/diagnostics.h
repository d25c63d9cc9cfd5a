// Loader diagnostics: the statistics counters, the periodic stats line, and the warnings a
// waiting consumer gets (a slow wait, memory held by the consumer itself, skipped samples and
// batches). Time comes from a LoaderClock and lines go to a LogSink, both injectable, so that
// tests of the warnings run on a fake clock and read the lines from a recording sink; by
// default the clock is std::chrono::steady_clock and lines go to stderr.
//
// Thread-safety: every method may be called from any thread. The counters have their own lock,
// a leaf: nothing else is locked while it is held, and the sink is called without it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "libshard/loader.h"
#include "libshard/status.h"

namespace libshard {

class LoaderClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~LoaderClock() = default;
  virtual TimePoint Now() const = 0;
  // Blocks on `cv` until it is notified or `timeout` of this clock's time passed (spurious
  // returns allowed). `lock` is held on entry and on return.
  virtual void WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                       std::chrono::milliseconds timeout) const = 0;
};

// std::chrono::steady_clock and std::condition_variable::wait_for.
std::shared_ptr<const LoaderClock> SteadyLoaderClock();

inline double Seconds(LoaderClock::TimePoint::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Receives each log line, without a trailing newline. Called from the consumer's and the
// scheduler's threads; must be thread-safe.
using LogSink = std::function<void(const std::string& line)>;
// Writes each line and a newline to stderr.
LogSink StderrLogSink();

// What a Loader uses for time and logs; empty members take the defaults above.
struct DiagnosticsHooks {
  std::shared_ptr<const LoaderClock> clock;
  LogSink sink;
};

class LoaderDiagnostics {
 public:
  // `stats_interval_seconds` > 0: MaybePrintStats() prints a line at most that often.
  LoaderDiagnostics(DiagnosticsHooks hooks, double stats_interval_seconds);

  const LoaderClock& clock() const { return *clock_; }
  // Where warnings get the loader's whole stats (reads in flight, engine, arena). Set before
  // any other thread uses this object.
  void SetSnapshot(std::function<LoaderStats()> snapshot) { snapshot_ = std::move(snapshot); }

  // ---- Counters ----
  // The consumer entered Next(); the first call starts the clock of elapsed_seconds.
  void OnNext(LoaderClock::TimePoint now);
  void AddBytesRead(uint64_t n) { bytes_read_.fetch_add(n, std::memory_order_relaxed); }
  void OnChecksumFailure() { checksum_failures_.fetch_add(1, std::memory_order_relaxed); }
  void AddBytesDelivered(uint64_t n);
  void AddWait(double seconds);
  void OnBatchDelivered(uint64_t samples);
  // A delivered batch of `count` samples whose lengths sum to `tokens` and whose longest is
  // `longest` (LoaderStats::batch_positions, padding_positions).
  void OnBatchShape(uint64_t count, uint64_t longest, uint64_t tokens);
  // Fills the counters of `s` and what follows from them (elapsed, throughput, wait share).
  void Fill(LoaderStats* s) const;

  // ---- Lines ----
  // OnError::kSkip dropped sample `sample` for `error`.
  void OnSkipped(uint64_t sample, const Status& error);
  // OnError::kSkip: batch `batch` lost every sample; `sample` is repeated in its place.
  void OnRepeated(uint64_t batch, uint64_t sample);
  // OnError::kSkip: batch `batch` lost every sample and nothing can stand in for it.
  void OnBatchDropped(uint64_t batch);
  // Next() has waited `waited` seconds for batch `batch`: the reads in flight and the
  // throughput so far (from the snapshot).
  void WarnSlowWait(double waited, uint64_t batch) const;
  // Next() waits for memory that the consumer holds; `what` says how much and for which batch.
  void WarnHeldMemory(const std::string& what) const;
  // The periodic stats line, when the interval has passed since the last one (or since the
  // first Next()).
  void MaybePrintStats();

 private:
  std::shared_ptr<const LoaderClock> clock_;
  LogSink sink_;
  std::function<LoaderStats()> snapshot_;
  const double stats_interval_;

  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> checksum_failures_{0};
  mutable std::mutex mu_;  // guards what follows
  uint64_t samples_delivered_ = 0;
  uint64_t batches_delivered_ = 0;
  uint64_t bytes_delivered_ = 0;
  uint64_t samples_skipped_ = 0;
  uint64_t samples_repeated_ = 0;
  uint64_t batch_positions_ = 0;
  uint64_t padding_positions_ = 0;
  double wait_seconds_ = 0;
  std::optional<LoaderClock::TimePoint> first_next_;
  LoaderClock::TimePoint last_stats_print_;
};

// "12.3 MiB"
std::string Mib(uint64_t bytes);
// `v` with `digits` decimals.
std::string Fixed(double v, int digits);

}  // namespace libshard
