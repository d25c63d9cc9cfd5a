// Healing a damaged cached copy (docs/CACHE.md §7): a shard range whose bytes fail their sample
// or field checksum is fetched again once, under each block's fetch lock, and checked again; the
// block checksums recorded at download tell damage on this node's disk from a damaged download,
// and a second failure is the bucket's. The checksums decide, not the store's generations: a
// store that sends none (or ignores the condition of a read) may have left another version's
// bytes in the cache, which the next read heals once the store serves the right ones again. A
// cached index that fails its checks is fetched again, checked and rewritten in place.
//
// Reading through (docs/CACHE.md §4): a range the cache has no room for, with nothing left to
// evict, is read from the store into the reader's memory, checked as cached bytes are, and never
// cached; a warning says so once per dataset.
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
  return s.url + " (" + store_->KeyWhere(s.name) + ", bytes " +
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
  // Replaced since the open? A store that ignores the condition of a read (and names no
  // generation in its reply) serves the new version's bytes under the old name. Only a
  // generation named now and at the open, and differing, or another size, proves it; a store
  // that names none proves nothing, and the bytes fetched again decide.
  Result<objstore::ObjectInfo> info = store_->Head(s.name);
  if (!info.ok()) return info.status().WithContext(where + ": " + what + "; checking the object");
  const bool unversioned = info->generation.empty() || s.etag.empty();
  if (info->size != s.size || (!unversioned && info->generation != s.etag)) {
    DropBlocks(shard, b0, b1);  // they may hold the other version's bytes: never served again
    return Status::IoError(where + ": " + what +
                               "; the object was replaced since the dataset was opened (its ETag "
                               "is now " +
                               info->generation + ", " + std::to_string(info->size) +
                               " bytes); reopen the dataset to read the new version",
                           ESTALE);
  }
  Fetcher* f = GetFetcher();
  PinTable& pins = *f->pins;
  {
    std::lock_guard<std::mutex> lock(pins.mu);
    for (uint64_t b = b0; b <= b1; ++b) pins.healing.insert({shard, b});
  }
  BlockVerdict verdict;
  Status fetched;
  for (uint64_t b = b0; b <= b1; ++b) {
    if (fetched.ok()) fetched = RefetchBlock({shard, b}, offset, end - offset, dst, &verdict);
    std::lock_guard<std::mutex> lock(pins.mu);
    pins.healing.erase({shard, b});
    pins.healed_cv.notify_all();
  }
  if (NoRoom(fetched) && dst != nullptr) {
    // No room to cache the fresh bytes: they go to the reader only.
    fetched = ReadThrough(shard, offset, length, dst);
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
  // The bucket's bytes: none of them stays in the cache as present.
  DropBlocks(shard, b0, b1);
  if (unversioned)
    return Status::IoError(
        where + ": the object does not hold the bytes the index records: " +
            WithoutLocalAdvice(again.message()) + " after a fresh download; the store names no "
            "version (ETag) of it, so whether it was replaced since the dataset was opened or is "
            "damaged cannot be told: reopen the dataset, and if that fails the same way, upload "
            "the dataset again from its source",
        ESTALE);
  return Status::Corruption(
      where + ": the object in the bucket is damaged: " + WithoutLocalAdvice(again.message()) +
      " after a fresh download (" +
      (verdict.same_bytes ? "the bucket serves the bytes an earlier download delivered"
                          : "the bucket served other bytes on each download: the server or the "
                            "network damages them") +
      "); this node's cache is not at fault: upload the dataset again from its source");
}

void RemoteDataset::DropBlocks(uint32_t shard, uint64_t b0, uint64_t b1) {
  // Best effort: a block pinned by a reader elsewhere stays until evicted.
  Fetcher* f = GetFetcher();
  PinTable& pins = *f->pins;
  CachedShard& s = *shards_[shard];
  RootCache* root = f->root.get();
  if (root == nullptr || shard >= pins.evict_files.size() || !pins.evict_files[shard].valid())
    return;
  uint64_t freed = 0;
  for (uint64_t b = b0; b <= b1 && b < s.blocks; ++b) {
    Result<uint64_t> got =
        EvictEntry(pins.evict_files[shard].fd(), s.state, s.data, b, s.block_size, s.size);
    if (got.ok() && *got > 0) {
      freed += *got;
      s.present[b].store(0, std::memory_order_release);
    }
  }
  root->Unreserve(freed);
}

Status RemoteDataset::RefetchBlock(BlockId id, uint64_t offset, uint64_t length, std::byte* dst,
                                   BlockVerdict* verdict) {
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
    Status room = root->Reserve(len, options_.dataset.cache_size, min_free_, s.state.fd());
    if (room.code() == StatusCode::kResourceExhausted)
      return Status(StatusCode::kResourceExhausted, room.message(), ENOSPC);  // NoRoom
    LIBSHARD_RETURN_IF_ERROR(room);
  }
  PendingDownload pending(present ? nullptr : root, len);
  LIBSHARD_RETURN_IF_ERROR(store_->Read(s.name, start, len, s.etag, buffer.get()));
  const uint64_t sum = format::Xxh3(buffer.get(), len);
  if (!present || sum != recorded) verdict->same_bytes = false;
  // As a fetch writes a block (docs/CACHE.md §3): bytes, fdatasync, checksum, then the word.
  if (present) {
    // Absent first: the bytes written next are not the ones recorded until the word says so.
    const uint64_t zero = 0;
    LIBSHARD_RETURN_IF_ERROR(s.state.PWriteAll(&zero, 8, entry));
    s.present[id.block].store(0, std::memory_order_release);
  }
  LIBSHARD_RETURN_IF_ERROR(WriteBlock(s, id, buffer.get(), len));
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
  const std::string where = url_ + "/" + index_name_ + " (" + store_->KeyWhere(index_name_) +
                            ", ETag " + index_info_.generation + ")";
  Result<std::string> cached = ReadCachedFile(index_path_, index_info_.size);
  Status local = cached.ok()
                     ? CheckIndexBytes(AsBytes(*cached), index_info_.size, index_xxh3_, index_path_)
                     : cached.status();
  bool repaired = false;
  if (!local.ok()) {
    LIBSHARD_ASSIGN_OR_RETURN(
        std::string fresh,
        FetchChecked(*store_, index_name_, index_info_, [&](const std::string& b) {
          return CheckIndexBytes(AsBytes(b), index_info_.size, index_xxh3_, where);
        }));
    LIBSHARD_RETURN_IF_ERROR(RewriteCachedFile(index_path_, fresh));
    repaired = true;
  }
  // A fresh reader: the current one keeps a block that failed to load as failed, and another
  // process may have repaired the file since.
  Result<std::shared_ptr<Dataset>> inner = open_local_(view_, options_.dataset);
  if (!inner.ok()) return Status(failure.code(), what, failure.sys_errno());
  AdoptInner(std::move(inner).value());
  if (repaired)
    CacheWarning(where + ": " + what + "; the cached copy " + index_path_ +
                 " was damaged (it failed its own checksums): fetched again, checked and "
                 "repaired");
  return Status::OK();
}

bool RemoteDataset::IsNoRoom(const Status& st) { return NoRoom(st); }

Status RemoteDataset::ReadThrough(uint32_t shard, uint64_t offset, uint64_t length,
                                  std::byte* dst) {
  if (shard >= shards_.size())
    return Status::InvalidArgument(url_ + ": shard " + std::to_string(shard) + " out of range");
  const CachedShard& s = *shards_[shard];
  const uint64_t end = std::min(s.size, offset + length);
  const uint64_t n = offset < end ? end - offset : 0;
  if (!warned_no_room_.exchange(true))
    CacheWarning(url_ + ": the cache directory " + root_ + " has no room for more blocks and "
                 "nothing can be evicted (each is being read, or the disk is full of other "
                 "files); reads go to the object store uncached, slower, until there is room: "
                 "free space, raise cache_size, or point cache= at a larger disk "
                 "(docs/CACHE.md §4)");
  if (n > 0)
    LIBSHARD_RETURN_IF_ERROR(store_->Read(s.name, offset, n, s.etag, dst)
                                 .WithContext("reading " + s.url + " through, uncached"));
  std::memset(dst + n, 0, length - n);
  return Status::OK();
}

Status RemoteDataset::ReadStoredRange(uint64_t i, uint64_t offset, uint64_t size,
                                      std::byte* dst) const {
  LIBSHARD_ASSIGN_OR_RETURN(SampleLocation loc, Locate(i));
  // A range outside the sample, or none: the local reader's answer (its error names it).
  if (size == 0 || offset > loc.stored_size || size > loc.stored_size - offset)
    return inner().ReadStoredRange(i, offset, size, dst);
  auto* self = const_cast<RemoteDataset*>(this);
  std::unique_ptr<Hold> hold;  // only the blocks of this range, pinned while it is read
  Status st = self->Ensure(loc.shard, loc.offset + offset, size, &hold);
  if (IsNoRoom(st)) return self->ReadThrough(loc.shard, loc.offset + offset, size, dst);
  if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
  return inner().ReadStoredRange(i, offset, size, dst);
}

Result<Sample> RemoteDataset::ReadSampleThrough(uint64_t i) const {
  LIBSHARD_ASSIGN_OR_RETURN(SampleLocation loc, Locate(i));
  std::shared_ptr<std::byte[]> stored =
      internal::AllocateAligned(std::max<uint64_t>(loc.stored_size, 1), 4096);
  if (stored == nullptr)
    return Status::ResourceExhausted(url_ + ": sample " + std::to_string(i) +
                                     ": cannot allocate " + std::to_string(loc.stored_size) +
                                     " bytes");
  LIBSHARD_RETURN_IF_ERROR(const_cast<RemoteDataset*>(this)->ReadThrough(
      loc.shard, loc.offset, loc.stored_size, stored.get()));
  // Checked as the local reader checks cached bytes: these never pass through the cache.
  const uint64_t sum = format::Xxh3(stored.get(), loc.stored_size);
  if (sum != loc.checksum)
    return Status::Corruption(RangeWhere(loc.shard, loc.offset, loc.stored_size) + ": sample " +
                              std::to_string(i) + ", read through uncached: checksum mismatch: "
                              "xxh3 " + format::Hex16(sum) + " != " + format::Hex16(loc.checksum) +
                              " recorded in the index; the object in the bucket is damaged or "
                              "was replaced: reopen the dataset, or upload it again");
  std::shared_ptr<std::byte[]> raw = stored;
  if (loc.flags & (kSampleFlagZstd | kSampleFlagFieldCodecs)) {
    raw = internal::AllocateAligned(std::max<uint64_t>(loc.raw_size, 1), 64);
    if (raw == nullptr)
      return Status::ResourceExhausted(url_ + ": sample " + std::to_string(i) +
                                       ": cannot allocate " + std::to_string(loc.raw_size) +
                                       " bytes");
    LIBSHARD_RETURN_IF_ERROR(
        inner().Decode(i, {stored.get(), loc.stored_size}, {raw.get(), loc.raw_size}));
  }
  const uint64_t size = raw == stored ? loc.stored_size : loc.raw_size;
  return inner().MakeSample(i, raw.get(), 0, size, std::shared_ptr<const void>(raw, raw.get()),
                            {});
}

}  // namespace libshard::remote
