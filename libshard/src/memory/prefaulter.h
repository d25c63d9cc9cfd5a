// Prefaulter: faults memory ranges in on a background thread (madvise MADV_POPULATE_WRITE), so
// that the first touch of fresh anonymous memory - the kernel zeroing it - happens off the
// thread that will use it. The loader hands Request to the io_uring engine
// (io::EngineOptions::prefault), which asks for the arena chunks it will register next:
// registering a chunk pins its pages, and pinning pages that are not there yet faults and zeroes
// them on the submitting thread, which then cannot submit or reap for tens of milliseconds.
//
// Best effort: a range that cannot be populated (old kernel, unmapped memory) is left alone;
// madvise never touches memory from user space, so no range can make this thread crash.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace libshard::memory {

class Prefaulter {
 public:
  Prefaulter();
  ~Prefaulter();  // stops after the range in progress and joins the thread
  Prefaulter(const Prefaulter&) = delete;
  Prefaulter& operator=(const Prefaulter&) = delete;

  // Queues [begin, begin + size) for populating, in request order. Thread-safe.
  void Request(void* begin, size_t size);
  // Blocks until every range requested so far is done (for tests).
  void Drain();
  // Ranges populated so far.
  uint64_t populated() const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<void*, size_t>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  bool unsupported_ = false;  // the kernel lacks MADV_POPULATE_WRITE: requests are dropped
  uint64_t populated_ = 0;
  std::thread thread_;  // last: starts after every other member is constructed
};

}  // namespace libshard::memory
