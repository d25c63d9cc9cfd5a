// Prefaulter: faults memory ranges in on a background thread (madvise MADV_POPULATE_WRITE), so
// that the first touch of fresh anonymous memory - the kernel zeroing it - happens off the
// thread that will use it. The loader's arena (memory/arena.h) asks for each chunk when it is
// first used and for the next ones as its use nears them; the io_uring engine registers a chunk
// (which pins its pages, faulting and zeroing those not there yet on the submitting thread, which
// then cannot submit or reap for tens of milliseconds) only once it is populated.
//
// Best effort: a range that cannot be populated (old kernel, unmapped memory) is left alone;
// madvise never touches memory from user space, so no range can make this thread crash.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace libshard::memory {

class Prefaulter {
 public:
  Prefaulter();
  ~Prefaulter();  // stops after the range in progress and joins the thread
  Prefaulter(const Prefaulter&) = delete;
  Prefaulter& operator=(const Prefaulter&) = delete;

  // Queues [begin, begin + size) for populating, in request order. Thread-safe. `done`, when
  // given, is called once with whether the range was populated: on the prefaulter's thread, or
  // at once with false when the kernel cannot populate; never for a range still queued when the
  // prefaulter is destroyed. It must not call back into the prefaulter.
  void Request(void* begin, size_t size, std::function<void(bool populated)> done = {});
  // Blocks until every range requested so far is done (for tests).
  void Drain();
  // Ranges populated so far.
  uint64_t populated() const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Range {
    void* begin;
    size_t size;
    std::function<void(bool)> done;
  };
  std::deque<Range> queue_;
  bool busy_ = false;
  bool stop_ = false;
  bool unsupported_ = false;  // the kernel lacks MADV_POPULATE_WRITE: requests are dropped
  uint64_t populated_ = 0;
  std::thread thread_;  // last: starts after every other member is constructed
};

}  // namespace libshard::memory
