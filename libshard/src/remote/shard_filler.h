// ShardFiller: what a reader of a remote dataset's shard files (the loader) needs from the
// node-local cache (docs/CACHE.md). Implemented by remote/remote_dataset.cc.
#pragma once

#include <cstdint>

#include "libshard/dataset.h"
#include "libshard/status.h"

namespace libshard {

class ShardFiller {
 public:
  virtual ~ShardFiller() = default;
  // Returns once bytes [offset, offset + length) of shard `shard` are present in its cache file
  // (fetched, written in full, synced and recorded; docs/CACHE.md), fetching the missing blocks
  // first. The error names the URL, the block and the HTTP status. Thread-safe.
  [[nodiscard]] virtual Status Ensure(uint32_t shard, uint64_t offset, uint64_t length) = 0;
  // Ensure without the wait: queues the missing blocks of the range at the front and returns
  // whether all are present now (false: ask again later), or the error of a failed block.
  virtual Result<bool> Request(uint32_t shard, uint64_t offset, uint64_t length) = 0;
  // Queues the missing blocks of that range behind the ones queued before (read-ahead in the
  // order the reader will read). Never blocks; a no-op while the queue is full (see Hungry).
  virtual void Prefetch(uint32_t shard, uint64_t offset, uint64_t length) = 0;
  // Whether the read-ahead queue has room for more.
  virtual bool Hungry() const = 0;
};

}  // namespace libshard
