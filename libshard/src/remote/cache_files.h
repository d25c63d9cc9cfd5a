// The node-local cache's files (docs/CACHE.md): one shard's sparse data file and its state file,
// the OFD byte-range locks on them, and the small helpers the remote dataset shares (environment
// sizes, cache file names, whole-object fetches). Private to remote/.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "io/file.h"
#include "objstore/object_store.h"
#include "remote/cache_records.h"
#include "libshard/status.h"

namespace libshard::remote {

// Eviction keeps the first 4096 bytes of block 0: the shard header the local reader checks when
// a process opens the dataset (CACHE.md §3, "Evict").
constexpr uint64_t kKeptHead = 4096;
constexpr uint64_t kDefaultBlock = uint64_t{4} << 20;
constexpr uint64_t kMaxSmallObject = uint64_t{256} << 20;  // manifest
constexpr uint64_t kMaxIndexObject = uint64_t{16} << 30;

// $name, or "" when unset.
std::string Env(const char* name);
// A name made of [A-Za-z0-9._-] from `s` (others become '_'), at most `max` characters.
std::string Sanitize(std::string_view s, size_t max);
// The 16 hex digits naming a cached object's version (the xxh3 of its ETag).
std::string EtagTag(const std::string& etag);
Status Errno(const std::string& what, int e = errno);
// Creates `dir` and its parents; the error says to point the cache at a writable disk.
Status MakeDirs(const std::string& dir);
// Creates ROOT/RELATIVE: the root as MakeDirs (a symlinked root is the user's choice), each
// directory under it without following a symlink (one in its place is removed and the directory
// made).
Status MakeCacheDirs(const std::string& root, const std::string& relative);
// Object `name` of `store` (of `info`'s size and generation) whole, passed by `check` (the
// dataset's own references: cache_verify.h) before anything is cached. A download that fails the
// check is made once more; a second failure is the bucket's: a Corruption saying the object in
// the bucket is damaged.
Result<std::string> FetchChecked(objstore::ObjectStore& store, const std::string& name,
                                 const objstore::ObjectInfo& info,
                                 const std::function<Status(const std::string&)>& check);
// Opens a file of the cache with `flags` (O_NOFOLLOW and O_CLOEXEC added). A symlink or other
// non-regular file in its place is removed (the link, not its target) and, with O_CREAT, the
// file made anew: the cache never follows a symlink (docs/CACHE.md §1).
Result<io::File> OpenCacheFile(const std::string& path, int flags);
// A cached whole file of `size` bytes (opened without following a symlink; a size other than
// `size` is a Corruption).
Result<std::string> ReadCachedFile(const std::string& path, uint64_t size);
// A new cached file: `data` to PATH.tmp-PID, synced, renamed to `path` (a reader never sees part).
Status WriteCachedFile(const std::string& path, std::string_view data);
// Repairs a cached file in place: `data` over its bytes, its size set, synced. The same inode,
// so the views' hard links see the repair (docs/CACHE.md §7).
Status RewriteCachedFile(const std::string& path, std::string_view data);
inline std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
// A hard link `link` to `target` (an existing one is kept).
Status LinkInto(const std::string& target, const std::string& link);

// An OFD byte-range lock (fcntl F_OFD_SETLKW): held by this open file description until
// released or closed; released by the kernel when the process dies (even by SIGKILL).
class RangeLock {
 public:
  RangeLock() = default;
  static Result<RangeLock> Acquire(int fd, uint64_t start, uint64_t len, bool exclusive,
                                   const std::string& path) {
    return Lock(fd, start, len, exclusive, /*wait=*/true, path);
  }
  // The same without waiting (F_OFD_SETLK): a lock that is not held() when another open file
  // description holds a conflicting one.
  static Result<RangeLock> Try(int fd, uint64_t start, uint64_t len, bool exclusive,
                               const std::string& path) {
    return Lock(fd, start, len, exclusive, /*wait=*/false, path);
  }
  bool held() const { return fd_ >= 0; }
  RangeLock(RangeLock&& o) noexcept { *this = std::move(o); }
  RangeLock& operator=(RangeLock&& o) noexcept {
    Release();
    fd_ = std::exchange(o.fd_, -1);
    start_ = o.start_;
    len_ = o.len_;
    return *this;
  }
  ~RangeLock() { Release(); }
  void Release() {
    if (fd_ < 0) return;
    struct flock fl = Range(F_UNLCK, start_, len_);
    (void)fcntl(fd_, F_OFD_SETLK, &fl);
    fd_ = -1;
  }

 private:
  static struct flock Range(short type, uint64_t start, uint64_t len) {
    struct flock fl {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(start);
    fl.l_len = static_cast<off_t>(len);
    return fl;
  }
  static Result<RangeLock> Lock(int fd, uint64_t start, uint64_t len, bool exclusive, bool wait,
                                const std::string& path) {
    struct flock fl = Range(exclusive ? F_WRLCK : F_RDLCK, start, len);
    const int cmd = wait ? F_OFD_SETLKW : F_OFD_SETLK;
    while (fcntl(fd, cmd, &fl) != 0) {
      if (errno == EINTR) continue;
      if (!wait && (errno == EAGAIN || errno == EACCES)) return RangeLock();
      return Errno(path + (wait ? ": fcntl(F_OFD_SETLKW) at " : ": fcntl(F_OFD_SETLK) at ") +
                   std::to_string(start) +
                   " (the cache directory must be on a file system with local locks)");
    }
    RangeLock l;
    l.fd_ = fd;
    l.start_ = start;
    l.len_ = len;
    return l;
  }

  int fd_ = -1;
  uint64_t start_ = 0, len_ = 0;
};

// One shard's cache: the sparse data file and its state file (docs/CACHE.md §2).
struct CachedShard {
  std::string name;  // the object's name in the store (the shard's file name)
  std::string url;   // scheme://bucket/key, for messages
  std::string etag;  // the generation recorded at open ("" when the store sends none)
  uint64_t size = 0;
  uint64_t block_size = kDefaultBlock;
  uint64_t blocks = 0;
  std::string data_path, state_path;
  io::File data, state;
  dev_t dev = 0;  // the data file's, for the evictor's walk (Init)
  ino_t ino = 0;
  // In-process hint that a block is present. Another process may evict it since (CACHE.md §3):
  // a read trusts only a pin (PinEntry), a download only the entry under its lock.
  std::unique_ptr<std::atomic<uint8_t>[]> present;

  uint64_t BlockLength(uint64_t b) const {
    return std::min(block_size, size - b * block_size);
  }
  // The hint, else the state word.
  Result<bool> IsPresent(uint64_t b) {
    if (present[b].load(std::memory_order_acquire)) return true;
    return IsPresentOnDisk(b);
  }
  // The state word itself (refreshes the hint).
  Result<bool> IsPresentOnDisk(uint64_t b) {
    uint64_t word = 0;
    LIBSHARD_RETURN_IF_ERROR(state.PReadExact(&word, 8, kStateHeader + b * kEntryBytes));
    present[b].store(word == kPresent ? 1 : 0, std::memory_order_release);
    return word == kPresent;
  }

  // Creates or checks both files under the header lock.
  Status Init(uint64_t wanted_block);

  // Drops the page-cache copy a download of block b left, once the block is durable
  // (docs/CACHE.md §3). The loader reads the cache with O_DIRECT, so the copy is never read:
  // on a node caching terabytes it would crowd out the trainers' memory, and the first
  // O_DIRECT read of a range with cached pages invalidates them on the reading thread.
  // Advice only: a kernel that ignores it costs memory, never an error.
  void DropCachedCopy(uint64_t b) const;
};

// docs/CACHE.md §3, "Read": a shared lock on block b's entry through `pin_fd` (this process's
// own open file description of the state file, never one that takes exclusive locks), waiting
// while a process fetches or evicts the block, then the state word read again. Held only when
// the block is present: while it is held no process evicts the block. Not held: the block is
// absent (evicted); fetch it again.
Result<RangeLock> PinEntry(int pin_fd, const io::File& state, uint64_t b);

// docs/CACHE.md §3, "Evict": evicts block b of a shard's cache (`state`, `data`; block size
// `block_size`, object size `size`) unless in use. Takes the entry's exclusive lock through
// `evict_fd` without waiting (held elsewhere: a reader pins it or a process fetches or evicts
// it: skipped), reads the word again (absent: skipped), clears it, fdatasyncs the state file,
// then punches the block's bytes out of the data file (all but the first kKeptHead bytes of
// block 0). Returns the bytes freed, 0 when skipped.
Result<uint64_t> EvictEntry(int evict_fd, io::File& state, io::File& data, uint64_t b,
                            uint64_t block_size, uint64_t size);

// Marks block b of `s` absent (its state word cleared and synced) under the entry's exclusive
// lock, waiting for readers: a block recorded present whose bytes are known damaged. Its bytes
// stay (counted) until the block is fetched again or evicted.
Status InvalidateEntry(CachedShard& s, uint64_t b);

// The bytes a block of `len` bytes allocates in its data file (whole 4096-byte file-system
// blocks), as the cache's running count adds and subtracts them.
inline uint64_t Allocated(uint64_t len) { return (len + 4095) / 4096 * 4096; }

}  // namespace libshard::remote
