// ParallelWriter (libshard/parallel_writer.h).
#include "libshard/parallel_writer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <system_error>
#include <string>
#include <thread>
#include <utility>

#include "libshard/writer_config.h"
#include "writer/buffer_pool.h"

namespace libshard {
namespace {

uint64_t Aligned(uint64_t n) { return (n + 4095) / 4096 * 4096; }

// What a sample of `bytes` holds in memory while in flight: the writer's buffer for it
// (writer/buffer_pool.h rounds sizes up, to 4 KiB at least).
uint64_t Reservation(uint64_t bytes) { return internal::BufferPool::CapacityFor(bytes); }

// Runs a job so that nothing it throws escapes its thread (std::terminate otherwise).
Result<EncodedSample> RunGuarded(const ParallelWriter::Job& job, const Writer& writer) noexcept {
  try {
    return job(writer);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory while encoding a sample (std::bad_alloc)");
  } catch (const std::exception& e) {
    return Status::Internal(std::string("unexpected error while encoding a sample: ") + e.what());
  } catch (...) {
    return Status::Internal("unexpected error while encoding a sample");
  }
}

}  // namespace

struct ParallelWriter::State {
  struct Queued {
    uint64_t seq = 0;
    Job job;
  };
  struct Done {
    Result<EncodedSample> encoded = Status::Internal("unset");
  };

  mutable std::mutex mu;
  std::condition_variable work;   // `queue` gained a job, or stopping
  std::condition_variable ready;  // `done` gained a result, or stopping
  std::condition_variable space;  // bytes were freed, a job was committed, an error, or stopping
  std::deque<Queued> queue;
  std::map<uint64_t, Done> done;
  std::deque<uint64_t> reserved;    // per seq still in flight, indexed by seq - committed
  std::vector<uint64_t> released;
  uint64_t next_seq = 0;
  uint64_t committed = 0;
  uint64_t inflight_bytes = 0;
  double blocked_seconds = 0;
  Status error;
  bool job_failed = false;          // kStop: encode threads take no new job
  bool stopping = false;
  bool stopped = false;
  std::vector<std::thread> encoders;
  std::thread committer;
  // Serialises the Writer's appends and checkpoints: the committing thread's, and Checkpoint()'s
  // from the producer (so that samples_written() before an append is that sample's index).
  // Taken without `mu` held.
  std::mutex writer_mu;
  // The producers' turns (Submit, Flush, Checkpoint, Finish; the file comment): taken first,
  // before `mu`, and held while a Submit waits for the bound.
  std::mutex producer_mu;
  // Stop's: one Stop joins the threads, a concurrent one waits for it. Never taken with `mu`.
  std::mutex stop_mu;
};

Result<std::unique_ptr<ParallelWriter>> ParallelWriter::Start(std::unique_ptr<Writer> writer,
                                                              ParallelWriterOptions options) {
  if (writer == nullptr) return Status::InvalidArgument("ParallelWriter: no writer");
  LIBSHARD_RETURN_IF_ERROR(ValidateParallelism(options, [](std::string_view row) {
    return "ParallelWriter: " + SpellWriterOption(row, Caller::kCpp);
  }));
  if (options.max_inflight_samples == 0)
    return Status::InvalidArgument("ParallelWriter: max_inflight_samples must be > 0");
  if (options.in_flight_bytes == 0) options.in_flight_bytes = options.max_inflight_bytes;
  options.threads = AutomaticThreads(options.threads, WriteDriver::kGenerator);
  options.in_flight_bytes = AutomaticInFlightBytes(options.in_flight_bytes, options.threads, 0);
  auto p = std::make_unique<ParallelWriter>(Key(), std::move(writer), std::move(options));
  State& s = *p->state_;
  try {
    for (unsigned i = 0; i < p->options_.threads; ++i)
      s.encoders.emplace_back([raw = p.get()] { raw->EncodeLoop(); });
    if (p->options_.commit_thread)
      s.committer = std::thread([raw = p.get()] { raw->CommitLoop(); });
  } catch (const std::system_error& e) {
    p->Stop();
    return Status::ResourceExhausted(std::string("ParallelWriter: cannot start a thread: ") +
                                     e.what());
  }
  return p;
}

ParallelWriter::ParallelWriter(Key, std::unique_ptr<Writer> writer, ParallelWriterOptions options)
    : writer_(std::move(writer)), options_(std::move(options)), state_(std::make_unique<State>()) {}

ParallelWriter::~ParallelWriter() { Stop(); }

Result<uint64_t> ParallelWriter::Submit(Job job, uint64_t bytes) {
  State& s = *state_;
  bytes = Reservation(bytes);
  std::lock_guard turn(s.producer_mu);
  std::unique_lock lock(s.mu);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (!s.error.ok() || s.stopping) break;
    const uint64_t jobs = s.next_seq - s.committed;
    if (jobs == 0 || (jobs < options_.max_inflight_samples &&
                      s.inflight_bytes + bytes <= options_.in_flight_bytes))
      break;
    if (!options_.commit_thread && s.done.count(s.committed) != 0) {
      (void)CommitNext(lock);  // the caller commits: that frees the bound
      continue;
    }
    (options_.commit_thread ? s.space : s.ready).wait(lock);
  }
  s.blocked_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.error.ok()) return s.error;
  if (s.stopping) return Status::Aborted("the writer is stopped");
  const uint64_t seq = s.next_seq++;
  s.inflight_bytes += bytes;
  s.reserved.push_back(bytes);
  s.queue.push_back(State::Queued{seq, std::move(job)});
  s.work.notify_one();
  return seq;
}

Result<uint64_t> ParallelWriter::Submit(SampleInput sample, uint64_t bytes) {
  auto in = std::make_shared<SampleInput>(std::move(sample));
  return Submit([in](const Writer& w) { return w.Encode(*in); }, bytes);
}

void ParallelWriter::EncodeLoop() {
  State& s = *state_;
  for (;;) {
    State::Queued q;
    {
      std::unique_lock lock(s.mu);
      s.work.wait(lock, [&] { return s.stopping || s.job_failed || !s.queue.empty(); });
      if (s.stopping || s.job_failed) return;
      q = std::move(s.queue.front());
      s.queue.pop_front();
    }
    Result<EncodedSample> encoded = RunGuarded(q.job, *writer_);
    q.job = nullptr;  // nothing the job referenced is read past this point
    {
      std::lock_guard lock(s.mu);
      if (encoded.ok()) {
        // The bound covers the encoded buffer when it is larger than the input.
        uint64_t& r = s.reserved[q.seq - s.committed];
        const uint64_t held = Reservation(encoded->stored_size);
        if (held > r) {
          s.inflight_bytes += held - r;
          r = held;
        }
      } else if (options_.on_job_error == ParallelWriterOptions::OnJobError::kStop) {
        s.job_failed = true;
        s.work.notify_all();
      }
      s.released.push_back(q.seq);
      s.done.emplace(q.seq, State::Done{std::move(encoded)});
    }
    s.ready.notify_all();
  }
}

void ParallelWriter::CommitLoop() {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  for (;;) {
    // While no job is ready, the samples appended so far still get journaled once they have
    // waited the Writer's commit interval (WriterOptions::commit_interval_seconds), so that
    // followers see them and a crash keeps them even when the producer pauses.
    auto pred = [&] { return s.stopping || s.done.count(s.committed) != 0; };
    if (!pred()) {
      lock.unlock();
      Result<double> due = [&] {
        std::lock_guard writer_lock(s.writer_mu);
        return writer_->CheckpointIfDue();
      }();
      lock.lock();
      if (!due.ok()) {
        if (s.error.ok()) s.error = due.status();
        s.job_failed = true;
        s.work.notify_all();
        s.space.notify_all();
        return;
      }
      if (*due > 3600) {
        s.ready.wait(lock, pred);
      } else if (!s.ready.wait_for(lock, std::chrono::duration<double>(*due), pred)) {
        continue;  // a checkpoint is due: CheckpointIfDue makes it
      }
    }
    if (s.stopping) return;
    // The Writer refuses more after a failed append; nothing after an error is committed.
    if (!CommitNext(lock).ok()) return;
  }
}

Status ParallelWriter::CommitNext(std::unique_lock<std::mutex>& lock) {
  State& s = *state_;
  auto it = s.done.find(s.committed);
  const uint64_t seq = it->first;
  State::Done d = std::move(it->second);
  s.done.erase(it);
  lock.unlock();
  JobOutcome out;
  out.seq = seq;
  if (d.encoded.ok()) {
    std::lock_guard writer_lock(s.writer_mu);
    out.index = writer_->samples_written();
    out.raw_size = d.encoded->raw_size;
    out.stored_size = Aligned(d.encoded->stored_size);
    out.status = writer_->AppendEncoded(std::move(d.encoded).value());
    out.append_failed = !out.status.ok();
  } else {
    out.status = d.encoded.status();
  }
  d = State::Done{};  // the encoded buffer goes before the bound is freed
  Status verdict = out.status;
  if (options_.on_done) {
    Status hook = Status::OK();
    try {
      hook = options_.on_done(out);
    } catch (...) {
      hook = Status::Internal("ParallelWriter: on_done threw an exception");
    }
    const bool may_skip = !out.status.ok() && !out.append_failed &&
                          options_.on_job_error == ParallelWriterOptions::OnJobError::kReport;
    if (!hook.ok() || may_skip) verdict = hook;
  }
  lock.lock();
  s.inflight_bytes -= s.reserved.front();
  s.reserved.pop_front();
  ++s.committed;
  if (!verdict.ok() && s.error.ok()) {
    s.error = verdict;
    s.job_failed = true;  // encode threads stop too
    s.work.notify_all();
  }
  s.space.notify_all();
  return verdict;
}

std::vector<uint64_t> ParallelWriter::TakeReleased() {
  std::lock_guard lock(state_->mu);
  std::vector<uint64_t> out;
  out.swap(state_->released);
  return out;
}

Status ParallelWriter::Flush() {
  std::lock_guard turn(state_->producer_mu);
  return FlushInTurn();
}

Status ParallelWriter::FlushInTurn() {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  for (;;) {
    if (!s.error.ok()) return s.error;
    if (s.committed == s.next_seq) return Status::OK();
    if (s.stopping) return Status::Aborted("the writer is stopped");
    if (!options_.commit_thread && s.done.count(s.committed) != 0) {
      (void)CommitNext(lock);
      continue;
    }
    (options_.commit_thread ? s.space : s.ready).wait(lock);
  }
}

Status ParallelWriter::Checkpoint() {
  std::lock_guard turn(state_->producer_mu);
  LIBSHARD_RETURN_IF_ERROR(FlushInTurn());
  Status st = [&] {
    std::lock_guard writer_lock(state_->writer_mu);
    return writer_->Checkpoint();
  }();
  if (!st.ok()) {
    std::lock_guard lock(state_->mu);
    if (state_->error.ok()) state_->error = st;
    state_->job_failed = true;
    state_->work.notify_all();
  }
  return st;
}

Result<WriteSummary> ParallelWriter::Finish() {
  std::lock_guard turn(state_->producer_mu);
  LIBSHARD_RETURN_IF_ERROR(FlushInTurn());
  // A Stop() from another thread since: nothing more is committed (Stop's contract).
  if (stopped_or_stopping()) return Status::Aborted("the writer is stopped");
  Stop();
  return writer_->Finish();
}

bool ParallelWriter::stopped_or_stopping() const {
  std::lock_guard lock(state_->mu);
  return state_->stopping;
}

void ParallelWriter::Stop() {
  State& s = *state_;
  std::lock_guard stop_turn(s.stop_mu);
  {
    std::lock_guard lock(s.mu);
    if (s.stopped) return;
    s.stopping = true;
  }
  s.work.notify_all();
  s.ready.notify_all();
  s.space.notify_all();
  for (std::thread& t : s.encoders) t.join();
  if (s.committer.joinable()) s.committer.join();
  std::lock_guard lock(s.mu);
  s.stopped = true;
  s.queue.clear();  // jobs never run: destroyed here, after every thread has ended
  s.done.clear();
}

Status ParallelWriter::error() const {
  std::lock_guard lock(state_->mu);
  return state_->error;
}
uint64_t ParallelWriter::submitted() const {
  std::lock_guard lock(state_->mu);
  return state_->next_seq;
}
uint64_t ParallelWriter::committed() const {
  std::lock_guard lock(state_->mu);
  return state_->committed;
}
double ParallelWriter::blocked_seconds() const {
  std::lock_guard lock(state_->mu);
  return state_->blocked_seconds;
}

}  // namespace libshard
