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

void Prefaulter::Request(void* begin, size_t size, std::function<void(bool)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!unsupported_ && !stop_) {
      queue_.push_back(Range{begin, size, std::move(done)});
      done = nullptr;
    }
  }
  if (done) {
    done(false);
  } else {
    cv_.notify_all();
  }
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
    Range range = std::move(queue_.front());
    queue_.pop_front();
    void* const begin = range.begin;
    const size_t size = range.size;
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
    if (range.done) range.done(ok);
    std::deque<Range> dropped;
    lock.lock();
    busy_ = false;
    if (ok) ++populated_;
    if (!supported) {
      unsupported_ = true;
      dropped.swap(queue_);
    }
    cv_.notify_all();
    if (!dropped.empty()) {
      lock.unlock();
      for (Range& r : dropped)
        if (r.done) r.done(false);
      lock.lock();
    }
  }
}

}  // namespace libshard::memory
