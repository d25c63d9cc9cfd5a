// RemoteDataset (remote_dataset.h): a Dataset over the cached copy of an s3:// dataset that is
// also the loader's ShardFiller. Private to remote/: remote_dataset.cc opens it (the cache
// directory, manifest, index, shard probes and the version's view); block_fetcher.cc fetches
// shard blocks into the cache on the process's fetcher threads.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "io/s3_client.h"
#include "libshard/dataset.h"
#include "remote/cache_files.h"
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
};

class RemoteDataset final : public Dataset, public ShardFiller {
 public:
  RemoteDataset() = default;
  ~RemoteDataset() override {
    Fetcher* f = fetcher_.load();
    if (f == nullptr) return;
    if (f->pid != getpid()) {
      // Inherited through fork: its threads are the parent's, its mutex's state unknown.
      (void)owned_fetcher_.release();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(f->mu);
      f->stop = true;
    }
    f->work_cv.notify_all();
    f->done_cv.notify_all();
    for (std::thread& t : f->threads) t.join();
  }

  static Result<std::shared_ptr<Dataset>> Open(const std::string& url,
                                               const DatasetOptions& options,
                                               LocalOpen open_local);

  // ---- Dataset: the cached copy, after Ensure for what is read ----
  const std::string& path() const override { return url_; }
  uint64_t size() const override { return inner_->size(); }
  const Schema& schema() const override { return inner_->schema(); }
  const std::vector<ShardInfo>& shards() const override { return inner_->shards(); }
  uint64_t total_stored_bytes() const override { return inner_->total_stored_bytes(); }
  uint64_t total_raw_bytes() const override { return inner_->total_raw_bytes(); }
  const DatasetProvenance& provenance() const override { return inner_->provenance(); }
  std::vector<uint8_t> field_codecs() const override { return inner_->field_codecs(); }
  uint32_t index_version() const override { return inner_->index_version(); }
  Result<std::vector<uint64_t>> field_stored_sizes(uint64_t i) const override {
    return inner_->field_stored_sizes(i);
  }
  ShardFiller* shard_filler() const override { return const_cast<RemoteDataset*>(this); }
  SampleLocation location(uint64_t i) const override { return inner_->location(i); }
  Result<SampleLocation> Locate(uint64_t i) const override { return inner_->Locate(i); }
  TensorLocation tensor(uint64_t i, size_t f) const override { return inner_->tensor(i, f); }
  uint64_t length(uint64_t i) const override { return inner_->length(i); }
  std::vector<uint64_t> lengths() const override { return inner_->lengths(); }
  Result<Provenance> source(uint64_t i) const override { return inner_->source(i); }
  Result<Metadata> metadata(uint64_t i) const override { return inner_->metadata(i); }
  Result<Sample> Read(uint64_t i) const override {
    LIBSHARD_RETURN_IF_ERROR(EnsureSample(i));
    return inner_->Read(i);
  }
  Status Verify(uint64_t i) const override {
    LIBSHARD_RETURN_IF_ERROR(EnsureSample(i));
    return inner_->Verify(i);
  }
  // Field checksums (FORMAT.md §3.9): from the cached index; the bytes they cover are read
  // through the cache (EnsureSample) where this reads shards itself.
  bool has_field_checksums() const override { return inner_->has_field_checksums(); }
  Result<std::vector<uint64_t>> field_checksums(uint64_t i) const override {
    return inner_->field_checksums(i);
  }
  Status VerifyFields(uint64_t i, const std::byte* base, uint64_t base_offset, uint64_t base_size,
                      std::span<const size_t> fields) const override {
    return inner_->VerifyFields(i, base, base_offset, base_size, fields);
  }
  Status FieldRegions(uint64_t i, std::vector<uint64_t>* offsets,
                      std::vector<uint64_t>* sizes) const override {
    return inner_->FieldRegions(i, offsets, sizes);
  }
  Result<std::vector<uint64_t>> ComputeFieldChecksums(uint64_t i) const override {
    LIBSHARD_RETURN_IF_ERROR(EnsureSample(i));
    return inner_->ComputeFieldChecksums(i);
  }
  Status Decode(uint64_t i, std::span<const std::byte> stored,
                std::span<std::byte> raw) const override {
    return inner_->Decode(i, stored, raw);
  }
  Status DecodeSelected(uint64_t i, std::span<const std::byte> stored, std::span<std::byte> raw,
                        std::span<const size_t> fields, uint64_t max_len) const override {
    return inner_->DecodeSelected(i, stored, raw, fields, max_len);
  }
  Result<Sample> MakeSample(uint64_t i, const std::byte* base, uint64_t base_offset,
                            uint64_t base_size, std::shared_ptr<const void> memory,
                            std::span<const size_t> fields) const override {
    return inner_->MakeSample(i, base, base_offset, base_size, std::move(memory), fields);
  }

  // ---- ShardFiller ----
  Status Ensure(uint32_t shard, uint64_t offset, uint64_t length) override {
    return Wait(shard, offset, length, /*wait=*/true).status();
  }
  Result<bool> Request(uint32_t shard, uint64_t offset, uint64_t length) override {
    return Wait(shard, offset, length, /*wait=*/false);
  }
  void Prefetch(uint32_t shard, uint64_t offset, uint64_t length) override;
  bool Hungry() const override {
    Fetcher* f = GetFetcher();
    if (f == nullptr) return false;
    std::lock_guard<std::mutex> lock(f->mu);
    return f->queue.size() < f->max_queue;
  }

 private:
  Status EnsureSample(uint64_t i) const {
    LIBSHARD_ASSIGN_OR_RETURN(SampleLocation loc, inner_->Locate(i));
    Status st = const_cast<RemoteDataset*>(this)->Ensure(loc.shard, loc.offset, loc.stored_size);
    return st.ok() ? st : st.WithContext("sample " + std::to_string(i));
  }
  // Ensure (wait) or Request (no wait).
  Result<bool> Wait(uint32_t shard, uint64_t offset, uint64_t length, bool wait);
  // The fetcher of this process, started on first use (nullptr only when threads cannot start).
  Fetcher* GetFetcher() const;
  void FetcherLoop(Fetcher* f);
  // Downloads one block unless present (in this or another process); docs/CACHE.md §3.
  Status FetchBlock(io::S3Client* client, BlockId id, std::byte* buffer, int lock_fd);
  Status CheckRoom(const CachedShard& s, uint64_t bytes);
  // "block 3 (bytes 12582912-16777215) of s3://b/p/shard-00000.lss"
  std::string BlockWhere(BlockId id) const {
    const CachedShard& s = *shards_[id.shard];
    const uint64_t start = id.block * s.block_size;
    return "block " + std::to_string(id.block) + " (bytes " + std::to_string(start) + "-" +
           std::to_string(start + s.BlockLength(id.block) - 1) + ") of " + s.url;
  }

  std::string url_;
  std::string cache_dir_;  // this dataset's directory in the cache
  io::S3Config config_;
  DatasetOptions options_;
  uint32_t connections_ = 8;
  uint64_t min_free_ = 0;
  std::shared_ptr<Dataset> inner_;
  std::vector<std::unique_ptr<CachedShard>> shards_;
  mutable std::mutex fetcher_mu_;
  mutable std::atomic<Fetcher*> fetcher_{nullptr};
  mutable std::unique_ptr<Fetcher> owned_fetcher_;
  // Blocks a Request queued and has not yet seen finish (guarded by the fetcher's mu).
  std::set<BlockId> requested_;
};

}  // namespace libshard::remote
