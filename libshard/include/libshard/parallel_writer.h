// ParallelWriter: a Writer (writer.h) behind N encode threads, an ordered commit and a bound on
// the bytes in flight. `libshard pack`, the Python libshard.Writer and C++ generators share it.
//
//   producer ──Submit(job, bytes)──▶ queue ──▶ N encode threads (job → Writer::Encode)
//                                                      │ results, any order
//                  commit thread ◀── in submission order ┘ → Writer::AppendEncoded → on_done
//
// Submit returns at once unless the jobs in flight (submitted, not yet committed) would pass
// `max_inflight_samples`, or what they reserve would pass `in_flight_bytes`; it then waits
// (one job is always admitted when nothing is in flight, so a sample larger than the bound still
// goes through). A job reserves what its sample holds in memory, not only its bytes: the sample
// buffer it will be encoded into (its size rounded up as the writer's buffers are, at least one
// 4 KiB block), growing to the encoded buffer when that is larger. So memory and address space
// stay flat for any sample size: tiny samples are held to the count, large ones to the bytes.
// Samples reach the dataset in submission order whatever order they are encoded in, so the
// output does not depend on the thread count.
//
// Errors: no exception leaves a thread (a job that throws becomes Internal, std::bad_alloc
// ResourceExhausted). The first error stops the pipeline: nothing more is encoded or appended,
// and the next Submit, Flush or Finish returns it. Without Finish nothing is committed: what the
// journal holds stays for Writer::Resume (writer.h).
//
// Thread-safety: every member may be called from any thread, also at once. Submit, Flush,
// Checkpoint and Finish take turns (a producer's Submit waiting for the bound holds the others
// back until it is admitted), so jobs submitted from several threads are each committed once, in
// the order their Submits took turns; after Finish or Stop a Submit is refused (Aborted). Stop
// may come from any thread at any time (a Submit waiting for the bound then returns Aborted) and
// returns once every thread of the writer has ended. on_done runs on the committing thread (the
// commit thread, or the producer's with commit_thread = false), one call at a time, in order;
// it must not call the ParallelWriter's Submit, Flush, Checkpoint, Finish or Stop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "libshard/option_table.h"
#include "libshard/status.h"
#include "libshard/writer.h"

namespace libshard {

// What became of one submitted job, reported to ParallelWriterOptions::on_done.
struct JobOutcome {
  uint64_t seq = 0;          // 0, 1, 2, ... in submission order
  // OK: appended as sample `index`. Otherwise the job's (encode) error, or, with `append_failed`,
  // the Writer's AppendEncoded error.
  Status status;
  bool append_failed = false;
  uint64_t index = 0;        // the sample's index in the dataset (when appended)
  uint64_t raw_size = 0;     // EncodedSample::raw_size (when appended)
  uint64_t stored_size = 0;  // bytes it takes in the shard, 4 KiB aligned (when appended)
};

// The writer configuration's parallelism (writer_config.h: `threads`, 0 for one per CPU, at
// most 4; `in_flight_bytes`, the bound of the file comment, 0 for 1 GiB, AutomaticInFlightBytes)
// and what only C++ callers give.
struct ParallelWriterOptions : ParallelismOptions {
  // The former name of in_flight_bytes, kept so that existing C++ callers build and behave as
  // before: Start takes it when in_flight_bytes is 0. New code sets in_flight_bytes.
  uint64_t max_inflight_bytes = 0;
  // Jobs in flight at most, > 0. Each also holds its job, its input's bookkeeping and an encoded
  // sample's (kilobytes): the count bounds those, where tiny samples reserve few bytes. 4096 keep
  // every encode thread busy (bench/writer_bench.py --tiny).
  uint64_t max_inflight_samples = 4096;
  // What a failed job does. kStop: the first failure in submission order stops the writer (and
  // encode threads take no new job from the moment any job failed). kReport: on_done decides:
  // OK leaves the sample out and goes on, an error stops the writer with that error.
  enum class OnJobError { kStop, kReport } on_job_error = OnJobError::kStop;
  // true: a commit thread of its own appends (Submit returns without committing; what a
  // generator that must not wait wants). false: no thread besides the encode threads; the
  // producer's Submit, Flush and Finish append what is ready, in order, on its thread, and
  // on_done runs there (pack: progress from the calling thread, one thread fewer).
  bool commit_thread = true;
  // Optional. Called by the committing thread for every job, in submission order, once it is
  // committed or failed. An error it returns stops the writer with that error (for a failed job
  // under kStop, or a failed append, a non-OK return replaces the error: callers add context).
  std::function<Status(const JobOutcome&)> on_done;

  // The parallelism of `config`, the rest default.
  static ParallelWriterOptions From(const WriterConfig& config);
};

class ParallelWriter {
  // Only Start makes writers (passkey: make_unique needs a public constructor).
  class Key {
    friend class ParallelWriter;
    Key() = default;
  };

 public:
  // Runs on an encode thread: produces the encoded sample, normally by calling writer.Encode
  // (thread-safe) on a SampleInput it builds (reading a source file, say). It is destroyed on
  // that thread before TakeReleased() lists its seq, so whatever it referenced is free after.
  using Job = std::function<Result<EncodedSample>(const Writer& writer)>;

  // Starts the threads (ValidateParallelism; automatic values resolved for
  // WriteDriver::kGenerator). InvalidArgument for threads over kMaxWriterThreads or
  // max_inflight_samples 0.
  static Result<std::unique_ptr<ParallelWriter>> Start(std::unique_ptr<Writer> writer,
                                                       ParallelWriterOptions options);
  ParallelWriter(Key, std::unique_ptr<Writer> writer, ParallelWriterOptions options);
  // Stops without committing (Stop()).
  ~ParallelWriter();
  ParallelWriter(const ParallelWriter&) = delete;
  ParallelWriter& operator=(const ParallelWriter&) = delete;

  // Queues `job`, whose input is `bytes` long (its reservation: see the file comment). Waits
  // while the bound is full. Returns its seq, or the error that stopped the writer.
  Result<uint64_t> Submit(Job job, uint64_t bytes);
  // Queues Writer::Encode(sample). The data pointers of `sample` must stay valid until
  // TakeReleased() lists the returned seq (or Stop() returned).
  Result<uint64_t> Submit(SampleInput sample, uint64_t bytes);

  // Seqs whose job has finished running since the last call (their inputs are no longer read).
  std::vector<uint64_t> TakeReleased();
  // Waits until every submitted job is committed or left out; the first error otherwise.
  [[nodiscard]] Status Flush();
  // Flush, then Writer::Checkpoint: every sample submitted so far is durable and journaled, so a
  // crash keeps it and followers of the write (FORMAT.md §6.1) see it. (The commit thread also
  // checkpoints on its own once a sample has waited the Writer's commit_interval_seconds.)
  [[nodiscard]] Status Checkpoint();
  // Flush, stop the threads, then Writer::Finish (the commit, writer.h).
  Result<WriteSummary> Finish();
  // Stops without committing: jobs not yet run are dropped. Joins every thread, so no job runs
  // after it returns. Idempotent.
  void Stop();

  Status error() const;
  uint64_t submitted() const;
  uint64_t committed() const;        // jobs committed or left out, in order
  double blocked_seconds() const;    // time Submit has waited for the bound
  // The Writer, for its schema() and existing_sources(); not for Append while running.
  const Writer& writer() const { return *writer_; }

 private:
  struct State;
  // Flush, the caller holding the producers' turn.
  Status FlushInTurn();
  bool stopped_or_stopping() const;
  void EncodeLoop();
  void CommitLoop();
  // Appends (or reports) the next job in order, whose result must be ready; `lock` holds the
  // state's mutex and is released while appending. Returns the verdict (non-OK: stopped).
  Status CommitNext(std::unique_lock<std::mutex>& lock);

  std::unique_ptr<Writer> writer_;
  const ParallelWriterOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace libshard
