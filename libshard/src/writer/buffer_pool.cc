#include "writer/buffer_pool.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

namespace libshard::internal {

namespace {
constexpr uint64_t kAlignment = 4096;
constexpr uint64_t kMaxSize = uint64_t{1} << 62;
}  // namespace

uint64_t BufferPool::CapacityFor(uint64_t size) {
  if (size <= kAlignment) return kAlignment;
  size = std::min(size, kMaxSize);
  const uint64_t granule = std::max(kAlignment, std::bit_floor(size) / 16);
  return (size + granule - 1) / granule * granule;
}

std::shared_ptr<BufferPool> BufferPool::Create(uint64_t max_cached_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_cached_bytes));
}

BufferPool::~BufferPool() {
  for (auto& [capacity, p] : idle_) std::free(p);
}

std::shared_ptr<std::byte[]> BufferPool::Acquire(uint64_t size) {
  if (size > kMaxSize) return nullptr;
  const uint64_t capacity = CapacityFor(size);
  std::byte* p = nullptr;
  uint64_t got = capacity;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit, but never a buffer more than twice the need (it would pin memory for nothing).
    auto it = idle_.lower_bound(capacity);
    if (it != idle_.end() && it->first <= 2 * capacity) {
      got = it->first;
      p = it->second;
      cached_ -= got;
      idle_.erase(it);
    }
  }
  if (p == nullptr) {
    p = static_cast<std::byte*>(std::aligned_alloc(kAlignment, capacity));
    if (p == nullptr) return nullptr;
  }
  std::weak_ptr<BufferPool> pool = weak_from_this();
  return std::shared_ptr<std::byte[]>(p, [pool, got](std::byte* q) {
    if (auto owner = pool.lock()) {
      owner->Return(q, got);
    } else {
      std::free(q);
    }
  });
}

void BufferPool::Return(std::byte* p, uint64_t capacity) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + capacity <= max_cached_) {
      idle_.emplace(capacity, p);
      cached_ += capacity;
      return;
    }
  }
  std::free(p);
}

}  // namespace libshard::internal
