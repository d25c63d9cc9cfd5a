// The cache root's bound and eviction (docs/CACHE.md §4): one running count of the bytes the
// cache files under a root allocate, shared by every process of the node through the file
// ROOT/.usage, and the process's evictor, which frees room for a block by the schedule's
// victim order. Private to remote/.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/file.h"
#include "remote/cache_records.h"
#include "libshard/status.h"

namespace libshard::remote {

// An open dataset this process reads, seen by the evictor: it knows which of its blocks this
// process consumed, wants (read-ahead) or pins.
class EvictSource {
 public:
  virtual ~EvictSource() = default;
  // Tier 1: blocks this process consumed and does not want again, least recently consumed
  // first. Tier 3: its other present blocks that this process neither wants nor pins. Evicts
  // (EvictEntry: never a pinned block) until `need` bytes are freed; returns the bytes freed.
  virtual Result<uint64_t> EvictTier(int tier, uint64_t need) = 0;
  // Whether (dev, ino) is one of its data files (the root walk of tier 2 leaves those alone).
  virtual bool OwnsDataFile(dev_t dev, ino_t ino) const = 0;
};

class RootCache {
 public:
  // This process's RootCache of `root` (a forked child makes its own: OFD locks belong to open
  // file descriptions, which a child shares with its parent).
  static Result<std::shared_ptr<RootCache>> Get(const std::string& root);

  void Register(EvictSource* source);
  void Unregister(EvictSource* source);

  // Room for a block of `len` bytes: the free-space floor (`min_free` bytes left free on the
  // file system of `fs_fd`, less what every download in flight on the node reserved and has not
  // written; -1: not checked, and not a download) and, when `cache_size` > 0, the bound (the
  // running count plus the block within cache_size). A download's reservation stays pending
  // until Landed or Abandoned. Evicts by the victim order first when needed, then adds the block
  // to the running count. Error: ResourceExhausted "the cache is full", naming the root, the
  // bound and why nothing could be evicted.
  [[nodiscard]] Status Reserve(uint64_t len, uint64_t cache_size, uint64_t min_free, int fs_fd);
  // Evicts by the victim order until `need` bytes are freed, when the file system ran out of
  // space under the floor's watch (ENOSPC: other files took it): the bytes freed (0: nothing
  // could go).
  Result<uint64_t> MakeRoom(uint64_t need) { return Evict(need); }
  // Takes `bytes` off the running count (bytes evicted, a reservation of an open not made).
  void Unreserve(uint64_t bytes);
  // A download reserved by Reserve(len, ..., fs_fd >= 0) is written: no longer pending.
  void Landed(uint64_t len);
  // A download reserved so failed: neither counted nor pending.
  void Abandoned(uint64_t len);
  // Walks the root and sets the running count to what the cache files allocate (st_blocks,
  // each inode once, staging/ left out). Returns it.
  Result<uint64_t> Measure();
  const std::string& root() const { return root_; }

 RootCache() = default;  // use Get

 private:
  Status OpenUsage();
  // The size of the file system that holds the root (bounds what .usage may claim).
  uint64_t FileSystemBytes() const;
  // Require count_mu_ and the record's lock. The record, measured again when new, damaged,
  // lying or stale (*rewrite then set: write it back).
  Result<UsageRecord> ReadUsageLocked(bool* rewrite);
  Status WriteUsageLocked(const UsageRecord& r);
  // Takes bytes off the count and off the pending downloads.
  void Update(uint64_t used_minus, uint64_t pending_minus);
  // Frees at least `need` bytes if it can (tiers 1-3, CACHE.md §5); returns the bytes freed.
  Result<uint64_t> Evict(uint64_t need);
  // Tier 2: blocks of cache files under the root that no open dataset of this process owns.
  Result<uint64_t> EvictOthers(uint64_t need);
  // Sum of st_blocks * 512 over the regular files under the root (each inode once).
  Result<uint64_t> Walk(std::vector<std::string>* state_files) const;

  std::string root_;
  pid_t pid_ = 0;
  io::File usage_;           // this process's own open file description of ROOT/.usage
  uint64_t measure_ns_ = 0;  // re-measure at most this often (LIBSHARD_CACHE_MEASURE_SECONDS)
  std::mutex mu_;            // sources_ and eviction (one evictor per process and root)
  // The count's critical sections: the OFD lock excludes other processes only (this process's
  // threads share usage_'s description, so their locks would merge).
  std::mutex count_mu_;
  std::vector<EvictSource*> sources_;
};

// A download's reservation (RootCache::Reserve with a file system to check): Abandoned when it
// goes out of scope unless Landed.
class PendingDownload {
 public:
  PendingDownload(RootCache* root, uint64_t len) : root_(root), len_(len) {}
  ~PendingDownload() {
    if (root_ != nullptr) root_->Abandoned(len_);
  }
  PendingDownload(const PendingDownload&) = delete;
  PendingDownload& operator=(const PendingDownload&) = delete;
  void Landed() {
    if (root_ != nullptr) root_->Landed(len_);
    root_ = nullptr;
  }

 private:
  RootCache* root_;
  uint64_t len_;
};

}  // namespace libshard::remote
