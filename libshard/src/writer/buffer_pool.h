// BufferPool: reuses the writer's 4 KiB-aligned sample buffers.
//
// A sample of an EAGLE-3 dump is 64-250 MB; allocating a fresh buffer per sample makes the
// kernel fault in and zero every page again (about 0.4 CPU-s per GB here), which was a tenth of
// `libshard pack`'s CPU time. Buffers handed out return to the pool when their last shared_ptr
// dies (also after the pool is gone: then they are freed). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace libshard::internal {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Keeps at most `max_cached_bytes` of idle buffers.
  static std::shared_ptr<BufferPool> Create(uint64_t max_cached_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `size` bytes (CapacityFor(size) of them), 4 KiB aligned, or nullptr
  // when memory is exhausted.
  std::shared_ptr<std::byte[]> Acquire(uint64_t size);

  // What Acquire(size) takes from memory: `size` rounded up to a sixteenth of its power of two
  // (at most 1/16 more, so buffers of nearby sizes are reused), at least 4 KiB. What a queue of
  // samples bounds (ParallelWriter): a 112-byte sample holds 4 KiB, not a whole granule.
  static uint64_t CapacityFor(uint64_t size);

 private:
  explicit BufferPool(uint64_t max_cached_bytes) : max_cached_(max_cached_bytes) {}
  void Return(std::byte* p, uint64_t capacity);

  std::mutex mu_;
  std::multimap<uint64_t, std::byte*> idle_;  // capacity -> buffer
  uint64_t cached_ = 0;
  const uint64_t max_cached_;
};

}  // namespace libshard::internal
