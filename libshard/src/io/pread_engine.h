// PreadEngine: IoEngine over a small pool of threads calling pread(2), for kernels or containers
// that refuse io_uring. Same completion semantics as UringEngine (see io_engine.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io/io_engine.h"

namespace libshard::io {

class PreadEngine final : public IoEngine {
 public:
  explicit PreadEngine(const EngineOptions& options);
  ~PreadEngine() override;
  PreadEngine(const PreadEngine&) = delete;
  PreadEngine& operator=(const PreadEngine&) = delete;

  std::string_view name() const override { return "pread"; }
  Status SetFiles(std::span<const int> fds, std::span<const std::string> paths) override;
  BufferRegistration RegisterBuffer(void*, size_t) override {
    return {BufferRegistration::State::kNotUsed};
  }
  uint32_t capacity() const override { return depth_; }
  uint32_t in_flight() const override;
  Status Submit(const ReadRequest& request) override;
  Status Flush() override;
  Status Reap(std::vector<ReadCompletion>* out, bool wait, int timeout_ms,
              uint32_t want = 1) override;
  void Wake() override;
  void CancelAll() override;

 private:
  void WorkerLoop();
  ReadCompletion Execute(const ReadRequest& r) const;

  const uint32_t depth_;
  std::vector<int> fds_;
  std::vector<std::string> paths_;
  std::vector<ReadRequest> staged_;  // submitted, not yet flushed (owner thread only)

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // workers wait for requests
  std::condition_variable done_cv_;   // the owner waits for completions or Wake()
  std::deque<ReadRequest> queue_;
  std::vector<ReadCompletion> done_;
  uint32_t in_flight_ = 0;            // queued + executing + done but not reaped
  uint32_t executing_ = 0;
  uint64_t generation_ = 0;           // bumped by CancelAll: results of older reads are dropped
  bool woken_ = false;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace libshard::io
