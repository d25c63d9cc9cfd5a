// StreamingReadAhead: the ReadAhead implementation (libshard/read_ahead.h). The Loader's engine
// (the read scheduler, the arena, the item queue; loader/read_scheduler.h) walks the announced
// order (loader/announced_steps.h) and fills items; Get() takes the item of the entry it finds,
// out of the queue's middle where needed, by the rule of read_ahead.h. Everything shared is
// guarded by ItemQueue::mu, as in the StreamingLoader.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libshard/read_ahead.h"
#include "loader/announced_steps.h"
#include "loader/diagnostics.h"
#include "loader/item_queue.h"
#include "loader/read_scheduler.h"
#include "memory/arena.h"

namespace libshard {

class StreamingReadAhead final : public ReadAhead {
 public:
  // `hooks`: the clock and log sink (tests); defaults when empty.
  static Result<std::unique_ptr<ReadAhead>> Make(std::shared_ptr<const Dataset> dataset,
                                                 const LoaderOptions& options,
                                                 DiagnosticsHooks hooks = {});
  ~StreamingReadAhead() override;

  Status Announce(std::span<const uint64_t> indices) override;
  Result<Sample> Get(uint64_t index) override;
  ReadAheadStats stats() const override;
  void Stop() override;

 private:
  StreamingReadAhead(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                     DiagnosticsHooks hooks);
  Status Init();
  // Sample `index` read synchronously (Dataset::Read): a miss.
  Result<Sample> Miss(uint64_t index);
  // Requires queue_.mu. The item of entry `pos` in the queue (items are in step order), or
  // the queue's end.
  std::deque<std::unique_ptr<Item>>::iterator FindItem(uint64_t pos);
  // Requires queue_.mu. Removes the ready items of passed-over entries: those more than
  // kReadAheadReorderWindow positions before the front, or (`all`) every one. They go to
  // `drop`, to be destroyed once the lock is released. Whether any was removed.
  bool EvictLocked(bool all, std::vector<std::unique_ptr<Item>>* drop);
  // Requires queue_.mu. Takes `it` out of the queue.
  std::unique_ptr<Item> RemoveLocked(std::deque<std::unique_ptr<Item>>::iterator it);

  const std::shared_ptr<const Dataset> dataset_;
  const LoaderOptions options_;
  LoaderDiagnostics diagnostics_;
  // Destroyed in reverse order: the scheduler before the arena and the queue it uses.
  std::shared_ptr<memory::Arena> arena_;
  ItemQueue queue_;
  std::shared_ptr<AnnouncedSteps> steps_;  // queue_.steps; mutated under queue_.mu
  std::unique_ptr<ReadScheduler> scheduler_;

  // Guarded by queue_.mu.
  uint32_t waiters_ = 0;  // Gets waiting for an item
  uint64_t hits_ = 0;
  uint64_t waits_ = 0;
  uint64_t misses_ = 0;
  uint64_t evicted_ = 0;
  uint64_t bytes_served_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace libshard
