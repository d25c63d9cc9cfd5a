// Arena: one mapping of a fixed byte budget from which the loader carves variable-size slots.
//
// Slots are 4 KiB aligned (O_DIRECT destinations) and handed out as shared pointers whose deleter
// returns the slot; a slot (and the whole mapping) outlives the Arena object's other owners for
// as long as any copy of the pointer lives. First-fit over a free list that coalesces neighbours.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "libshard/status.h"
#include "memory/cuda_host_registration.h"

namespace libshard::memory {

struct ArenaOptions {
  bool populate = false;  // MAP_POPULATE: fault every page in at creation
  bool pin = false;       // cudaHostRegister the mapping when a CUDA runtime is present
};

class Arena : public std::enable_shared_from_this<Arena> {
 public:
  static constexpr uint64_t kAlignment = 4096;

  // `budget` is rounded up to kAlignment. IoError when the mapping fails.
  static Result<std::shared_ptr<Arena>> Create(uint64_t budget, const ArenaOptions& options = {});
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::byte* base() const { return base_; }
  uint64_t budget() const { return budget_; }

  // Where TryAcquire places a slot: the lowest free address that fits (first fit), or the
  // highest. Alternating them keeps two large slots released in FIFO order at the two ends of
  // the arena, so two slots fit whenever their sizes sum to the budget (first fit alone can
  // leave the free space split around one held slot, with neither half large enough).
  enum class Placement { kLowest, kHighest };

  // A slot of at least `bytes` (rounded up to kAlignment), or nullptr when it does not fit now.
  // ResourceExhausted when `bytes` exceeds the whole budget (it could never fit).
  Result<std::shared_ptr<std::byte>> TryAcquire(uint64_t bytes,
                                                Placement placement = Placement::kLowest);
  // Like TryAcquire but waits until the slot fits; Aborted once Stop() was called.
  Result<std::shared_ptr<std::byte>> Acquire(uint64_t bytes);
  // Makes waiting and future Acquire() calls return Aborted. Idempotent.
  void Stop();

  // Called after every slot release, from the releasing thread, never concurrently with
  // SetReleaseCallback(); SetReleaseCallback(nullptr) guarantees no call is running afterwards.
  // The callback must not call back into the Arena.
  void SetReleaseCallback(std::function<void()> callback);

  uint64_t in_use() const;      // bytes in live slots (rounded sizes)
  uint64_t peak() const;        // highest in_use() so far
  uint64_t live_slots() const;
  // Largest slot that could be acquired right now.
  uint64_t largest_free() const;
  bool pinned() const { return pin_.pinned(); }
  const std::string& pin_status() const { return pin_.status(); }

 private:
  Arena(std::byte* base, uint64_t budget);
  void Release(uint64_t offset, uint64_t size);
  // Requires mu_. Returns the offset of a fitting free block (removed from the list) or nullopt.
  bool AllocateLocked(uint64_t size, Placement placement, uint64_t* offset);
  static Status TooLarge(uint64_t bytes, uint64_t budget);

  std::byte* const base_;
  const uint64_t budget_;
  CudaHostRegistration pin_;

  mutable std::mutex mu_;
  std::condition_variable released_;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, no two adjacent
  uint64_t in_use_ = 0;
  uint64_t peak_ = 0;
  uint64_t live_ = 0;
  bool stopped_ = false;

  std::mutex callback_mu_;
  std::function<void()> on_release_;
};

}  // namespace libshard::memory
