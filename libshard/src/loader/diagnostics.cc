#include "loader/diagnostics.h"

#include <algorithm>

#include <cstdarg>
#include <cstdio>
#include <utility>

namespace libshard {
namespace {

class SteadyClock final : public LoaderClock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  void WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
               std::chrono::milliseconds timeout) const override {
    cv.wait_for(lock, timeout);
  }
};

// printf into a std::string.
__attribute__((format(printf, 1, 2))) std::string Format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

using ull = unsigned long long;

}  // namespace

std::shared_ptr<const LoaderClock> SteadyLoaderClock() {
  static const std::shared_ptr<const LoaderClock> clock = std::make_shared<SteadyClock>();
  return clock;
}

LogSink StderrLogSink() {
  return [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
}

std::string Mib(uint64_t bytes) { return Format("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

std::string Fixed(double v, int digits) { return Format("%.*f", digits, v); }

LoaderDiagnostics::LoaderDiagnostics(DiagnosticsHooks hooks, double stats_interval_seconds)
    : clock_(hooks.clock != nullptr ? std::move(hooks.clock) : SteadyLoaderClock()),
      sink_(hooks.sink ? std::move(hooks.sink) : StderrLogSink()),
      stats_interval_(stats_interval_seconds) {}

void LoaderDiagnostics::OnNext(LoaderClock::TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!first_next_) {
    first_next_ = now;
    last_stats_print_ = now;
  }
}

void LoaderDiagnostics::AddBytesDelivered(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_delivered_ += n;
}

void LoaderDiagnostics::AddWait(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  wait_seconds_ += seconds;
}

void LoaderDiagnostics::OnBatchDelivered(uint64_t samples) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_delivered_ += samples;
  ++batches_delivered_;
}

void LoaderDiagnostics::OnBatchShape(uint64_t count, uint64_t longest, uint64_t tokens) {
  const uint64_t positions = count * longest;  // bounded by what one batch holds in memory
  std::lock_guard<std::mutex> lock(mu_);
  batch_positions_ += positions;
  padding_positions_ += positions - std::min(positions, tokens);
}

void LoaderDiagnostics::Fill(LoaderStats* s) const {
  const LoaderClock::TimePoint now = clock_->Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    s->samples_delivered = samples_delivered_;
    s->batches_delivered = batches_delivered_;
    s->bytes_delivered = bytes_delivered_;
    s->elapsed_seconds = first_next_ ? Seconds(now - *first_next_) : 0;
    s->wait_seconds = wait_seconds_;
    s->samples_skipped = samples_skipped_;
    s->samples_repeated = samples_repeated_;
    s->batch_positions = batch_positions_;
    s->padding_positions = padding_positions_;
  }
  s->padding_share =
      s->batch_positions > 0 ? static_cast<double>(s->padding_positions) / s->batch_positions : 0;
  s->bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s->checksum_failures = checksum_failures_.load(std::memory_order_relaxed);
  s->throughput_gbps = s->elapsed_seconds > 0 ? s->bytes_read / s->elapsed_seconds / 1e9 : 0;
  s->wait_share = s->elapsed_seconds > 0 ? s->wait_seconds / s->elapsed_seconds : 0;
}

void LoaderDiagnostics::OnSkipped(uint64_t sample, const Status& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++samples_skipped_;
  }
  sink_(Format("libshard: skipping sample %llu: %s", static_cast<ull>(sample),
               error.ToString().c_str()));
}

void LoaderDiagnostics::OnRepeated(uint64_t batch, uint64_t sample) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++samples_repeated_;
  }
  sink_(Format("libshard: batch %llu lost every sample; sample %llu is repeated in its place so "
               "this rank keeps its step count",
               static_cast<ull>(batch), static_cast<ull>(sample)));
}

void LoaderDiagnostics::OnBatchDropped(uint64_t batch) {
  sink_(Format("libshard: batch %llu lost every sample and no earlier sample can stand in for "
               "it; this rank delivers one batch fewer this epoch",
               static_cast<ull>(batch)));
}

void LoaderDiagnostics::WarnSlowWait(double waited, uint64_t batch) const {
  const LoaderStats s = snapshot_();
  std::string reads;
  for (const InflightRead& r : s.inflight) {
    reads += (reads.empty() ? "" : "; ") + r.file + " offset " + std::to_string(r.offset) +
             " (" + Mib(r.length) + ", sample " + std::to_string(r.sample) + ", age " +
             Fixed(r.age_seconds, 1) + " s)";
  }
  sink_(Format("libshard: Next() has waited %.1f s for batch %llu; %llu reads in flight%s%s; "
               "throughput so far %.2f GB/s (%s, %s)",
               waited, static_cast<ull>(batch), static_cast<ull>(s.reads_in_flight),
               reads.empty() ? "" : ": ", reads.c_str(), s.throughput_gbps, s.engine.c_str(),
               s.direct_io ? "O_DIRECT" : "buffered"));
}

void LoaderDiagnostics::WarnHeldMemory(const std::string& what) const {
  sink_("libshard: loader waiting for memory: " + what +
        "; drop references to samples you no longer need or raise memory_budget");
}

void LoaderDiagnostics::MaybePrintStats() {
  if (stats_interval_ <= 0) return;
  const LoaderClock::TimePoint now = clock_->Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_next_ || Seconds(now - last_stats_print_) < stats_interval_) return;
    last_stats_print_ = now;
  }
  const LoaderStats s = snapshot_();
  sink_(Format("libshard: stats: %llu samples, %.2f GB read, %.2f GB/s, consumer waited %.1f s "
               "(%.0f%%), %llu reads in flight (oldest %.2f s), arena %s of %s (peak %s), %s %s, "
               "%s, %llu checksum failures",
               static_cast<ull>(s.samples_delivered), s.bytes_read / 1e9, s.throughput_gbps,
               s.wait_seconds, 100 * s.wait_share, static_cast<ull>(s.reads_in_flight),
               s.oldest_read_age_seconds, Mib(s.arena_in_use).c_str(),
               Mib(s.arena_budget).c_str(), Mib(s.arena_peak).c_str(), s.engine.c_str(),
               s.direct_io ? "O_DIRECT" : "buffered", s.pinned ? "pinned" : "not pinned",
               static_cast<ull>(s.checksum_failures)));
}

}  // namespace libshard
