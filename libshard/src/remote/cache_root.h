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
#include "libshard/status.h"

namespace libshard::remote {

// docs/CACHE.md §4: ROOT/.usage.
constexpr char kUsageMagic[8] = {'L', 'S', 'U', 'S', 'A', 'G', 'E', '1'};
constexpr uint64_t kUsageBytes = 64;
constexpr const char* kUsageName = ".usage";

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
  // file system of `fs_fd`; -1: not checked) and, when `cache_size` > 0, the bound (the running count plus the
  // block within cache_size). Evicts by the victim order first when needed, then adds the block
  // to the running count. Error: ResourceExhausted "the cache is full", naming the root, the
  // bound and why nothing could be evicted.
  [[nodiscard]] Status Reserve(uint64_t len, uint64_t cache_size, uint64_t min_free, int fs_fd);
  // Takes `bytes` off the running count (a reserved block not written, bytes evicted).
  void Unreserve(uint64_t bytes);
  // Walks the root and sets the running count to what the cache files allocate (st_blocks,
  // each inode once, staging/ left out). Returns it.
  Result<uint64_t> Measure();
  const std::string& root() const { return root_; }

 RootCache() = default;  // use Get

 private:
  Status OpenUsage();
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

}  // namespace libshard::remote
