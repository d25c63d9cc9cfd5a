// Healing a damaged cached copy (docs/CACHE.md §7): a shard range whose bytes fail their sample
// or field checksum is fetched again once, under each block's fetch lock, and checked again; the
// block checksums recorded at download tell damage on this node's disk from a damaged download,
// and a second failure is the bucket's. A cached index that fails its checks is fetched again,
// checked and rewritten in place.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "format/bytes.h"
#include "format/checksum.h"
#include "io/filesystem.h"
#include "remote/cache_log.h"
#include "remote/cache_verify.h"
#include "remote/remote_dataset_impl.h"

namespace libshard::remote {

std::string RemoteDataset::RangeWhere(uint32_t shard, uint64_t offset, uint64_t length) const {
  const CachedShard& s = *shards_[shard];
  return s.url + " (bucket " + s.object.bucket + ", key " + s.object.key + ", bytes " +
         std::to_string(offset) + "-" + std::to_string(offset + length - 1) + ", ETag " + s.etag +
         ")";
}

Status RemoteDataset::HealSample(uint64_t i, const std::function<Status()>& read) const {
  Status st;
  {
    std::unique_ptr<Hold> hold;
    LIBSHARD_RETURN_IF_ERROR(EnsureSample(i, &hold));
    st = read();
  }  // the pin goes before a heal, which takes the blocks' exclusive locks
  if (st.ok() || st.code() != StatusCode::kCorruption) return st;
  LIBSHARD_ASSIGN_OR_RETURN(SampleLocation loc, Locate(i));
  return const_cast<RemoteDataset*>(this)->Heal(loc.shard, loc.offset, loc.stored_size, st, nullptr,
                                                [&] {
                                                  std::unique_ptr<Hold> hold;
                                                  LIBSHARD_RETURN_IF_ERROR(EnsureSample(i, &hold));
                                                  return read();
                                                });
}

Status RemoteDataset::Heal(uint32_t shard, uint64_t offset, uint64_t length, const Status& failure,
                           std::byte* dst, const std::function<Status()>& recheck) {
  if (shard >= shards_.size()) return failure;
  CachedShard& s = *shards_[shard];
  const uint64_t end = std::min(s.size, offset + length);
  if (offset >= end) return failure;
  const uint64_t b0 = offset / s.block_size, b1 = (end - 1) / s.block_size;
  const std::string where = RangeWhere(shard, offset, end - offset);
  const std::string what = WithoutLocalAdvice(failure.message());
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<io::S3Client> client, io::S3Client::Create(config_));
  // Replaced since the open? A server that ignores If-Match (and sends no ETag) serves the new
  // version's bytes under the old name.
  Result<io::ObjectInfo> info = client->Head(s.object);
  if (!info.ok()) return info.status().WithContext(where + ": " + what + "; checking the object");
  if (info->etag != s.etag || info->size != s.size)
    return Status::IoError(where + ": " + what +
                               "; the object was replaced since the dataset was opened (its ETag "
                               "is now " +
                               info->etag +
                               "); reopen the dataset to read the new "
                               "version",
                           ESTALE);
  Fetcher* f = GetFetcher();
  PinTable& pins = *f->pins;
  {
    std::lock_guard<std::mutex> lock(pins.mu);
    for (uint64_t b = b0; b <= b1; ++b) pins.healing.insert({shard, b});
  }
  BlockVerdict verdict;
  Status fetched;
  for (uint64_t b = b0; b <= b1; ++b) {
    if (fetched.ok())
      fetched = RefetchBlock(client.get(), {shard, b}, offset, end - offset, dst, &verdict);
    std::lock_guard<std::mutex> lock(pins.mu);
    pins.healing.erase({shard, b});
    pins.healed_cv.notify_all();
  }
  if (!fetched.ok()) return fetched.WithContext(where + ": " + what + "; fetching it again");
  Status again = recheck();
  if (again.ok()) {
    CacheWarning(where + ": " + what + "; the cached copy was damaged (" +
                 (verdict.local_damage
                      ? "its bytes no longer matched the checksum recorded when they were "
                        "downloaded: damaged on this node's disk"
                      : "it held what an earlier download delivered, and the bucket serves other "
                        "bytes: that download was damaged") +
                 "); fetched again from the bucket, it checks now");
    return Status::OK();
  }
  if (again.code() != StatusCode::kCorruption) return again;
  // The bucket's bytes: none of them stays in the cache as present (best effort: a block pinned
  // by a reader elsewhere stays until evicted).
  if (RootCache* root = f->root.get();
      root != nullptr && shard < pins.evict_files.size() && pins.evict_files[shard].valid()) {
    uint64_t freed = 0;
    for (uint64_t b = b0; b <= b1; ++b) {
      Result<uint64_t> got =
          EvictEntry(pins.evict_files[shard].fd(), s.state, s.data, b, s.block_size, s.size);
      if (got.ok() && *got > 0) {
        freed += *got;
        s.present[b].store(0, std::memory_order_release);
      }
    }
    root->Unreserve(freed);
  }
  return Status::Corruption(
      where + ": the object in the bucket is damaged: " + WithoutLocalAdvice(again.message()) +
      " after a fresh download (" +
      (verdict.same_bytes ? "the bucket serves the bytes an earlier download delivered"
                          : "the bucket served other bytes on each download: the server or the "
                            "network damages them") +
      "); this node's cache is not at fault: upload the dataset again from its source");
}

Status RemoteDataset::RefetchBlock(io::S3Client* client, BlockId id, uint64_t offset,
                                   uint64_t length, std::byte* dst, BlockVerdict* verdict) {
  CachedShard& s = *shards_[id.shard];
  Fetcher* f = GetFetcher();
  const int lock_fd = f->lock_files[id.shard].valid() ? f->lock_files[id.shard].fd() : s.state.fd();
  const uint64_t entry = kStateHeader + id.block * kEntryBytes;
  const uint64_t start = id.block * s.block_size, len = s.BlockLength(id.block);
  std::shared_ptr<std::byte[]> buffer = internal::AllocateAligned(std::max<uint64_t>(len, 4096));
  if (buffer == nullptr) return Status::ResourceExhausted(BlockWhere(id) + ": cannot allocate");
  // Waits for readers of other processes to finish (this process's take no new pin meanwhile).
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                            RangeLock::Acquire(lock_fd, entry, kEntryBytes, true, s.state_path));
  std::byte record[kEntryBytes];
  LIBSHARD_RETURN_IF_ERROR(s.state.PReadExact(record, kEntryBytes, entry));
  const bool present = format::GetU64(record) == kPresent;
  const uint64_t recorded = format::GetU64(record + 8);
  RootCache* root = f->root.get();
  if (present) {
    LIBSHARD_RETURN_IF_ERROR(s.data.PReadExact(buffer.get(), len, start));
    if (format::Xxh3(buffer.get(), len) != recorded) verdict->local_damage = true;
  } else {
    if (root == nullptr) return Status::IoError(root_ + ": the cache's usage file is not open");
    LIBSHARD_RETURN_IF_ERROR(root->Reserve(len, options_.cache_size, min_free_, s.state.fd()));
  }
  PendingDownload pending(present ? nullptr : root, len);
  LIBSHARD_RETURN_IF_ERROR(client->GetRange(s.object, start, len, s.etag, buffer.get()));
  const uint64_t sum = format::Xxh3(buffer.get(), len);
  if (!present || sum != recorded) verdict->same_bytes = false;
  // As a fetch writes a block (docs/CACHE.md §3): bytes, fdatasync, checksum, then the word.
  LIBSHARD_RETURN_IF_ERROR(s.data.PWriteAll(buffer.get(), len, start));
  if (fdatasync(s.data.fd()) != 0) return Errno(s.data_path + ": fdatasync");
  pending.Landed();
  s.DropCachedCopy(id.block);
  LIBSHARD_RETURN_IF_ERROR(s.state.PWriteAll(&sum, 8, entry + 8));
  const uint64_t word = kPresent;
  LIBSHARD_RETURN_IF_ERROR(s.state.PWriteAll(&word, 8, entry));
  s.present[id.block].store(1, std::memory_order_release);
  if (dst != nullptr) {
    const uint64_t lo = std::max(start, offset), hi = std::min(start + len, offset + length);
    if (hi > lo) std::memcpy(dst + (lo - offset), buffer.get() + (lo - start), hi - lo);
  }
  return Status::OK();
}

Status RemoteDataset::HealIndex(const Status& failure) const {
  std::lock_guard<std::mutex> lock(inners_mu_);  // one repair at a time
  const std::string what = WithoutLocalAdvice(failure.message());
  const std::string url = url_ + "/" + index_obj_.key.substr(index_obj_.key.rfind('/') + 1);
  const std::string where = url + " (bucket " + index_obj_.bucket + ", key " + index_obj_.key +
                            ", ETag " + index_info_.etag + ")";
  Result<std::string> cached = ReadCachedFile(index_path_, index_info_.size);
  Status local = cached.ok()
                     ? CheckIndexBytes(AsBytes(*cached), index_info_.size, index_xxh3_, index_path_)
                     : cached.status();
  bool repaired = false;
  if (!local.ok()) {
    LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<io::S3Client> client, io::S3Client::Create(config_));
    LIBSHARD_ASSIGN_OR_RETURN(
        std::string fresh,
        FetchChecked(client.get(), index_obj_, index_info_, [&](const std::string& b) {
          return CheckIndexBytes(AsBytes(b), index_info_.size, index_xxh3_, where);
        }));
    LIBSHARD_RETURN_IF_ERROR(RewriteCachedFile(index_path_, fresh));
    repaired = true;
  }
  // A fresh reader: the current one keeps a block that failed to load as failed, and another
  // process may have repaired the file since.
  Result<std::shared_ptr<Dataset>> inner = open_local_(view_, options_);
  if (!inner.ok()) return Status(failure.code(), what, failure.sys_errno());
  inners_.push_back(std::move(inner).value());
  inner_.store(inners_.back().get(), std::memory_order_release);
  if (repaired)
    CacheWarning(where + ": " + what + "; the cached copy " + index_path_ +
                 " was damaged (it failed its own checksums): fetched again, checked and "
                 "repaired");
  return Status::OK();
}

}  // namespace libshard::remote
