// Tests for memory::Prefaulter: requested ranges become resident, a range that cannot be populated
// is skipped without harm, and destruction with work queued returns.
#include "memory/prefaulter.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace libshard::memory {
namespace {

constexpr size_t kSize = size_t{8} << 20;

// Pages of [p, p + size) that are resident, per mincore(2).
size_t ResidentPages(void* p, size_t size) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  if (::mincore(p, size, vec.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

class Mapping {
 public:
  explicit Mapping(size_t size) : size_(size) {
    p_ = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    // 4 KiB pages only: with THP "always" a fault near a range's end could bring in a whole
    // 2 MiB page past it, and the residency checks below are exact.
    if (p_ != MAP_FAILED) (void)::madvise(p_, size, MADV_NOHUGEPAGE);
  }
  ~Mapping() {
    if (p_ != MAP_FAILED) ::munmap(p_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  void* get() const { return p_; }
  bool ok() const { return p_ != MAP_FAILED; }

 private:
  void* p_;
  size_t size_;
};

TEST(PrefaulterTest, RequestedRangesBecomeResident) {
  Mapping a(kSize), b(kSize);
  ASSERT_TRUE(a.ok() && b.ok());
  const size_t pages = kSize / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  ASSERT_EQ(ResidentPages(a.get(), kSize), 0u);  // fresh anonymous memory is not there yet
  Prefaulter prefaulter;
  prefaulter.Request(a.get(), kSize);
  prefaulter.Request(b.get(), kSize / 2);
  prefaulter.Drain();
#ifdef MADV_POPULATE_WRITE
  if (prefaulter.populated() == 0) GTEST_SKIP() << "the kernel lacks MADV_POPULATE_WRITE";
  EXPECT_EQ(prefaulter.populated(), 2u);
  EXPECT_EQ(ResidentPages(a.get(), kSize), pages);
  EXPECT_EQ(ResidentPages(b.get(), kSize / 2), pages / 2);
  EXPECT_EQ(ResidentPages(static_cast<std::byte*>(b.get()) + kSize / 2, kSize / 2), 0u);
#else
  GTEST_SKIP() << "built without MADV_POPULATE_WRITE";
#endif
  // Populated memory reads as zeros.
  const auto* bytes = static_cast<const unsigned char*>(a.get());
  for (size_t off = 0; off < kSize; off += 4096) ASSERT_EQ(bytes[off], 0u) << off;
}

TEST(PrefaulterTest, UnmappedRangeIsSkippedAndLaterRequestsStillRun) {
  Mapping gone(kSize), later(kSize);
  ASSERT_TRUE(gone.ok() && later.ok());
  void* hole = gone.get();
  Prefaulter prefaulter;  // first: its thread's stack must not be mapped into the hole
  ASSERT_EQ(::munmap(hole, kSize), 0);  // the destructor's munmap then fails harmlessly
  prefaulter.Request(hole, kSize);
  prefaulter.Request(later.get(), kSize);
  prefaulter.Drain();
#ifdef MADV_POPULATE_WRITE
  if (prefaulter.populated() == 0) GTEST_SKIP() << "the kernel lacks MADV_POPULATE_WRITE";
  EXPECT_EQ(prefaulter.populated(), 1u);
  const size_t pages = kSize / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(ResidentPages(later.get(), kSize), pages);
#endif
}

// Each range's `done` says whether it was populated (the arena marks a chunk ready for io_uring
// registration with it), once, by the time Drain returns.
TEST(PrefaulterTest, DoneReportsEachRange) {
  Mapping good(kSize), gone(kSize);
  ASSERT_TRUE(good.ok() && gone.ok());
  std::vector<int> good_calls, gone_calls;  // written on the prefaulter thread, read after Drain
  Prefaulter prefaulter;  // first: its thread's stack must not be mapped into the hole below
  ASSERT_EQ(::munmap(gone.get(), kSize), 0);
  prefaulter.Request(good.get(), kSize, [&](bool ok) { good_calls.push_back(ok); });
  prefaulter.Request(gone.get(), kSize, [&](bool ok) { gone_calls.push_back(ok); });
  prefaulter.Drain();
  ASSERT_EQ(good_calls.size(), 1u);
  ASSERT_EQ(gone_calls.size(), 1u);
  EXPECT_FALSE(gone_calls[0]);
#ifdef MADV_POPULATE_WRITE
  if (prefaulter.populated() == 0) GTEST_SKIP() << "the kernel lacks MADV_POPULATE_WRITE";
  EXPECT_TRUE(good_calls[0]);
#endif
}

TEST(PrefaulterTest, DestructionWithWorkQueuedReturns) {
  std::vector<std::unique_ptr<Mapping>> maps;
  for (int i = 0; i < 16; ++i) maps.push_back(std::make_unique<Mapping>(kSize));
  const auto start = std::chrono::steady_clock::now();
  {
    Prefaulter prefaulter;
    for (const auto& m : maps) prefaulter.Request(m->get(), kSize);
  }  // the queue is dropped; only the range in progress finishes
  // A liveness bound, not a speed check: normally milliseconds.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
}

}  // namespace
}  // namespace libshard::memory
