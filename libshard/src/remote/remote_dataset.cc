// s3:// datasets through the node-local cache (remote_dataset.h, docs/CACHE.md).
#include "remote/remote_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/manifest.h"
#include "format/shard_format.h"
#include "io/file.h"
#include "io/filesystem.h"
#include "io/s3_client.h"
#include "remote/shard_filler.h"

namespace libshard::remote {

namespace {

// docs/CACHE.md §2: the state file of a shard's cache file.
constexpr char kStateMagic[8] = {'L', 'S', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr uint64_t kStateHeader = 64;
constexpr uint64_t kEntryBytes = 16;
constexpr uint64_t kPresent = 0x31544E4553455250ull;  // "PRESENT1"
constexpr uint64_t kDefaultBlock = uint64_t{4} << 20;
constexpr uint64_t kMaxSmallObject = uint64_t{256} << 20;  // manifest
constexpr uint64_t kMaxIndexObject = uint64_t{16} << 30;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

uint64_t EnvBytes(const char* name, uint64_t fallback) {
  const std::string v = Env(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  return (end == v.c_str() || *end != '\0') ? fallback : n;
}

// A name made of [A-Za-z0-9._-] from `s` (others become '_'), at most `max` characters.
std::string Sanitize(std::string_view s, size_t max) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max) break;
    out.push_back(std::isalnum(c) || c == '.' || c == '-' || c == '_' ? static_cast<char>(c)
                                                                      : '_');
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

std::string EtagTag(const std::string& etag) {
  return format::Hex16(format::Xxh3(etag.data(), etag.size()));
}

Status Errno(const std::string& what, int e = errno) { return Status::FromErrno(e, what); }

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::IoError(dir + ": cannot create the cache directory: " + ec.message() +
                               " (set cache= / LIBSHARD_CACHE_DIR to a writable node-local disk)",
                           ec.value());
  return Status::OK();
}

// An OFD byte-range lock (fcntl F_OFD_SETLKW): held by this open file description until
// released or closed; released by the kernel when the process dies (even by SIGKILL).
class RangeLock {
 public:
  RangeLock() = default;
  static Result<RangeLock> Acquire(int fd, uint64_t start, uint64_t len, bool exclusive,
                                   const std::string& path) {
    struct flock fl {};
    fl.l_type = exclusive ? F_WRLCK : F_RDLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(start);
    fl.l_len = static_cast<off_t>(len);
    while (fcntl(fd, F_OFD_SETLKW, &fl) != 0) {
      if (errno == EINTR) continue;
      return Errno(path + ": fcntl(F_OFD_SETLKW) at " + std::to_string(start) +
                   " (the cache directory must be on a file system with local locks)");
    }
    RangeLock l;
    l.fd_ = fd;
    l.start_ = start;
    l.len_ = len;
    return l;
  }
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
    struct flock fl {};
    fl.l_type = F_UNLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(start_);
    fl.l_len = static_cast<off_t>(len_);
    (void)fcntl(fd_, F_OFD_SETLK, &fl);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  uint64_t start_ = 0, len_ = 0;
};

// One shard's cache: the sparse data file and its state file (docs/CACHE.md §2).
struct CachedShard {
  io::S3Url object;
  std::string url;  // s3://bucket/key, for messages
  std::string etag;
  uint64_t size = 0;
  uint64_t block_size = kDefaultBlock;
  uint64_t blocks = 0;
  std::string data_path, state_path;
  io::File data, state;
  // In-process knowledge that a block is present (it never becomes absent while open).
  std::unique_ptr<std::atomic<uint8_t>[]> present;

  uint64_t BlockLength(uint64_t b) const {
    return std::min(block_size, size - b * block_size);
  }
  Result<bool> IsPresent(uint64_t b) {
    if (present[b].load(std::memory_order_acquire)) return true;
    uint64_t word = 0;
    LIBSHARD_RETURN_IF_ERROR(state.PReadExact(&word, 8, kStateHeader + b * kEntryBytes));
    if (word != kPresent) return false;
    present[b].store(1, std::memory_order_release);
    return true;
  }

  // Creates or checks both files under the header lock.
  Status Init(uint64_t wanted_block) {
    LIBSHARD_ASSIGN_OR_RETURN(data, io::File::Open(data_path, O_RDWR | O_CREAT | O_CLOEXEC));
    LIBSHARD_ASSIGN_OR_RETURN(state, io::File::Open(state_path, O_RDWR | O_CREAT | O_CLOEXEC));
    LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                              RangeLock::Acquire(state.fd(), 0, kStateHeader, true, state_path));
    LIBSHARD_ASSIGN_OR_RETURN(uint64_t have, state.Size());
    std::byte header[kStateHeader] = {};
    if (have < kStateHeader) {
      block_size = wanted_block;
      blocks = (size + block_size - 1) / block_size;
      std::memcpy(header, kStateMagic, 8);
      format::PutU32(header + 8, 1);
      format::PutU32(header + 12, kStateHeader);
      format::PutU64(header + 16, block_size);
      format::PutU64(header + 24, size);
      format::PutU64(header + 32, blocks);
      format::PutU64(header + 40, format::Xxh3(etag.data(), etag.size()));
      LIBSHARD_RETURN_IF_ERROR(data.Truncate(size));
      LIBSHARD_RETURN_IF_ERROR(state.Truncate(kStateHeader + blocks * kEntryBytes));
      LIBSHARD_RETURN_IF_ERROR(state.PWriteAll(header, kStateHeader, 0));
    } else {
      LIBSHARD_RETURN_IF_ERROR(state.PReadExact(header, kStateHeader, 0));
      block_size = format::GetU64(header + 16);
      blocks = format::GetU64(header + 32);
      LIBSHARD_ASSIGN_OR_RETURN(uint64_t data_size, data.Size());
      if (std::memcmp(header, kStateMagic, 8) != 0 || format::GetU32(header + 8) != 1 ||
          block_size == 0 || block_size % 4096 != 0 || block_size > (uint64_t{1} << 32) ||
          format::GetU64(header + 24) != size ||
          blocks != (size + block_size - 1) / block_size ||
          format::GetU64(header + 40) != format::Xxh3(etag.data(), etag.size()) ||
          have != kStateHeader + blocks * kEntryBytes || data_size != size)
        return Status::Corruption(state_path + ": not a valid cache state file for " + url +
                                  " (docs/CACHE.md); delete the dataset's cache directory " +
                                  std::filesystem::path(state_path).parent_path().string());
    }
    present = std::make_unique<std::atomic<uint8_t>[]>(blocks);
    return Status::OK();
  }
};

struct BlockId {
  uint32_t shard = 0;
  uint64_t block = 0;
  bool operator<(const BlockId& o) const {
    return shard != o.shard ? shard < o.shard : block < o.block;
  }
};

class RemoteDataset;

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

// Fetches `key` whole into `path` unless there (tmp file + rename, so a reader never sees part).
Status FetchWhole(io::S3Client* client, const io::S3Url& object, const io::ObjectInfo& info,
                  uint64_t max_size, const std::string& path) {
  if (internal::PathExists(path)) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && uint64_t(st.st_size) == info.size) return Status::OK();
  }
  if (info.size > max_size)
    return Status::Corruption("s3://" + object.bucket + "/" + object.key + ": " +
                              std::to_string(info.size) + " bytes, more than the " +
                              std::to_string(max_size) + " such a file may have");
  std::shared_ptr<std::byte[]> buf = internal::AllocateAligned(std::max<uint64_t>(info.size, 1));
  if (buf == nullptr) return Status::ResourceExhausted(path + ": cannot allocate");
  LIBSHARD_RETURN_IF_ERROR(client->GetRange(object, 0, info.size, info.etag, buf.get()));
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    LIBSHARD_ASSIGN_OR_RETURN(io::File f,
                              io::File::Open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC));
    LIBSHARD_RETURN_IF_ERROR(f.PWriteAll(buf.get(), info.size, 0));
    LIBSHARD_RETURN_IF_ERROR(f.Sync());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno(path + ": rename");
  return Status::OK();
}

Status LinkInto(const std::string& target, const std::string& link) {
  if (::link(target.c_str(), link.c_str()) != 0 && errno != EEXIST)
    return Errno(link + ": link to " + target);
  return Status::OK();
}

Result<std::shared_ptr<Dataset>> RemoteDataset::Open(const std::string& url,
                                                     const DatasetOptions& options,
                                                     LocalOpen open_local) {
  LIBSHARD_ASSIGN_OR_RETURN(io::S3Url base, io::ParseS3Url(url));
  while (!base.key.empty() && base.key.back() == '/') base.key.pop_back();
  auto ds = std::make_shared<RemoteDataset>();
  ds->url_ = "s3://" + base.bucket + (base.key.empty() ? "" : "/" + base.key);
  ds->options_ = options;
  LIBSHARD_ASSIGN_OR_RETURN(ds->config_, io::LoadS3Config());
  ds->connections_ = options.fetch_connections > 0
                         ? options.fetch_connections
                         : static_cast<uint32_t>(std::clamp<uint64_t>(
                               EnvBytes("LIBSHARD_S3_CONNECTIONS", 8), 1, 256));
  const uint64_t block = EnvBytes("LIBSHARD_CACHE_BLOCK_SIZE", kDefaultBlock);
  if (block == 0 || block % 4096 != 0 || block > (uint64_t{1} << 30))
    return Status::InvalidArgument("LIBSHARD_CACHE_BLOCK_SIZE=" + std::to_string(block) +
                                   ": a multiple of 4096 up to 1 GiB");
  auto object = [&](const std::string& name) {
    return io::S3Url{base.bucket, base.key.empty() ? name : base.key + "/" + name};
  };

  // The dataset's directory in the cache: one per endpoint and URL (docs/CACHE.md §1).
  const std::string root = CacheRoot(options);
  const std::string id = ds->config_.endpoint + " " + ds->url_;
  ds->cache_dir_ = internal::JoinPath(
      root, Sanitize(base.bucket, 63) + "/" + Sanitize(base.key, 80) + "-" +
                format::Hex16(format::Xxh3(id.data(), id.size())));
  const std::string objects = internal::JoinPath(ds->cache_dir_, "objects");
  LIBSHARD_RETURN_IF_ERROR(MakeDirs(objects));
  {
    struct statvfs vfs {};
    const uint64_t fallback =
        statvfs(objects.c_str(), &vfs) == 0
            ? std::min<uint64_t>(uint64_t{vfs.f_blocks} * vfs.f_frsize / 20, uint64_t{10} << 30)
            : 0;
    ds->min_free_ = EnvBytes("LIBSHARD_CACHE_MIN_FREE", fallback);
  }

  // Manifest and index first; no listing.
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<io::S3Client> client,
                            io::S3Client::Create(ds->config_));
  // The manifest by GET (small; its ETag comes with it), so a changed dataset is seen at once.
  const io::S3Url manifest_obj = object(format::kManifestName);
  Result<io::S3Client::Body> manifest_body = client->GetObject(manifest_obj, kMaxSmallObject);
  if (!manifest_body.ok()) {
    if (manifest_body.status().code() == StatusCode::kNotFound)
      return Status::NotFound(ds->url_ + ": no manifest.json (" +
                                  manifest_body.status().message() + "); not a libshard dataset",
                              ENOENT);
    return manifest_body.status();
  }
  const std::string manifest_etag = manifest_body->etag;
  const std::string manifest_path = internal::JoinPath(
      objects, std::string(format::kManifestName) + "." + EtagTag(manifest_etag));
  if (!internal::PathExists(manifest_path)) {
    const std::string tmp = manifest_path + ".tmp-" + std::to_string(getpid());
    {
      LIBSHARD_ASSIGN_OR_RETURN(io::File f,
                                io::File::Open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC));
      LIBSHARD_RETURN_IF_ERROR(
          f.PWriteAll(manifest_body->data.data(), manifest_body->data.size(), 0));
      LIBSHARD_RETURN_IF_ERROR(f.Sync());
    }
    if (::rename(tmp.c_str(), manifest_path.c_str()) != 0) return Errno(manifest_path + ": rename");
  }
  const std::string manifest_text = std::move(manifest_body->data);
  LIBSHARD_ASSIGN_OR_RETURN(format::Manifest manifest,
                            format::ParseManifest(manifest_text, ds->url_ + "/manifest.json"));
  auto safe_name = [&](const std::string& name) -> Status {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
        name.find(".tmp-") != std::string::npos)
      return Status::Corruption(ds->url_ + "/manifest.json: file name '" + name +
                                "' is not a plain file name");
    return Status::OK();
  };
  LIBSHARD_RETURN_IF_ERROR(safe_name(manifest.index_file));
  const io::S3Url index_obj = object(manifest.index_file);
  LIBSHARD_ASSIGN_OR_RETURN(io::ObjectInfo index_info, client->Head(index_obj));
  if (index_info.size != manifest.index_size)
    return Status::Corruption(ds->url_ + "/" + manifest.index_file + ": " +
                              std::to_string(index_info.size) + " bytes, but manifest.json says " +
                              std::to_string(manifest.index_size) +
                              " (the dataset is being rewritten, or damaged); reopen it later");
  const std::string index_path = internal::JoinPath(
      objects, Sanitize(manifest.index_file, 200) + "." + EtagTag(index_info.etag));
  LIBSHARD_RETURN_IF_ERROR(
      FetchWhole(client.get(), index_obj, index_info, kMaxIndexObject, index_path));

  // Every shard: HEAD (size, ETag), the cache files, and the header bytes the local reader
  // checks at open (the same bytes under the same ETag, so writing them into a block not yet
  // present is harmless: the block still counts as missing until fetched whole). Shards are
  // probed in parallel, each thread with its own client (made in that thread).
  for (const format::ManifestShard& m : manifest.shards) {
    LIBSHARD_RETURN_IF_ERROR(safe_name(m.file));
    auto s = std::make_unique<CachedShard>();
    s->object = object(m.file);
    s->url = ds->url_ + "/" + m.file;
    s->size = m.size;
    ds->shards_.push_back(std::move(s));
  }
  auto probe = [&](io::S3Client* c, CachedShard* s) -> Status {
    Result<io::ObjectInfo> info = c->Head(s->object);
    if (!info.ok()) return info.status().WithContext(s->url + " (a shard named by manifest.json)");
    if (info->size != s->size)
      return Status::Corruption(s->url + ": " + std::to_string(info->size) +
                                " bytes, but manifest.json says " + std::to_string(s->size) +
                                " (replaced or truncated); re-upload the dataset");
    s->etag = info->etag;
    s->data_path = internal::JoinPath(objects, Sanitize(s->object.key.substr(
                                                   s->object.key.rfind('/') + 1), 200) +
                                                   "." + EtagTag(s->etag));
    s->state_path = s->data_path + ".blocks";
    LIBSHARD_RETURN_IF_ERROR(s->Init(block));
    if (s->size < format::kShardHeaderSize) return Status::OK();  // the local reader says why
    LIBSHARD_ASSIGN_OR_RETURN(bool here, s->IsPresent(0));
    if (here) return Status::OK();
    std::vector<std::byte> header(format::kShardHeaderSize);
    LIBSHARD_RETURN_IF_ERROR(s->data.PReadExact(header.data(), header.size(), 0));
    if (format::CheckShardHeader(header, s->url).ok()) return Status::OK();  // fetched before
    Status st = c->GetRange(s->object, 0, header.size(), s->etag, header.data());
    if (!st.ok()) return st.WithContext("the header of " + s->url);
    return s->data.PWriteAll(header.data(), header.size(), 0);
  };
  {
    const size_t n = ds->shards_.size();
    std::vector<Status> results(n);
    std::atomic<size_t> next{0};
    auto worker = [&] {
      Result<std::unique_ptr<io::S3Client>> c = io::S3Client::Create(ds->config_);
      for (size_t k = next++; k < n; k = next++)
        results[k] = c.ok() ? probe(c->get(), ds->shards_[k].get()) : c.status();
    };
    std::vector<std::thread> threads;
    const size_t nthreads = std::min<size_t>(n, ds->connections_);
    for (size_t t = 1; t < nthreads; ++t) threads.emplace_back(worker);
    if (n > 0) worker();
    for (std::thread& t : threads) t.join();
    for (Status& st : results) LIBSHARD_RETURN_IF_ERROR(st);
  }
  std::string version = manifest_etag + index_info.etag;
  for (const auto& s : ds->shards_) version += s->etag;

  // The version's view: a directory of hard links with the dataset's own file names, opened by
  // the local reader. Immutable once made (a new ETag anywhere makes another view).
  const std::string view = internal::JoinPath(
      ds->cache_dir_, "v-" + format::Hex16(format::Xxh3(version.data(), version.size())));
  if (!internal::PathExists(internal::JoinPath(view, format::kManifestName))) {
    const std::string tmp = view + ".tmp-" + std::to_string(getpid());
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    LIBSHARD_RETURN_IF_ERROR(MakeDirs(tmp));
    LIBSHARD_RETURN_IF_ERROR(LinkInto(index_path, internal::JoinPath(tmp, manifest.index_file)));
    for (size_t k = 0; k < manifest.shards.size(); ++k)
      LIBSHARD_RETURN_IF_ERROR(LinkInto(ds->shards_[k]->data_path,
                                        internal::JoinPath(tmp, manifest.shards[k].file)));
    // The manifest last: a view with a manifest is complete.
    LIBSHARD_RETURN_IF_ERROR(
        LinkInto(manifest_path, internal::JoinPath(tmp, format::kManifestName)));
    if (::rename(tmp.c_str(), view.c_str()) != 0) {
      const int e = errno;
      std::filesystem::remove_all(tmp, ec);
      if (e != EEXIST && e != ENOTEMPTY) return Errno(view + ": rename", e);
    }
  }

  Result<std::shared_ptr<Dataset>> inner = open_local(view, options);
  if (!inner.ok()) return inner.status().WithContext(ds->url_ + " (cached in " + view + ")");
  ds->inner_ = std::move(inner).value();
  return std::shared_ptr<Dataset>(std::move(ds));
}

}  // namespace

std::string CacheRoot(const DatasetOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  if (std::string e = Env("LIBSHARD_CACHE_DIR"); !e.empty()) return e;
  if (std::string x = Env("XDG_CACHE_HOME"); !x.empty()) return x + "/libshard";
  const std::string home = Env("HOME");
  return (home.empty() ? std::string("/tmp") : home + "/.cache") + "/libshard";
}

Result<std::shared_ptr<Dataset>> OpenRemoteDataset(const std::string& url,
                                                   const DatasetOptions& options,
                                                   LocalOpen open_local) {
  return RemoteDataset::Open(url, options, open_local);
}

}  // namespace libshard::remote
