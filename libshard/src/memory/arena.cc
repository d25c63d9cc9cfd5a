#include "memory/arena.h"

#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <iterator>

#include <utility>

namespace libshard::memory {
namespace {

std::string Mib(uint64_t bytes) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

constexpr uint64_t kHugePage = uint64_t{2} << 20;

// Maps `budget` bytes of anonymous memory starting on a 2 MiB boundary and asks for transparent
// huge pages there. A huge page is one fault instead of 512 and one pinned page instead of 512
// when io_uring registers the buffer, so first touching the arena costs a fraction of the CPU
// (on kernels with THP in "madvise" mode, the default of most distributions, nothing happens
// without the advice). Where THP is off the advice fails harmlessly and 4 KiB pages are used.
Result<std::byte*> MapHugeAligned(uint64_t budget, bool populate) {
  const bool huge = budget >= kHugePage;
  const uint64_t reserve = huge ? budget + kHugePage : budget;
  void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return Status::FromErrno(errno, "arena: mmap of " + Mib(budget) +
                                        " failed; lower the loader memory_budget");
  }
  auto* base = static_cast<std::byte*>(p);
  if (huge) {
    // Trim the unaligned head and the tail so that exactly [aligned, aligned + budget) stays.
    const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
    const uint64_t head = (kHugePage - addr % kHugePage) % kHugePage;
    if (head > 0) ::munmap(base, head);
    const uint64_t tail = reserve - head - budget;
    if (tail > 0) ::munmap(base + head + budget, tail);
    base += head;
#ifdef MADV_HUGEPAGE
    (void)::madvise(base, budget, MADV_HUGEPAGE);
#endif
  }
  if (populate) {
#ifdef MADV_POPULATE_WRITE
    if (::madvise(base, budget, MADV_POPULATE_WRITE) == 0) return base;
#endif
    // Older kernels: touch one byte a page.
    for (uint64_t off = 0; off < budget; off += Arena::kAlignment) {
      reinterpret_cast<volatile unsigned char*>(base)[off] = 0;
    }
  }
  return base;
}

}  // namespace

Arena::Arena(std::byte* base, uint64_t budget, const ArenaOptions& options)
    : base_(base),
      budget_(budget),
      chunks_((budget + kChunkBytes - 1) / kChunkBytes),
      options_(options),
      chunk_state_(new std::atomic<uint8_t>[chunks_]),
      chunk_ready_(new std::atomic<uint8_t>[chunks_]) {
  // A populated mapping is all faulted in already: nothing to prefault.
  const uint8_t initial = options.populate ? kRequestedBit : 0;
  for (uint64_t c = 0; c < chunks_; ++c) {
    chunk_state_[c].store(initial, std::memory_order_relaxed);
    chunk_ready_[c].store(options.populate ? 1 : 0, std::memory_order_relaxed);
  }
  free_.emplace(0, budget);
}

Result<std::shared_ptr<Arena>> Arena::Create(uint64_t budget, const ArenaOptions& options) {
  if (budget == 0) return Status::InvalidArgument("arena: memory budget must be > 0");
  if (budget > (uint64_t{1} << 46)) {
    return Status::InvalidArgument("arena: memory budget " + std::to_string(budget) +
                                   " bytes is implausibly large; pass a budget in bytes");
  }
  budget = (budget + kAlignment - 1) / kAlignment * kAlignment;
  LIBSHARD_ASSIGN_OR_RETURN(std::byte* base, MapHugeAligned(budget, options.populate));
  return std::shared_ptr<Arena>(new Arena(base, budget, options));
}

Arena::~Arena() {
  // No slot is alive (each holds the arena), so nothing uses the memory: stop the prefaulter,
  // unregister the pinned chunks, then unmap.
  prefaulter_.reset();
  pin_.Reset();
  ::munmap(base_, budget_);
}

void Arena::Touch(uint64_t offset, uint64_t size, Placement placement) {
  const uint64_t end = offset + size;
  const uint64_t first = offset / kChunkBytes;
  const uint64_t last = (end - 1) / kChunkBytes;
  // How deep the arena's use reaches into chunk c with this slot, from the end slots of this
  // placement grow from. A chunk is faulted in as a whole (on the prefault thread, and then
  // registered with io_uring) once that passes kWholeChunkReach; a use that stays shallower -
  // a loader of tiny samples reuses a few pages of chunk 0 - is left to the kernel's faults and
  // plain reads, which cost nothing per byte it does not use.
  auto reach = [&](uint64_t c) {
    const uint64_t b = c * kChunkBytes;
    return placement == Placement::kLowest ? std::min(end, b + kChunkBytes) - b
                                           : b + kChunkBytes - std::max(offset, b);
  };
  auto state = [&](uint64_t c) { return chunk_state_[c].load(std::memory_order_acquire); };
  bool work = false;
  for (uint64_t c = first; c <= last && !work; ++c) {
    const uint8_t st = state(c);
    work = (st & kUsedBit) == 0 || ((st & kRequestedBit) == 0 && reach(c) >= kWholeChunkReach);
  }
  // The chunks that a use growing past this slot (either way: slots are placed from both ends)
  // reaches within about one more slot and half a chunk, faulted in ahead.
  const uint64_t ahead = kChunkBytes / 2 + size;
  const uint64_t next_first = end / kChunkBytes;
  const uint64_t next_last = std::min(end + ahead, budget_ - 1) / kChunkBytes;
  const uint64_t prev_first = offset > ahead ? (offset - ahead) / kChunkBytes : 0;
  auto untouched = [&](uint64_t c) { return c < chunks_ && state(c) == 0; };
  bool ahead_needed = false;
  if (options_.prefault_ahead) {
    for (uint64_t c = next_first; c <= next_last && !ahead_needed; ++c) ahead_needed = untouched(c);
    for (uint64_t c = prev_first; c < first && !ahead_needed; ++c) ahead_needed = untouched(c);
  }
  if (!work && !ahead_needed) return;
  std::lock_guard<std::mutex> lock(commit_mu_);
  for (uint64_t c = first; c <= last; ++c) UseChunkLocked(c, reach(c) >= kWholeChunkReach);
  if (ahead_needed) {
    for (uint64_t c = next_first; c <= next_last; ++c) PrefaultChunkLocked(c);
    for (uint64_t c = first; c-- > prev_first;) PrefaultChunkLocked(c);
  }
}

void Arena::UseChunkLocked(uint64_t chunk, bool whole) {
  uint8_t st = chunk_state_[chunk].load(std::memory_order_relaxed);
  if ((st & kUsedBit) == 0) {
    // Pinning faults in (and zeroes) the pages a prefault has not reached yet, here, before the
    // slot is handed out: every delivered tensor of a pinned arena is pinned.
    if (options_.pin && !pin_.given_up()) {
      const uint64_t begin = chunk * kChunkBytes;
      if (pin_.Pin(base_ + begin, std::min(kChunkBytes, budget_ - begin)))
        chunk_ready_[chunk].store(1, std::memory_order_release);
    }
    ++used_chunks_;
    st |= kUsedBit;
  }
  // Otherwise the chunk is faulted in on the prefaulter's thread once the use reaches deep into
  // it; the reads meanwhile fault in only the pages they write.
  if (whole && (st & kRequestedBit) == 0 &&
      chunk_ready_[chunk].load(std::memory_order_relaxed) == 0) {
    RequestPrefaultLocked(chunk);
    st |= kRequestedBit;
  }
  chunk_state_[chunk].store(st, std::memory_order_release);
}

void Arena::PrefaultChunkLocked(uint64_t chunk) {
  if (chunk >= chunks_ || chunk_state_[chunk].load(std::memory_order_relaxed) != 0) return;
  RequestPrefaultLocked(chunk);
  chunk_state_[chunk].store(kRequestedBit, std::memory_order_release);
}

void Arena::RequestPrefaultLocked(uint64_t chunk) {
  if (prefaulter_ == nullptr) prefaulter_ = std::make_unique<Prefaulter>();
  const uint64_t begin = chunk * kChunkBytes;
  // The callback runs on the prefaulter's thread (or here, at once, where the kernel cannot
  // populate); the prefaulter is destroyed first in ~Arena, so `this` outlives every call.
  prefaulter_->Request(base_ + begin, std::min(kChunkBytes, budget_ - begin), [this, chunk](bool) {
    chunk_ready_[chunk].store(1, std::memory_order_release);
  });
  ++prefault_requests_;
}

bool Arena::ChunkReady(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  if (b < base_ || b >= base_ + budget_) return true;
  return chunk_ready_[static_cast<uint64_t>(b - base_) / kChunkBytes].load(
             std::memory_order_acquire) != 0;
}

bool Arena::pinned() const {
  std::lock_guard<std::mutex> lock(commit_mu_);
  return pin_.pinned();
}

std::string Arena::pin_status() const {
  std::lock_guard<std::mutex> lock(commit_mu_);
  if (!options_.pin) return "not requested";
  if (pin_.ranges() > 0 && pin_.pinned()) {
    return pin_.status() + ", " + std::to_string(pin_.ranges()) + " of " +
           std::to_string(chunks_) + " chunks (each when first used)";
  }
  return pin_.status();
}

uint64_t Arena::used_chunks() const {
  std::lock_guard<std::mutex> lock(commit_mu_);
  return used_chunks_;
}

uint64_t Arena::prefault_requests() const {
  std::lock_guard<std::mutex> lock(commit_mu_);
  return prefault_requests_;
}

void Arena::DrainPrefaults() {
  Prefaulter* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(commit_mu_);
    p = prefaulter_.get();
  }
  if (p != nullptr) p->Drain();  // the prefaulter lives until the destructor
}

Status Arena::TooLarge(uint64_t bytes, uint64_t budget) {
  return Status::ResourceExhausted("needs " + std::to_string(bytes) + " bytes (" + Mib(bytes) +
                                   ") but the whole memory budget is " + std::to_string(budget) +
                                   " bytes (" + Mib(budget) + "); raise memory_budget");
}

bool Arena::AllocateLocked(uint64_t size, Placement placement, uint64_t* offset) {
  auto take = [&](std::map<uint64_t, uint64_t>::iterator it) {
    const uint64_t block = it->first;
    const uint64_t rest = it->second - size;
    free_.erase(it);
    if (placement == Placement::kLowest) {
      *offset = block;
      if (rest > 0) free_.emplace(block + size, rest);
    } else {  // the top of the block
      *offset = block + rest;
      if (rest > 0) free_.emplace(block, rest);
    }
    in_use_ += size;
    if (in_use_ > peak_) peak_ = in_use_;
    ++live_;
    return true;
  };
  if (placement == Placement::kLowest) {
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size) return take(it);
  } else {
    for (auto it = free_.rbegin(); it != free_.rend(); ++it)
      if (it->second >= size) return take(std::next(it).base());
  }
  return false;
}

Result<std::shared_ptr<std::byte>> Arena::TryAcquire(uint64_t bytes, Placement placement) {
  const uint64_t size = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (bytes > budget_ || size > budget_) return TooLarge(bytes, budget_);
  uint64_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status::Aborted("arena: stopped");
    if (!AllocateLocked(size, placement, &offset)) return std::shared_ptr<std::byte>();
  }
  Touch(offset, size, placement);
  std::shared_ptr<Arena> self = shared_from_this();
  return std::shared_ptr<std::byte>(base_ + offset, [self = std::move(self), offset, size](std::byte*) {
    self->Release(offset, size);
  });
}

Result<std::shared_ptr<std::byte>> Arena::Acquire(uint64_t bytes) {
  while (true) {
    LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<std::byte> slot, TryAcquire(bytes));
    if (slot != nullptr) return slot;
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_) return Status::Aborted("arena: stopped");
    const uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    // Re-check under the lock so a release between TryAcquire and here is not missed.
    uint64_t largest = 0;
    for (const auto& [off, len] : free_) largest = std::max(largest, len);
    if (largest >= size) continue;
    released_.wait(lock);
  }
}

void Arena::Release(uint64_t offset, uint64_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto next = free_.lower_bound(offset);
    uint64_t start = offset;
    uint64_t len = size;
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        start = prev->first;
        len += prev->second;
        free_.erase(prev);
      }
    }
    if (next != free_.end() && offset + size == next->first) {
      len += next->second;
      free_.erase(next);
    }
    free_.emplace(start, len);
    in_use_ -= size;
    --live_;
  }
  released_.notify_all();
  std::lock_guard<std::mutex> lock(callback_mu_);
  if (on_release_) on_release_();
}

void Arena::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  released_.notify_all();
}

void Arena::SetReleaseCallback(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(callback_mu_);
  on_release_ = std::move(callback);
}

uint64_t Arena::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}
uint64_t Arena::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}
uint64_t Arena::live_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}
uint64_t Arena::largest_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t largest = 0;
  for (const auto& [off, len] : free_) largest = std::max(largest, len);
  return largest;
}

}  // namespace libshard::memory
