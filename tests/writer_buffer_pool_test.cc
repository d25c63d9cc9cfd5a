// BufferPool: aligned buffers, reuse after release, the idle-bytes cap, and buffers that outlive
// their pool.
#include "writer/buffer_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace libshard::internal {
namespace {

TEST(BufferPoolTest, BuffersAreAlignedAndReusedAfterRelease) {
  auto pool = BufferPool::Create(uint64_t{64} << 20);
  std::byte* first = nullptr;
  {
    auto a = pool->Acquire(3 << 20);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 4096, 0u);
    std::memset(a.get(), 0xab, 3 << 20);  // the whole requested size is writable
    first = a.get();
    auto b = pool->Acquire(3 << 20);  // while `a` lives, a different buffer
    ASSERT_NE(b, nullptr);
    EXPECT_NE(b.get(), first);
  }
  // Both went back to the pool; two acquisitions in the same 1 MiB granule get them again.
  auto c = pool->Acquire((3 << 20) - 100);
  auto d = pool->Acquire(3 << 20);
  EXPECT_TRUE(c.get() == first || d.get() == first) << "a released buffer was not reused";
}

TEST(BufferPoolTest, NeverHandsOutAFarLargerBuffer) {
  auto pool = BufferPool::Create(uint64_t{64} << 20);
  std::byte* big = nullptr;
  {
    auto a = pool->Acquire(32 << 20);
    big = a.get();
  }
  auto small = pool->Acquire(1 << 20);  // a 32 MiB idle buffer would pin 32x the need
  EXPECT_NE(small.get(), big);
}

TEST(BufferPoolTest, IdleBytesAreCapped) {
  auto pool = BufferPool::Create(uint64_t{2} << 20);  // room for two 1 MiB buffers
  std::byte* kept[3];
  {
    auto a = pool->Acquire(1 << 20), b = pool->Acquire(1 << 20), c = pool->Acquire(1 << 20);
    kept[0] = a.get(), kept[1] = b.get(), kept[2] = c.get();
  }
  // Only two went back to the pool; the third was freed. Three new acquisitions can reuse at
  // most two of the old addresses (a fresh allocation may land anywhere, so only count).
  auto x = pool->Acquire(1 << 20), y = pool->Acquire(1 << 20);
  int reused = 0;
  for (std::byte* p : kept) reused += (x.get() == p) + (y.get() == p);
  EXPECT_EQ(reused, 2);
}

// A buffer takes its size rounded up by at most a sixteenth (4 KiB at least): a tiny sample holds
// one 4 KiB block, not a large granule, and what a queue bounds (ParallelWriter) is what it holds.
TEST(BufferPoolTest, CapacityIsTheSizeRoundedUpByASixteenthAtMost) {
  EXPECT_EQ(BufferPool::CapacityFor(0), 4096u);
  EXPECT_EQ(BufferPool::CapacityFor(112), 4096u);
  EXPECT_EQ(BufferPool::CapacityFor(4096), 4096u);
  EXPECT_EQ(BufferPool::CapacityFor(4097), 8192u);
  EXPECT_EQ(BufferPool::CapacityFor(3 << 20), uint64_t{3} << 20);
  EXPECT_EQ(BufferPool::CapacityFor((uint64_t{64} << 20) + 1), (uint64_t{68} << 20));
  for (uint64_t size = 1; size < (uint64_t{1} << 40); size = size * 3 + 7) {
    const uint64_t c = BufferPool::CapacityFor(size);
    EXPECT_GE(c, size);
    EXPECT_EQ(c % 4096, 0u);
    EXPECT_LE(c, std::max<uint64_t>(4096, size + size / 16 + 4095)) << size;
  }
}

TEST(BufferPoolTest, BufferOutlivesItsPool) {
  std::shared_ptr<std::byte[]> survivor;
  {
    auto pool = BufferPool::Create(uint64_t{8} << 20);
    survivor = pool->Acquire(4096);
  }
  ASSERT_NE(survivor, nullptr);
  std::memset(survivor.get(), 1, 4096);  // still valid; freed (not returned) on release (ASan)
  survivor.reset();
}

}  // namespace
}  // namespace libshard::internal
