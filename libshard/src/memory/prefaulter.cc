#include "memory/prefaulter.h"

#include <errno.h>
#include <sys/mman.h>

namespace libshard::memory {

Prefaulter::Prefaulter() : thread_([this] { Run(); }) {}

Prefaulter::~Prefaulter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void Prefaulter::Request(void* begin, size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (unsupported_ || stop_) return;
    queue_.emplace_back(begin, size);
  }
  cv_.notify_all();
}

void Prefaulter::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return (queue_.empty() && !busy_) || stop_; });
}

uint64_t Prefaulter::populated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return populated_;
}

void Prefaulter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const auto [begin, size] = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    bool ok = false;
    bool supported = true;
#ifdef MADV_POPULATE_WRITE
    int rc;
    do {
      rc = ::madvise(begin, size, MADV_POPULATE_WRITE);
    } while (rc != 0 && errno == EINTR);
    ok = rc == 0;
    supported = ok || errno != EINVAL;
#else
    supported = false;
#endif
    lock.lock();
    busy_ = false;
    if (ok) ++populated_;
    if (!supported) {
      unsupported_ = true;
      queue_.clear();
    }
    cv_.notify_all();
  }
}

}  // namespace libshard::memory
