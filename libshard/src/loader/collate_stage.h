// CollateStage: the last stage of the StreamingLoader when LoaderOptions::collate is set. It takes
// the batch the consumer window delivered (zero-copy Samples in read-arena slots), plans its
// layout (loader/collate.h), acquires ONE region of the batch arena for it, copies the samples
// there and drops them, so their read-arena slots go back to the read scheduler at once.
//
// Memory: the batch arena is separate from the read arena (StreamingLoader::Init carves it out
// of memory_budget: 1/4, or up to 1/2 when two of the largest batches need it), so a read arena full of read-ahead can never keep the consumer from a region
// and a consumer holding regions can never keep reads from slots: no wait of one on the other.
// Only the consumer's own batches (and the Python layer's deferred CUDA releases) hold regions;
// when none is free the stage waits for a release, warns after 1 s, and returns
// ResourceExhausted once nothing was released for max(1, 2 x slow_wait_warning_seconds). A batch
// that can never fit (larger than the whole batch arena) is ResourceExhausted at once. After
// such an error the batch is kept and the next call delivers it (no batch is lost).
//
// Thread-safety: Assemble() and Drop() are called by the consumer thread; Wake() from any.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "libshard/loader.h"
#include "loader/collate.h"
#include "loader/diagnostics.h"
#include "memory/arena.h"

namespace libshard {

class CollateStage {
 public:
  // `arena` is the batch arena; its release callback must call Wake(). `stopped` is the loader's
  // stop flag. Every pointer must outlive this object.
  CollateStage(Collator collator, std::shared_ptr<memory::Arena> arena,
               const LoaderOptions& options, LoaderDiagnostics* diagnostics,
               const std::atomic<bool>* stopped);

  // Whether a batch kept after an error waits for the next Assemble(std::nullopt).
  bool has_pending() const { return pending_.has_value(); }
  // Collates `batch` (or, when nullopt, the batch kept after the last error). On success the
  // returned Batch has `collated` set and no samples.
  Result<Batch> Assemble(std::optional<Batch> batch);
  // Forgets a kept batch (a new epoch).
  void Drop() { pending_.reset(); }
  // A region was released, or the loader stops.
  void Wake();

  const memory::Arena& arena() const { return *arena_; }

 private:
  double HeldMemoryTimeout() const;
  // A region of `bytes`, waiting for the consumer to release one.
  Result<std::shared_ptr<std::byte>> AcquireRegion(uint64_t bytes, uint64_t samples);

  const Collator collator_;
  const std::shared_ptr<memory::Arena> arena_;
  const LoaderOptions& options_;
  LoaderDiagnostics* const diagnostics_;
  const std::atomic<bool>* const stopped_;
  std::optional<Batch> pending_;
  bool high_end_ = false;  // where the next region goes (Arena::Placement), alternating

  std::mutex mu_;
  std::condition_variable released_;
};

}  // namespace libshard
