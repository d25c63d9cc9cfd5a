// Arena: one mapping of a fixed byte budget from which the loader carves variable-size slots.
//
// Slots are 4 KiB aligned (O_DIRECT destinations) and handed out as shared pointers whose deleter
// returns the slot; a slot (and the whole mapping) outlives the Arena object's other owners for
// as long as any copy of the pointer lives. First-fit over a free list that coalesces neighbours.
// Thread-safe.
//
// The whole budget is reserved at creation (one mmap, MAP_NORESERVE), but nothing of it is
// touched then: the memory is used chunk by chunk (kChunkBytes), and a chunk is pinned for CUDA
// (ArenaOptions::pin) when a slot first lands in it, on the acquiring thread, before the slot is
// handed out. The chunks a growing use of the arena will reach next are faulted in ahead on a
// background thread (memory::Prefaulter), so that neither the kernel's zeroing nor the pinning
// of fresh pages is paid by the thread that reads into them. Creating an arena of any budget
// thus costs the same, and an arena only ever holds (resident, pinned) what the loader used.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "libshard/status.h"
#include "memory/cuda_host_registration.h"
#include "memory/prefaulter.h"

namespace libshard::memory {

struct ArenaOptions {
  bool populate = false;  // fault every page in at creation (tests, benchmarks)
  // cudaHostRegister each chunk when a slot first lands in it, when a CUDA runtime is present
  // (the runtime is loaded on the first such chunk, not at creation).
  bool pin = false;
  // Fault in the chunks next to the used ones ahead of their use, on a background thread.
  bool prefault_ahead = true;
};

class Arena : public std::enable_shared_from_this<Arena> {
 public:
  static constexpr uint64_t kAlignment = 4096;
  // The unit in which memory is first touched and pinned; the io_uring engine registers the
  // same 64 MiB pieces (io/uring_engine.cc), so a chunk's pages are faulted in once.
  static constexpr uint64_t kChunkBytes = uint64_t{64} << 20;

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
  // Some chunk is pinned and no chunk failed to be ("pinned (cudaHostRegister)"), or why not.
  bool pinned() const;
  std::string pin_status() const;

  // Chunks of the budget, and those a slot has landed in so far (pinned where pinning works).
  uint64_t chunks() const { return chunks_; }
  uint64_t used_chunks() const;
  // Chunks handed to the background prefaulter so far (each when first used, or ahead of that).
  uint64_t prefault_requests() const;
  // Whether the chunk holding `p` is faulted in (prefaulted or pinned; or its prefault could not
  // run, so nothing better will come): registering it with io_uring then pins pages that are
  // there, at no fault cost to the registering thread. True outside the arena. Any thread.
  bool ChunkReady(const void* p) const;
  // Blocks until the background prefaulter is idle (tests).
  void DrainPrefaults();

 private:
  Arena(std::byte* base, uint64_t budget, const ArenaOptions& options);
  // Makes the chunks of [offset, offset + size) ready for use (pins them; faults in, in the
  // background, those the use reaches deep into), and asks for their neighbours ahead. Called
  // with a fresh slot, before it is handed out.
  void Touch(uint64_t offset, uint64_t size, Placement placement);
  // Requires commit_mu_. `whole`: fault the whole chunk in (background) unless done or asked.
  void UseChunkLocked(uint64_t chunk, bool whole);
  void PrefaultChunkLocked(uint64_t chunk);  // ahead of use: only an untouched chunk
  void RequestPrefaultLocked(uint64_t chunk);
  void Release(uint64_t offset, uint64_t size);
  // Requires mu_. Returns the offset of a fitting free block (removed from the list) or nullopt.
  bool AllocateLocked(uint64_t size, Placement placement, uint64_t* offset);
  static Status TooLarge(uint64_t bytes, uint64_t budget);

  std::byte* const base_;
  const uint64_t budget_;
  const uint64_t chunks_;
  const ArenaOptions options_;

  // Per chunk: kUsedBit (a slot landed in it), kRequestedBit (handed to the prefaulter); 0 is
  // untouched. Read without a lock on the acquire path (a slot in used chunks only costs these
  // loads); written under commit_mu_.
  enum ChunkBits : uint8_t { kUsedBit = 1, kRequestedBit = 2 };
  // How deep a use must reach into a chunk before the whole chunk is faulted in (Touch).
  static constexpr uint64_t kWholeChunkReach = kChunkBytes / 16;
  std::unique_ptr<std::atomic<uint8_t>[]> chunk_state_;
  std::unique_ptr<std::atomic<uint8_t>[]> chunk_ready_;  // ChunkReady, per chunk (0 or 1)
  mutable std::mutex commit_mu_;  // pinning and prefault requests, in chunk order per thread
  CudaHostPinning pin_;           // guarded by commit_mu_
  std::unique_ptr<Prefaulter> prefaulter_;  // made on the first request; guarded by commit_mu_
  uint64_t used_chunks_ = 0;        // guarded by commit_mu_
  uint64_t prefault_requests_ = 0;  // guarded by commit_mu_

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
