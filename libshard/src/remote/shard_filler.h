// ShardFiller: what a reader of a remote dataset's shard files (the loader) needs from the
// node-local cache (docs/CACHE.md). Implemented by remote/remote_dataset.cc.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "libshard/dataset.h"
#include "libshard/status.h"

namespace libshard {

class ShardFiller {
 public:
  // A pin on the cache blocks of one read (docs/CACHE.md §3, "Read"): while it lives, no process
  // of the node evicts them. Destroy it once the read of the bytes has completed (for io_uring:
  // after the completion is reaped), never before. Any thread.
  class Hold {
   public:
    virtual ~Hold() = default;
  };

  virtual ~ShardFiller() = default;
  // Returns once bytes [offset, offset + length) of shard `shard` are present in its cache file
  // (fetched, written in full, synced and recorded; docs/CACHE.md), fetching the missing blocks
  // first, and pinned in *hold (when `hold` is not null) until the caller destroys it. The
  // error names the URL, the block and the HTTP status. Thread-safe.
  [[nodiscard]] virtual Status Ensure(uint32_t shard, uint64_t offset, uint64_t length,
                                      std::unique_ptr<Hold>* hold) = 0;
  // Ensure without the wait: queues the missing blocks of the range at the front and returns
  // whether all are present (and pinned in *hold) now (false: ask again later), or the error of
  // a failed block.
  virtual Result<bool> Request(uint32_t shard, uint64_t offset, uint64_t length,
                               std::unique_ptr<Hold>* hold) = 0;
  // Announces a read the reader will make (read-ahead, in the order it will read) and queues
  // the missing blocks of that range behind the ones queued before. The announced blocks are
  // this process's read-ahead window: it evicts none of them until they are read (CACHE.md §5).
  // Never blocks; a no-op while the queue is full (see Hungry).
  virtual void Prefetch(uint32_t shard, uint64_t offset, uint64_t length) = 0;
  // Whether the read-ahead has room for more (the fetch queue and the window).
  virtual bool Hungry() const = 0;
  // The reader starts a new pass (an epoch): what it announced before and did not read is no
  // longer its read-ahead.
  virtual void ForgetReadAhead() = 0;
  // A read of bytes [offset, offset + length) of shard `shard` from the cache failed a check
  // (`failure`, a Corruption): fetches the blocks of the range again from the object store,
  // replacing their cached bytes for every process of the node, copies the fresh bytes of the
  // range into `dst` (when not null: `length` bytes, as they lie in the shard) and calls
  // `recheck` to check them again. OK when the recheck passes: the cached copy was damaged,
  // and a warning says so and how (on this node's disk, or in the earlier download). Otherwise
  // the error: the object in the bucket is damaged (a Corruption naming the bucket, the key, the
  // range and the ETag), or it was replaced since the dataset was opened (ESTALE). The caller
  // holds no pin on the range (docs/CACHE.md §7). Any thread.
  [[nodiscard]] virtual Status Heal(uint32_t shard, uint64_t offset, uint64_t length,
                                    const Status& failure, std::byte* dst,
                                    const std::function<Status()>& recheck) = 0;
  // Whether Ensure's or Request's error `st` says that the cache has no room for the range
  // (its file system is out of space, or its bound is reached, and nothing could be evicted):
  // the reader then reads the range through with ReadThrough instead of failing
  // (docs/CACHE.md §4).
  static bool NoRoom(const Status& st) {
    return st.code() == StatusCode::kResourceExhausted && st.sys_errno() == ENOSPC;
  }
  // Bytes [offset, offset + length) of shard `shard` read from the object store into `dst`
  // (`length` bytes; those past the shard's end zeroed), without the cache: what a reader does
  // when the cache has no room (NoRoom). The caller checks them as it checks cached bytes. A
  // warning says so, once per dataset. Any thread.
  [[nodiscard]] virtual Status ReadThrough(uint32_t shard, uint64_t offset, uint64_t length,
                                           std::byte* dst) = 0;
  // The bound on the whole cache directory (DatasetOptions::cache_size; 0: none but the free
  // space) and the cache's block size: what a reader compares with what it will hold (the
  // node-local order's warning at Loader::Create).
  virtual uint64_t cache_bound() const { return 0; }
  virtual uint64_t cache_block_size() const { return 0; }
};

}  // namespace libshard
