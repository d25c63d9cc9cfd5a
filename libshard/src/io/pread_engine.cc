#include "io/pread_engine.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace libshard::io {

PreadEngine::PreadEngine(const EngineOptions& options)
    : depth_(std::clamp<uint32_t>(options.queue_depth, 1, 4096)) {
  const uint32_t n = std::clamp<uint32_t>(options.threads, 1, depth_);
  threads_.reserve(n);
  for (uint32_t i = 0; i < n; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

PreadEngine::~PreadEngine() {
  CancelAll();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Status PreadEngine::SetFiles(std::span<const int> fds, std::span<const std::string> paths) {
  fds_.assign(fds.begin(), fds.end());
  paths_.assign(paths.begin(), paths.end());
  paths_.resize(fds_.size());
  return Status::OK();
}

uint32_t PreadEngine::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_ + static_cast<uint32_t>(staged_.size());
}

Status PreadEngine::Submit(const ReadRequest& request) {
  if (request.file >= fds_.size()) {
    return Status::InvalidArgument("pread: read names file " + std::to_string(request.file) +
                                   " but only " + std::to_string(fds_.size()) + " are set");
  }
  staged_.push_back(request);
  return Status::OK();
}

Status PreadEngine::Flush() {
  if (staged_.empty()) return Status::OK();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const ReadRequest& r : staged_) queue_.push_back(r);
    in_flight_ += static_cast<uint32_t>(staged_.size());
  }
  staged_.clear();
  work_cv_.notify_all();
  return Status::OK();
}

ReadCompletion PreadEngine::Execute(const ReadRequest& r) const {
  ReadCompletion c{r.tag, 0, Status::OK()};
  const int fd = fds_[r.file];
  while (c.bytes < r.length) {
    const ssize_t n = ::pread(fd, r.dst + c.bytes, r.length - c.bytes,
                              static_cast<off_t>(r.offset + c.bytes));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      c.status = Status::FromErrno(errno, "read of " + std::to_string(r.length - c.bytes) +
                                              " bytes at " + paths_[r.file] + " offset " +
                                              std::to_string(r.offset + c.bytes) + " failed");
      break;
    }
    if (n == 0) break;  // EOF
    c.bytes += static_cast<uint64_t>(n);
  }
  return c;
}

void PreadEngine::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and nothing left
    const ReadRequest r = queue_.front();
    queue_.pop_front();
    const uint64_t generation = generation_;
    ++executing_;
    lock.unlock();
    ReadCompletion c = Execute(r);
    lock.lock();
    --executing_;
    if (generation == generation_) {
      done_.push_back(std::move(c));
    } else {
      --in_flight_;  // cancelled while executing: nobody wants the result
    }
    done_cv_.notify_all();
  }
}

Status PreadEngine::Reap(std::vector<ReadCompletion>* out, bool wait, int timeout_ms,
                         uint32_t want) {
  std::unique_lock<std::mutex> lock(mu_);
  const size_t enough = std::max<size_t>(1, std::min<size_t>(want, in_flight_));
  auto ready = [this, enough] { return done_.size() >= enough || woken_; };
  if (wait && done_.empty() && !woken_) {
    if (timeout_ms < 0) {
      done_cv_.wait(lock, ready);
    } else {
      done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    }
  }
  woken_ = false;
  in_flight_ -= static_cast<uint32_t>(done_.size());
  for (ReadCompletion& c : done_) out->push_back(std::move(c));
  done_.clear();
  return Status::OK();
}

void PreadEngine::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  done_cv_.notify_all();
}

void PreadEngine::CancelAll() {
  staged_.clear();
  std::unique_lock<std::mutex> lock(mu_);
  in_flight_ -= static_cast<uint32_t>(queue_.size() + done_.size());
  queue_.clear();
  done_.clear();
  ++generation_;
  // Reads already inside pread(2) own their destination until they return.
  done_cv_.wait(lock, [this] { return executing_ == 0; });
}

}  // namespace libshard::io
