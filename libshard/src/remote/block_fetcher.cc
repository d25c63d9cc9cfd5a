// Fetching shard blocks into the node-local cache (docs/CACHE.md §3): the process's fetcher
// threads, the ShardFiller calls (Ensure, Request, Prefetch) and the cache's room check.
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "format/checksum.h"
#include "io/filesystem.h"
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
  for (const auto& s : shards_) {
    Result<io::File> lf = io::File::Open(s->state_path, O_RDWR | O_CLOEXEC);
    fresh->lock_files.push_back(lf.ok() ? std::move(lf).value() : io::File());
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
  // This thread's own client: made here, after any fork, used by this thread only.
  Result<std::unique_ptr<io::S3Client>> client = io::S3Client::Create(config_);
  uint64_t max_block = 0;
  for (const auto& s : shards_) max_block = std::max(max_block, s->block_size);
  std::shared_ptr<std::byte[]> buffer = internal::AllocateAligned(std::max<uint64_t>(max_block, 4096));
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
    Status st = !client.ok() ? client.status()
                : buffer == nullptr
                    ? Status::ResourceExhausted("cannot allocate a block buffer")
                    : FetchBlock(client->get(), id, buffer.get(),
                                 f->lock_files[id.shard].valid() ? f->lock_files[id.shard].fd()
                                                                 : shards_[id.shard]->state.fd());
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

Status RemoteDataset::CheckRoom(const CachedShard& s, uint64_t bytes) {
  struct statvfs vfs {};
  if (fstatvfs(s.state.fd(), &vfs) == 0) {
    const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
    if (free_bytes < bytes + min_free_)
      return Status::ResourceExhausted(
          cache_dir_ + ": the cache is full: " + std::to_string(free_bytes) +
          " bytes free on its file system, which must keep " + std::to_string(min_free_) +
          " free (LIBSHARD_CACHE_MIN_FREE); free space or point cache= at a larger disk");
  }
  if (options_.cache_size == 0) return Status::OK();
  uint64_t used = 0;
  for (const auto& other : shards_) {
    struct stat st {};
    if (fstat(other->data.fd(), &st) == 0) used += uint64_t(st.st_blocks) * 512;
  }
  if (used + bytes > options_.cache_size)
    return Status::ResourceExhausted(
        cache_dir_ + ": the cache is full: it holds " + std::to_string(used) +
        " bytes of cache_size " + std::to_string(options_.cache_size) + " and a block of " +
        std::to_string(bytes) + " bytes does not fit; raise cache_size (at least the dataset's " +
        std::to_string(inner_ ? inner_->total_stored_bytes() : 0) + " bytes)");
  return Status::OK();
}

Status RemoteDataset::FetchBlock(io::S3Client* client, BlockId id, std::byte* buffer,
                                 int lock_fd) {
  CachedShard& s = *shards_[id.shard];
  LIBSHARD_ASSIGN_OR_RETURN(bool here, s.IsPresent(id.block));
  if (here) return Status::OK();
  const uint64_t entry = kStateHeader + id.block * kEntryBytes;
  // One process of the node downloads the block; the others wait here, then find it present.
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                            RangeLock::Acquire(lock_fd, entry, kEntryBytes, true, s.state_path));
  LIBSHARD_ASSIGN_OR_RETURN(here, s.IsPresent(id.block));
  if (here) return Status::OK();
  const uint64_t start = id.block * s.block_size;
  const uint64_t len = s.BlockLength(id.block);
  LIBSHARD_RETURN_IF_ERROR(CheckRoom(s, len));
  LIBSHARD_RETURN_IF_ERROR(client->GetRange(s.object, start, len, s.etag, buffer));
  // Present only once the bytes are written in full and durable: data, fdatasync, then entry.
  LIBSHARD_RETURN_IF_ERROR(s.data.PWriteAll(buffer, len, start));
  if (fdatasync(s.data.fd()) != 0) return Errno(s.data_path + ": fdatasync");
  const uint64_t sum = format::Xxh3(buffer, len);
  LIBSHARD_RETURN_IF_ERROR(s.state.PWriteAll(&sum, 8, entry + 8));
  const uint64_t word = kPresent;
  LIBSHARD_RETURN_IF_ERROR(s.state.PWriteAll(&word, 8, entry));
  s.present[id.block].store(1, std::memory_order_release);
  return Status::OK();
}

Result<bool> RemoteDataset::Wait(uint32_t shard, uint64_t offset, uint64_t length, bool wait) {
  if (shard >= shards_.size())
    return Status::InvalidArgument(url_ + ": shard " + std::to_string(shard) + " out of range");
  CachedShard& s = *shards_[shard];
  if (length == 0) return true;
  const uint64_t end = std::min(s.size, offset + length);
  if (offset >= end) return true;
  const uint64_t b0 = offset / s.block_size, b1 = (end - 1) / s.block_size;
  std::vector<BlockId> missing;
  for (uint64_t b = b0; b <= b1; ++b) {
    LIBSHARD_ASSIGN_OR_RETURN(bool here, s.IsPresent(b));
    if (!here) missing.push_back({shard, b});
  }
  if (missing.empty()) return true;
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

void RemoteDataset::Prefetch(uint32_t shard, uint64_t offset, uint64_t length) {
  if (shard >= shards_.size() || length == 0) return;
  CachedShard& s = *shards_[shard];
  const uint64_t end = std::min(s.size, offset + length);
  if (offset >= end) return;
  Fetcher* f = GetFetcher();
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
