// Fetching shard blocks into the node-local cache (docs/CACHE.md §3): the process's fetcher
// threads, the ShardFiller calls (Ensure, Request, Prefetch), the readers' pins and this
// process's part of eviction (EvictSource, docs/CACHE.md §5).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/shard_format.h"
#include "io/filesystem.h"
#include "remote/cache_verify.h"
#include "remote/remote_dataset_impl.h"

namespace libshard::remote {

Fetcher* RemoteDataset::GetFetcher() const {
  const pid_t pid = getpid();
  Fetcher* f = fetcher_.load(std::memory_order_acquire);
  if (f != nullptr && f->pid == pid) return f;
  std::lock_guard<std::mutex> lock(fetcher_mu_);
  f = fetcher_.load(std::memory_order_acquire);
  if (f != nullptr && f->pid == pid) return f;
  // A child of fork: leave the parent's fetcher (its threads are not here, its mutex's state is
  // unknown) alone, leaked on purpose, and start this process's own.
  if (f != nullptr) (void)owned_fetcher_.release();
  auto fresh = std::make_unique<Fetcher>();
  fresh->pid = pid;
  fresh->max_queue = std::max<size_t>(4 * connections_, 16);
  fresh->max_window = 2 * fresh->max_queue;
  fresh->pins = std::make_shared<PinTable>();
  auto own = [](const std::string& path) {
    Result<io::File> f = io::File::Open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    return f.ok() ? std::move(f).value() : io::File();
  };
  for (const auto& s : shards_) {
    fresh->lock_files.push_back(own(s->state_path));
    fresh->pins->pin_files.push_back(own(s->state_path));
    fresh->pins->evict_files.push_back(own(s->state_path));
  }
  Result<std::shared_ptr<RootCache>> root = RootCache::Get(root_);
  if (root.ok()) {
    fresh->root = std::move(root).value();
    fresh->root->Register(const_cast<RemoteDataset*>(this));
  }
  Fetcher* raw = fresh.get();
  auto* self = const_cast<RemoteDataset*>(this);
  for (uint32_t t = 0; t < connections_; ++t) raw->threads.emplace_back([self, raw] {
    self->FetcherLoop(raw);
  });
  owned_fetcher_ = std::move(fresh);
  fetcher_.store(raw, std::memory_order_release);
  return raw;
}

void RemoteDataset::FetcherLoop(Fetcher* f) {
  uint64_t max_block = 0;
  for (const auto& s : shards_) max_block = std::max(max_block, s->block_size);
  std::shared_ptr<std::byte[]> buffer =
      internal::AllocateAligned(std::max<uint64_t>(max_block, 4096));
  while (true) {
    BlockId id;
    {
      std::unique_lock<std::mutex> lock(f->mu);
      f->work_cv.wait(lock, [f] { return f->stop || !f->queue.empty(); });
      if (f->stop) return;
      id = f->queue.front();
      f->queue.pop_front();
      f->blocks[id].first = Fetcher::State::kFetching;
    }
    Status st = buffer == nullptr
                    ? Status::ResourceExhausted("cannot allocate a block buffer")
                    : FetchBlock(id, buffer.get(),
                                 f->lock_files[id.shard].valid() ? f->lock_files[id.shard].fd()
                                                                 : shards_[id.shard]->state.fd());
    if (st.ok()) {
      // Fetched for a read not yet made (announced or not): not evicted by this process before
      // that read (docs/CACHE.md §5), or a read could lose its block between fetch and pin.
      std::lock_guard<std::mutex> lock(f->pins->mu);
      PinTable::Use& u = f->pins->uses[id];
      u.fetched = true;
    }
    {
      std::lock_guard<std::mutex> lock(f->mu);
      if (st.ok()) {
        f->blocks.erase(id);
      } else {
        f->blocks[id] = {Fetcher::State::kFailed, std::move(st)};
      }
    }
    f->done_cv.notify_all();
  }
}

Status RemoteDataset::FetchBlock(BlockId id, std::byte* buffer, int lock_fd) {
  CachedShard& s = *shards_[id.shard];
  // The state word itself, not the hint: another process may have evicted the block.
  LIBSHARD_ASSIGN_OR_RETURN(bool here, s.IsPresentOnDisk(id.block));
  if (here) return Status::OK();
  const uint64_t entry = kStateHeader + id.block * kEntryBytes;
  // One process of the node downloads the block; the others wait here, then find it present.
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                            RangeLock::Acquire(lock_fd, entry, kEntryBytes, true, s.state_path));
  LIBSHARD_ASSIGN_OR_RETURN(here, s.IsPresentOnDisk(id.block));
  if (here) return Status::OK();
  const uint64_t start = id.block * s.block_size;
  const uint64_t len = s.BlockLength(id.block);
  // Room first (evicting by the schedule when the bound or the floor says so), counted in the
  // root's running count before the bytes arrive (docs/CACHE.md §4).
  RootCache* root = GetFetcher()->root.get();
  if (root == nullptr)
    return Status::IoError(root_ + ": cannot open the cache's usage file " + kUsageName +
                           " (set cache= / LIBSHARD_CACHE_DIR to a writable node-local disk)");
  Status room = root->Reserve(len, options_.dataset.cache_size, min_free_, s.state.fd());
  if (room.code() == StatusCode::kResourceExhausted)  // nothing evictable: read it through
    return Status(StatusCode::kResourceExhausted, room.message(), ENOSPC);
  LIBSHARD_RETURN_IF_ERROR(room);
  PendingDownload pending(root, len);
  // Block 0 carries the shard header, which the local reader checks at every open: checked as
  // it lands (4 KiB), fetched once more when it fails, never cached damaged (docs/CACHE.md §7).
  Status header;
  for (int attempt = 0; attempt < 2; ++attempt) {
    LIBSHARD_RETURN_IF_ERROR(store_->Read(s.name, start, len, s.etag, buffer));
    if (id.block != 0 || len < format::kShardHeaderSize) break;
    header = format::CheckShardHeader({buffer, format::kShardHeaderSize}, s.url);
    if (header.ok()) break;
  }
  if (!header.ok())
    return Status::Corruption(RangeWhere(id.shard, 0, len) +
                              ": the object in the bucket is damaged: " +
                              WithoutLocalAdvice(header.message()) +
                              " on two downloads; upload the dataset again from its source");
  // Present only once the bytes are written in full and durable: data, fdatasync, then entry.
  LIBSHARD_RETURN_IF_ERROR(WriteBlock(s, id, buffer, len));
  pending.Landed();
  s.DropCachedCopy(id.block);  // now that it is clean, off the read path
  const uint64_t sum = format::Xxh3(buffer, len);
  LIBSHARD_RETURN_IF_ERROR(s.state.PWriteAll(&sum, 8, entry + 8));
  const uint64_t word = kPresent;
  LIBSHARD_RETURN_IF_ERROR(s.state.PWriteAll(&word, 8, entry));
  s.present[id.block].store(1, std::memory_order_release);
  return Status::OK();
}

Result<bool> RemoteDataset::Wait(uint32_t shard, uint64_t offset, uint64_t length, bool wait,
                                 std::unique_ptr<Hold>* hold) {
  if (shard >= shards_.size())
    return Status::InvalidArgument(url_ + ": shard " + std::to_string(shard) + " out of range");
  CachedShard& s = *shards_[shard];
  if (length == 0) return true;
  const uint64_t end = std::min(s.size, offset + length);
  if (offset >= end) return true;
  const uint64_t b0 = offset / s.block_size, b1 = (end - 1) / s.block_size;
  // Fetch what is missing, then pin it; a block evicted between the two (by another process)
  // is fetched again. A read is never served from a block that is not pinned and present.
  for (int round = 0; round < 64; ++round) {
    std::vector<BlockId> missing;
    for (uint64_t b = b0; b <= b1; ++b) {
      LIBSHARD_ASSIGN_OR_RETURN(bool here, s.IsPresent(b));
      if (!here) missing.push_back({shard, b});
    }
    if (!missing.empty()) {
      LIBSHARD_ASSIGN_OR_RETURN(bool done, Fetch(missing, wait));
      if (!done) return false;
      continue;  // fetched: check and pin
    }
    if (hold == nullptr) return true;
    Fetcher* f = GetFetcher();
    {
      // A block being healed by a thread of this process: pinned once it is done.
      std::unique_lock<std::mutex> lock(f->pins->mu);
      const auto healing = [&] {
        for (uint64_t b = b0; b <= b1; ++b)
          if (f->pins->healing.count({shard, b})) return true;
        return false;
      };
      if (healing()) {
        if (!wait) return false;
        f->pins->healed_cv.wait(lock, [&] { return !healing(); });
      }
    }
    uint64_t absent = 0;
    LIBSHARD_ASSIGN_OR_RETURN(bool pinned, f->pins->Pin(s, shard, b0, b1, &absent));
    if (pinned) {
      struct Pinned final : Hold {
        std::shared_ptr<PinTable> table;
        uint32_t shard = 0;
        uint64_t b0 = 0, b1 = 0;
        ~Pinned() override { table->Unpin(shard, b0, b1, /*consumed=*/true); }
      };
      auto p = std::make_unique<Pinned>();
      p->table = f->pins;
      p->shard = shard;
      p->b0 = b0;
      p->b1 = b1;
      *hold = std::move(p);
      return true;
    }
    s.present[absent].store(0, std::memory_order_release);  // evicted meanwhile, or in flux
  }
  // No room that lasts: read through (ShardFiller::NoRoom).
  return Status(StatusCode::kResourceExhausted,
                BlockWhere({shard, b0}) + ": evicted again each time it was fetched; the cache (" +
                    root_ + ") is too small for the reads of this node's processes: raise "
                    "cache_size",
                ENOSPC);
}

Status RemoteDataset::WriteBlock(CachedShard& s, BlockId id, const std::byte* bytes,
                                 uint64_t len) {
  const uint64_t start = id.block * s.block_size;
  for (int round = 0;; ++round) {
    Status st = s.data.PWriteAll(bytes, len, start);
    if (st.ok() && fdatasync(s.data.fd()) != 0) st = Errno(s.data_path + ": fdatasync");
    if (st.ok()) return st;
    const int e = st.sys_errno();
    if (e != ENOSPC && e != EDQUOT) return st;
    // The file system is out of space (other files took it, or the floor is off): evict by the
    // schedule and try again; nothing to evict: no room (read through, docs/CACHE.md §4).
    RootCache* root = GetFetcher()->root.get();
    Result<uint64_t> freed = root != nullptr && round < 8 ? root->MakeRoom(Allocated(len) * 2)
                                                          : Result<uint64_t>(uint64_t{0});
    if (!freed.ok() || *freed == 0)
      return Status(StatusCode::kResourceExhausted,
                    BlockWhere(id) + ": no room in the cache directory " + root_ + " (" +
                        st.message() + ") and nothing left to evict",
                    ENOSPC);
  }
}

Result<bool> RemoteDataset::Fetch(const std::vector<BlockId>& missing, bool wait) {
  Fetcher* f = GetFetcher();
  std::unique_lock<std::mutex> lock(f->mu);
  if (!wait) {
    // A block that failed since the last call is this call's error (the next one tries again).
    for (const BlockId& id : missing) {
      auto it = f->blocks.find(id);
      if (it != f->blocks.end() && it->second.first == Fetcher::State::kFailed &&
          it->second.second.code() != StatusCode::kOk && requested_.count(id)) {
        Status st = it->second.second;
        f->blocks.erase(it);
        requested_.erase(id);
        return st.WithContext(BlockWhere(id));
      }
    }
  }
  // Needed now: to the front of the queue (a failed block is tried again once).
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    auto found = f->blocks.find(*it);
    if (found != f->blocks.end() && found->second.first == Fetcher::State::kFetching) continue;
    if (!wait && found != f->blocks.end() && requested_.count(*it)) continue;  // asked already
    if (!wait) requested_.insert(*it);
    if (found != f->blocks.end() && found->second.first == Fetcher::State::kQueued) {
      auto q = std::find_if(f->queue.begin(), f->queue.end(), [&](const BlockId& b) {
        return b.shard == it->shard && b.block == it->block;
      });
      if (q != f->queue.end()) f->queue.erase(q);
    }
    f->blocks[*it] = {Fetcher::State::kQueued, Status::OK()};
    f->queue.push_front(*it);
  }
  f->work_cv.notify_all();
  if (!wait) {
    for (const BlockId& id : missing) {
      if (f->blocks.count(id)) return false;
      requested_.erase(id);
    }
    return true;
  }
  for (const BlockId& id : missing) {
    f->done_cv.wait(lock, [&] {
      auto it = f->blocks.find(id);
      return f->stop || it == f->blocks.end() || it->second.first == Fetcher::State::kFailed;
    });
    auto it = f->blocks.find(id);
    if (it != f->blocks.end() && it->second.first == Fetcher::State::kFailed) {
      Status st = it->second.second;
      f->blocks.erase(it);  // the next Ensure tries again
      return st.WithContext(BlockWhere(id));
    }
    if (f->stop) return Status::Aborted(url_ + ": the dataset is closing");
  }
  return true;
}

Result<bool> PinTable::Pin(const CachedShard& s, uint32_t shard, uint64_t b0, uint64_t b1,
                           uint64_t* absent) {
  std::lock_guard<std::mutex> lock(mu);
  for (uint64_t b = b0; b <= b1; ++b) {
    Use& u = uses[{shard, b}];
    if (u.pins == 0) {
      Result<RangeLock> got = shard < pin_files.size() && pin_files[shard].valid()
                                  ? PinEntry(pin_files[shard].fd(), s.state, b)
                                  : Result<RangeLock>(Status::IoError(s.state_path + ": not open"));
      if (!got.ok() || !got->held()) {
        MaybeErase(uses.find({shard, b}));
        // Release what this call pinned (not a read: nothing consumed).
        for (uint64_t c = b0; c < b; ++c) {
          auto it = uses.find({shard, c});
          if (--it->second.pins == 0) it->second.lock.Release();
          MaybeErase(it);
        }
        if (!got.ok()) return got.status();
        *absent = b;
        return false;
      }
      u.lock = std::move(got).value();
    }
    ++u.pins;
  }
  return true;
}

void PinTable::Unpin(uint32_t shard, uint64_t b0, uint64_t b1, bool consumed) {
  std::lock_guard<std::mutex> lock(mu);
  for (uint64_t b = b0; b <= b1; ++b) {
    auto it = uses.find({shard, b});
    if (it == uses.end() || it->second.pins == 0) continue;
    Use& u = it->second;
    if (--u.pins == 0) u.lock.Release();
    if (consumed) u.fetched = false;
    if (consumed && u.wanted > 0 && --u.wanted == 0) --window_blocks;
    if (consumed && u.wanted == 0) {
      if (u.consumed) consumed_lru.erase(u.lru);
      u.lru = consumed_lru.insert(consumed_lru.end(), it->first);
      u.consumed = true;
    }
    MaybeErase(it);
  }
}

void PinTable::MaybeErase(std::map<BlockId, Use>::iterator it) {
  if (it == uses.end()) return;
  const Use& u = it->second;
  if (u.pins == 0 && u.wanted == 0 && !u.fetched && !u.consumed) uses.erase(it);
}

void RemoteDataset::ForgetReadAhead() {
  Fetcher* f = GetFetcher();
  if (f == nullptr) return;
  PinTable& t = *f->pins;
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto it = t.uses.begin(); it != t.uses.end();) {
    auto next = std::next(it);
    it->second.fetched = false;
    if (it->second.wanted > 0) {
      it->second.wanted = 0;
      --t.window_blocks;
    }
    t.MaybeErase(it);
    it = next;
  }
}

bool RemoteDataset::OwnsDataFile(dev_t dev, ino_t ino) const {
  for (const auto& s : shards_)
    if (s->dev == dev && s->ino == ino) return true;
  return false;
}

Result<uint64_t> RemoteDataset::EvictTier(int tier, uint64_t need) {
  Fetcher* f = fetcher_.load(std::memory_order_acquire);
  if (f == nullptr || f->pid != getpid() || shards_.empty()) return uint64_t{0};
  PinTable& t = *f->pins;
  uint64_t freed = 0;
  auto evict = [&](BlockId id) -> Result<uint64_t> {
    CachedShard& s = *shards_[id.shard];
    if (!t.evict_files[id.shard].valid()) return uint64_t{0};
    LIBSHARD_ASSIGN_OR_RETURN(uint64_t got, EvictEntry(t.evict_files[id.shard].fd(), s.state,
                                                       s.data, id.block, s.block_size, s.size));
    if (got > 0) s.present[id.block].store(0, std::memory_order_release);
    return got;
  };
  std::lock_guard<std::mutex> lock(t.mu);
  if (tier == 1) {
    // Read by this process and not announced again, least recently read first.
    for (auto it = t.consumed_lru.begin(); it != t.consumed_lru.end() && freed < need;) {
      const BlockId id = *it;
      auto use = t.uses.find(id);
      if (use != t.uses.end() && (use->second.pins > 0 || use->second.fetched)) {  // read again
        ++it;
        continue;
      }
      LIBSHARD_ASSIGN_OR_RETURN(uint64_t got, evict(id));
      freed += got;
      it = t.consumed_lru.erase(it);  // evicted, or in use elsewhere, or gone already
      if (use != t.uses.end()) {
        use->second.consumed = false;
        t.MaybeErase(use);
      }
    }
    return freed;
  }
  // Tier 3: the other present blocks of this dataset that this process neither pins nor has
  // announced, from a cursor that goes round the shards (their future use is unknown here).
  for (size_t n = 0; n < shards_.size() && freed < need; ++n) {
    const uint32_t k = evict_shard_ % shards_.size();
    CachedShard& s = *shards_[k];
    std::vector<std::byte> entries(s.blocks * kEntryBytes);
    if (s.state.PReadExact(entries.data(), entries.size(), kStateHeader).ok()) {
      for (uint64_t b = 0; b < s.blocks && freed < need; ++b) {
        if (format::GetU64(entries.data() + b * kEntryBytes) != kPresent) continue;
        auto use = t.uses.find({k, b});
        if (use != t.uses.end() &&
            (use->second.pins > 0 || use->second.wanted > 0 || use->second.fetched))
          continue;
        LIBSHARD_ASSIGN_OR_RETURN(uint64_t got, evict({k, b}));
        freed += got;
      }
    }
    if (freed < need) ++evict_shard_;
  }
  return freed;
}

void RemoteDataset::Prefetch(uint32_t shard, uint64_t offset, uint64_t length) {
  if (shard >= shards_.size() || length == 0) return;
  CachedShard& s = *shards_[shard];
  const uint64_t end = std::min(s.size, offset + length);
  if (offset >= end) return;
  Fetcher* f = GetFetcher();
  const uint64_t b0 = offset / s.block_size, b1 = (end - 1) / s.block_size;
  {
    // The read-ahead window: announced, so this process evicts none of these until read.
    PinTable& t = *f->pins;
    std::lock_guard<std::mutex> lock(t.mu);
    for (uint64_t b = b0; b <= b1; ++b) {
      auto [it, fresh] = t.uses.try_emplace(BlockId{shard, b});
      PinTable::Use& u = it->second;
      if (u.wanted++ == 0) ++t.window_blocks;
      if (u.consumed) {
        t.consumed_lru.erase(u.lru);
        u.consumed = false;
      }
    }
  }
  std::lock_guard<std::mutex> lock(f->mu);
  bool queued = false;
  for (uint64_t b = offset / s.block_size; b <= (end - 1) / s.block_size; ++b) {
    if (f->queue.size() >= f->max_queue) break;
    if (s.present[b].load(std::memory_order_acquire)) continue;
    const BlockId id{shard, b};
    if (f->blocks.count(id)) continue;  // queued, fetching, or failed (Ensure reports it)
    f->blocks[id] = {Fetcher::State::kQueued, Status::OK()};
    f->queue.push_back(id);
    queued = true;
  }
  if (queued) f->work_cv.notify_all();
}

}  // namespace libshard::remote
