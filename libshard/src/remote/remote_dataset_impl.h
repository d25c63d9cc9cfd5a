// RemoteDataset (remote_dataset.h): a Dataset over the cached copy of an object store's dataset
// that is also the loader's ShardFiller. Private to remote/: remote_dataset.cc opens it (the cache
// directory, free space, manifest, index, shard probes and the version's view, one step each);
// block_fetcher.cc fetches shard blocks into the cache on the process's fetcher threads;
// cache_heal.cc heals a damaged cached copy and reads through what the cache has no room for.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "format/manifest.h"
#include "libshard/dataset.h"
#include "objstore/object_store.h"
#include "remote/cache_files.h"
#include "remote/cache_root.h"
#include "remote/remote_dataset.h"
#include "remote/shard_filler.h"

namespace libshard::remote {

struct BlockId {
  uint32_t shard = 0;
  uint64_t block = 0;
  bool operator<(const BlockId& o) const {
    return shard != o.shard ? shard < o.shard : block < o.block;
  }
};

// What this process knows of its use of a dataset's blocks (docs/CACHE.md §3 and §5): the pins
// of the reads in progress (one shared OFD lock per pinned block, counted, since a second lock
// through the same description would merge with the first and one release would drop both),
// the read-ahead window (blocks announced by Prefetch and not yet read) and the blocks read,
// least recently read first. Shared by the Holds it hands out, which may outlive the dataset.
struct PinTable {
  struct Use {
    uint32_t pins = 0;    // reads in progress holding the block
    uint32_t wanted = 0;  // announced reads not yet made
    bool fetched = false; // fetched by this process for a read not yet made
    bool consumed = false;
    std::list<BlockId>::iterator lru;  // in `consumed_lru` when consumed
    RangeLock lock;       // the shared lock while pins > 0
  };
  std::mutex mu;
  std::map<BlockId, Use> uses;
  std::list<BlockId> consumed_lru;  // read and not wanted again: tier 1, oldest first
  size_t window_blocks = 0;         // blocks with wanted > 0
  // Per shard, this process's own descriptions of the state file: one for the readers' shared
  // locks, one for the evictor's exclusive ones (never the fetcher's, CACHE.md §3).
  std::vector<io::File> pin_files, evict_files;
  // Blocks being healed (cache_heal.cc): this process takes no new pin on them meanwhile, so its
  // readers cannot starve the healer's wait for the block's exclusive lock.
  std::set<BlockId> healing;
  std::condition_variable healed_cv;

  // Pins blocks [b0, b1] of `shard` (PinEntry for each not pinned here yet). False, nothing
  // held: one of them is absent (evicted since; *absent is set to it).
  Result<bool> Pin(const CachedShard& s, uint32_t shard, uint64_t b0, uint64_t b1,
                   uint64_t* absent);
  // Releases the pins of [b0, b1]; `consumed`: the read completed (the blocks join tier 1
  // unless still wanted).
  void Unpin(uint32_t shard, uint64_t b0, uint64_t b1, bool consumed);
  // Requires mu: drops `id`'s entry when nothing is left to remember.
  void MaybeErase(std::map<BlockId, Use>::iterator it);
};

// The fetcher threads of one process (remote_dataset.h). Created on first use in the process
// that uses it: a copy inherited through fork is never used by the child (its threads do not
// exist there), which makes its own.
struct Fetcher {
  enum class State { kQueued, kFetching, kDone, kFailed };
  pid_t pid = 0;
  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<BlockId> queue;
  std::map<BlockId, std::pair<State, Status>> blocks;  // queued, fetching or failed
  bool stop = false;
  std::vector<std::thread> threads;
  size_t max_queue = 64;
  // This process's own descriptions of the state files, for the block locks: OFD locks belong to
  // an open file description, which a forked child shares with its parent, so a child locking
  // through an inherited descriptor would not exclude the parent.
  std::vector<io::File> lock_files;
  // This process's pins, window and reads of the dataset's blocks.
  std::shared_ptr<PinTable> pins;
  // The process's count and evictor of the cache root (docs/CACHE.md §4).
  std::shared_ptr<RootCache> root;
  size_t max_window = 128;  // blocks announced and not yet read (Hungry)
};

class RemoteDataset final : public Dataset, public ShardFiller, public EvictSource {
 public:
  RemoteDataset(std::shared_ptr<objstore::ObjectStore> store, CacheOptions options,
                LocalOpen open_local);
  ~RemoteDataset() override {
    Fetcher* f = fetcher_.load();
    if (f == nullptr) return;
    if (f->pid != getpid()) {
      // Inherited through fork: its threads are the parent's, its mutex's state unknown.
      (void)owned_fetcher_.release();
      return;
    }
    if (f->root != nullptr) f->root->Unregister(this);  // waits for an eviction in progress
    {
      std::lock_guard<std::mutex> lock(f->mu);
      f->stop = true;
    }
    f->work_cv.notify_all();
    f->done_cv.notify_all();
    for (std::thread& t : f->threads) t.join();
  }

  static Result<std::shared_ptr<Dataset>> Open(std::shared_ptr<objstore::ObjectStore> store,
                                               CacheOptions options, LocalOpen open_local);

  // ---- Dataset: the cached copy, after Ensure for what is read ----
  const std::string& path() const override { return url_; }
  // The cached copy's local reader. Replaced (never destroyed before this dataset) when a damaged
  // cached index was repaired (HealIndex), so what it returned by reference stays valid.
  const Dataset& inner() const { return *inner_.load(std::memory_order_acquire); }
  uint64_t size() const override { return inner().size(); }
  const Schema& schema() const override { return inner().schema(); }
  const std::vector<ShardInfo>& shards() const override { return inner().shards(); }
  uint64_t total_stored_bytes() const override { return inner().total_stored_bytes(); }
  uint64_t total_raw_bytes() const override { return inner().total_raw_bytes(); }
  const DatasetProvenance& provenance() const override { return inner().provenance(); }
  std::vector<uint8_t> field_codecs() const override { return inner().field_codecs(); }
  uint32_t index_version() const override { return inner().index_version(); }
  Result<std::vector<uint64_t>> field_stored_sizes(uint64_t i) const override {
    return WithIndex([&] { return inner().field_stored_sizes(i); });
  }
  ShardFiller* shard_filler() const override { return const_cast<RemoteDataset*>(this); }
  SampleLocation location(uint64_t i) const override { return inner().location(i); }
  Result<SampleLocation> Locate(uint64_t i) const override {
    return WithIndex([&] { return inner().Locate(i); });
  }
  TensorLocation tensor(uint64_t i, size_t f) const override { return inner().tensor(i, f); }
  uint64_t length(uint64_t i) const override { return inner().length(i); }
  std::vector<uint64_t> lengths() const override { return inner().lengths(); }
  Result<Provenance> source(uint64_t i) const override {
    return WithIndex([&] { return inner().source(i); });
  }
  Result<Metadata> metadata(uint64_t i) const override {
    return WithIndex([&] { return inner().metadata(i); });
  }
  // Each read of the cached bytes is pinned until it returns (docs/CACHE.md §3); a read whose
  // bytes fail their checksum heals them (HealSample).
  Result<Sample> Read(uint64_t i) const override {
    Result<Sample> out = Status::Internal("unset");
    Status st = HealSample(i, [&] {
      out = inner().Read(i);
      return out.status();
    });
    if (IsNoRoom(st)) return ReadSampleThrough(i);
    LIBSHARD_RETURN_IF_ERROR(st);
    return out;
  }
  Status Verify(uint64_t i) const override {
    Status st = HealSample(i, [&] { return inner().Verify(i); });
    if (IsNoRoom(st)) return ReadSampleThrough(i).status();
    return st;
  }
  // Field checksums (FORMAT.md §3.9): from the cached index; the bytes they cover are read
  // through the cache (EnsureSample) where this reads shards itself.
  bool has_field_checksums() const override { return inner().has_field_checksums(); }
  Result<std::vector<uint64_t>> field_checksums(uint64_t i) const override {
    return WithIndex([&] { return inner().field_checksums(i); });
  }
  Status VerifyFields(uint64_t i, const std::byte* base, uint64_t base_offset, uint64_t base_size,
                      std::span<const size_t> fields) const override {
    return inner().VerifyFields(i, base, base_offset, base_size, fields);
  }
  Status FieldRegions(uint64_t i, std::vector<uint64_t>* offsets,
                      std::vector<uint64_t>* sizes) const override {
    return inner().FieldRegions(i, offsets, sizes);
  }
  Result<std::vector<uint64_t>> ComputeFieldChecksums(uint64_t i) const override {
    Result<std::vector<uint64_t>> out = Status::Internal("unset");
    LIBSHARD_RETURN_IF_ERROR(HealSample(i, [&] {
      out = inner().ComputeFieldChecksums(i);
      return out.status();
    }));
    return out;
  }
  Status Decode(uint64_t i, std::span<const std::byte> stored,
                std::span<std::byte> raw) const override {
    return inner().Decode(i, stored, raw);
  }
  Status DecodeSelected(uint64_t i, std::span<const std::byte> stored, std::span<std::byte> raw,
                        std::span<const size_t> fields, uint64_t max_len) const override {
    return inner().DecodeSelected(i, stored, raw, fields, max_len);
  }
  Result<Sample> MakeSample(uint64_t i, const std::byte* base, uint64_t base_offset,
                            uint64_t base_size, std::shared_ptr<const void> memory,
                            std::span<const size_t> fields) const override {
    return inner().MakeSample(i, base, base_offset, base_size, std::move(memory), fields);
  }
  // Row-range reads (FORMAT.md §3.10): planned from the cached index and checked by its reader;
  // each extent read through the cache (ReadStoredRange), so a slice fetches only the blocks
  // covering its rows and their block-table checksum units, not the whole sample.
  bool has_row_blocks() const override { return inner().has_row_blocks(); }
  Result<std::optional<std::string>> BlockTableBytes(uint64_t i) const override {
    return WithIndex([&] { return inner().BlockTableBytes(i); });
  }
  bool checks_reads() const override { return inner().checks_reads(); }
  Result<std::shared_ptr<const internal::SlicePlan>> PlanSlice(uint64_t i,
                                                               std::span<const size_t> fields,
                                                               RowRange rows,
                                                               bool verify) const override {
    return WithIndex([&] { return inner().PlanSlice(i, fields, rows, verify); });
  }
  Result<Sample> FinishSlice(const internal::SlicePlan& plan, std::span<std::byte* const> extents,
                             std::byte* decoded,
                             std::shared_ptr<const void> memory) const override {
    return inner().FinishSlice(plan, extents, decoded, std::move(memory));
  }
  // Ensure for the range's blocks only (pinned while it is read), then the cached copy's pread;
  // read through when the cache has no room (docs/CACHE.md §4).
  Status ReadStoredRange(uint64_t i, uint64_t offset, uint64_t size,
                         std::byte* dst) const override;

  // ---- ShardFiller ----
  Status Ensure(uint32_t shard, uint64_t offset, uint64_t length,
                std::unique_ptr<Hold>* hold) override {
    return Wait(shard, offset, length, /*wait=*/true, hold).status();
  }
  Result<bool> Request(uint32_t shard, uint64_t offset, uint64_t length,
                       std::unique_ptr<Hold>* hold) override {
    return Wait(shard, offset, length, /*wait=*/false, hold);
  }
  void Prefetch(uint32_t shard, uint64_t offset, uint64_t length) override;
  bool Hungry() const override {
    Fetcher* f = GetFetcher();
    if (f == nullptr) return false;
    {
      std::lock_guard<std::mutex> lock(f->pins->mu);
      if (f->pins->window_blocks >= f->max_window) return false;
    }
    std::lock_guard<std::mutex> lock(f->mu);
    return f->queue.size() < f->max_queue;
  }
  void ForgetReadAhead() override;
  Status ReadThrough(uint32_t shard, uint64_t offset, uint64_t length, std::byte* dst) override;
  uint64_t cache_bound() const override { return options_.dataset.cache_size; }
  uint64_t cache_block_size() const override {
    return shards_.empty() ? kDefaultBlock : shards_[0]->block_size;
  }
  Status Heal(uint32_t shard, uint64_t offset, uint64_t length, const Status& failure,
              std::byte* dst, const std::function<Status()>& recheck) override;

  // ---- EvictSource (the process's evictor of the cache root) ----
  Result<uint64_t> EvictTier(int tier, uint64_t need) override;
  bool OwnsDataFile(dev_t dev, ino_t ino) const override;

 private:
  // Ensure for sample i's stored bytes, pinned in *hold while the caller reads them.
  Status EnsureSample(uint64_t i, std::unique_ptr<Hold>* hold) const {
    LIBSHARD_ASSIGN_OR_RETURN(SampleLocation loc, Locate(i));
    Status st =
        const_cast<RemoteDataset*>(this)->Ensure(loc.shard, loc.offset, loc.stored_size, hold);
    return st.ok() ? st : st.WithContext("sample " + std::to_string(i));
  }
  // Ensure (wait) or Request (no wait), then the pin.
  Result<bool> Wait(uint32_t shard, uint64_t offset, uint64_t length, bool wait,
                    std::unique_ptr<Hold>* hold);
  // Queues the missing blocks at the front and, with `wait`, waits for them. True when none is
  // queued or fetching any more.
  Result<bool> Fetch(const std::vector<BlockId>& missing, bool wait);
  // The fetcher of this process, started on first use (nullptr only when threads cannot start).
  Fetcher* GetFetcher() const;
  void FetcherLoop(Fetcher* f);
  // Downloads one block unless present (in this or another process); docs/CACHE.md §3.
  Status FetchBlock(BlockId id, std::byte* buffer, int lock_fd);
  // Writes a downloaded block's bytes into its cache file (data, then fdatasync). A file system
  // out of space (ENOSPC, EDQUOT) evicts by the schedule and tries again; with nothing left to
  // evict, the error is NoRoom (docs/CACHE.md §4).
  Status WriteBlock(CachedShard& s, BlockId id, const std::byte* bytes, uint64_t len);

  // ---- Opening (remote_dataset.cc), one step each ----
  // The dataset's directory in the cache: one per store identity and URL (docs/CACHE.md §1).
  Status MakeCacheDirectory();
  // The free-space floor: the option, else 5 % of the cache's file system (at most 10 GiB).
  void ResolveFreeSpace();
  // manifest.json: read, checked whole, cached (docs/CACHE.md §7).
  Result<format::Manifest> FetchManifest();
  // The index: its size checked against the manifest, fetched and checked whole when not cached.
  Status FetchIndex(const format::Manifest& manifest);
  // Every shard's size and generation, its cache files and the header the local reader checks.
  Status ProbeShards(const format::Manifest& manifest);
  Status ProbeShard(CachedShard* s);
  // The version's view: a directory of hard links with the dataset's own file names.
  Status MakeView(const format::Manifest& manifest);
  // The local reader over the view.
  Status OpenView();
  // Makes `inner` (a reader over the view) the one inner() returns, keeping the earlier ones.
  void AdoptInner(std::shared_ptr<Dataset> inner) const;
  // Counts a file the open creates in the root's running count before it is written.
  Status Reserve(uint64_t bytes);

  // ---- Reading through, uncached (cache_heal.cc) ----
  // Whether `st` says the cache has no room for a read's blocks and nothing could be evicted.
  static bool IsNoRoom(const Status& st);
  // Sample i read from the store into memory and checked, the cache left alone (a warning once).
  Result<Sample> ReadSampleThrough(uint64_t i) const;

  // ---- Healing a damaged cached copy (cache_heal.cc, docs/CACHE.md §7) ----
  // read() (a read of sample i's cached bytes) with the sample's blocks pinned; when it fails
  // with a Corruption, Heal of the sample's stored range with read() as the recheck.
  Status HealSample(uint64_t i, const std::function<Status()>& read) const;
  // f(); when it fails with a Corruption, HealIndex and f() once more.
  template <typename F>
  auto WithIndex(F&& f) const -> decltype(f()) {
    auto r = f();
    if (r.ok() || r.status().code() != StatusCode::kCorruption) return r;
    LIBSHARD_RETURN_IF_ERROR(HealIndex(r.status()));
    return f();
  }
  // After `failure` (a Corruption from the index reader, or not): checks the cached index whole
  // against its own checksums. Sound: `failure` is not the cached index's (returned as it is,
  // advice for a local dataset taken out). Damaged: fetched again, checked, rewritten in place
  // and a fresh reader opened over it (inner_); OK, the caller tries again.
  Status HealIndex(const Status& failure) const;
  struct BlockVerdict {
    bool local_damage = false;  // a cached block no longer matched its recorded checksum
    bool same_bytes = true;     // every fresh download equalled what was recorded before
  };
  // Under block `id`'s fetch lock: its cached bytes checked against the recorded checksum, then
  // replaced by a fresh download (a reservation when it was absent); the bytes of
  // [offset, offset + length) that lie in it copied into dst (when not null).
  Status RefetchBlock(BlockId id, uint64_t offset, uint64_t length, std::byte* dst,
                      BlockVerdict* verdict);
  // Marks the blocks [b0, b1] of `shard` absent where no reader pins them (their bytes are
  // known to be another version's, or damaged), and takes them off the running count.
  void DropBlocks(uint32_t shard, uint64_t b0, uint64_t b1);
  // "SCHEME://b/p/shard-00000.lss (bucket b, key p/shard-00000.lss, bytes 0-8191, ETag "...")"
  std::string RangeWhere(uint32_t shard, uint64_t offset, uint64_t length) const;

  // "block 3 (bytes 12582912-16777215) of SCHEME://b/p/shard-00000.lss"
  std::string BlockWhere(BlockId id) const {
    const CachedShard& s = *shards_[id.shard];
    const uint64_t start = id.block * s.block_size;
    return "block " + std::to_string(id.block) + " (bytes " + std::to_string(start) + "-" +
           std::to_string(start + s.BlockLength(id.block) - 1) + ") of " + s.url;
  }

  std::shared_ptr<objstore::ObjectStore> store_;
  CacheOptions options_;
  std::string url_;
  std::string root_;         // the cache root: the bound covers all of it
  std::string cache_dir_;    // this dataset's directory in the cache
  std::string objects_dir_;  // its objects/
  uint32_t connections_ = 8;
  uint64_t min_free_ = 0;
  std::shared_ptr<RootCache> root_cache_;  // the open's (the fetcher keeps its own)
  std::string manifest_path_, manifest_generation_;
  mutable std::atomic<bool> warned_no_room_{false};
  mutable std::atomic<const Dataset*> inner_{nullptr};
  mutable std::mutex inners_mu_;
  mutable std::vector<std::shared_ptr<Dataset>> inners_;  // every inner_ so far, kept alive
  std::vector<std::unique_ptr<CachedShard>> shards_;
  mutable std::mutex fetcher_mu_;
  mutable std::atomic<Fetcher*> fetcher_{nullptr};
  mutable std::unique_ptr<Fetcher> owned_fetcher_;
  // Blocks a Request queued and has not yet seen finish (guarded by the fetcher's mu).
  std::set<BlockId> requested_;
  // Tier 3's cursor over this process's shards (guarded by the root's eviction lock).
  uint32_t evict_shard_ = 0;
  // What HealIndex needs: the index object, its cached file, the view and the local open.
  std::string index_name_;
  objstore::ObjectInfo index_info_;
  uint64_t index_xxh3_ = 0;  // manifest.json's index.xxh3
  std::string index_path_, view_;
  LocalOpen open_local_ = nullptr;
};

}  // namespace libshard::remote
