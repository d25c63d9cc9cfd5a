// The cache root's running count and the process's evictor (cache_root.h, docs/CACHE.md §4-5).
#include "remote/cache_root.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "format/bytes.h"
#include "io/filesystem.h"
#include "remote/cache_files.h"
#include "util/env_knobs.h"

namespace libshard::remote {
namespace {

uint64_t NowNs() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

}  // namespace

Result<std::shared_ptr<RootCache>> RootCache::Get(const std::string& root) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<RootCache>> roots;
  // A forked child's entries belong to the parent (their descriptions are shared with it):
  // kept alive here, never used again.
  static std::vector<std::shared_ptr<RootCache>> inherited;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<RootCache>& slot = roots[root];
  if (slot != nullptr && slot->pid_ == getpid()) return slot;
  if (slot != nullptr) inherited.push_back(std::move(slot));
  auto fresh = std::make_shared<RootCache>();
  fresh->root_ = root;
  fresh->pid_ = getpid();
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  fresh->measure_ns_ = knobs.cache_measure_seconds * 1000000000ull;
  LIBSHARD_RETURN_IF_ERROR(fresh->OpenUsage());
  slot = fresh;
  return fresh;
}

Status RootCache::OpenUsage() {
  LIBSHARD_RETURN_IF_ERROR(MakeDirs(root_));
  const std::string path = internal::JoinPath(root_, kUsageName);
  // Never through a symlink: one in its place is removed (docs/CACHE.md §1).
  LIBSHARD_ASSIGN_OR_RETURN(usage_, OpenCacheFile(path, O_RDWR | O_CREAT));
  return Status::OK();
}

uint64_t RootCache::FileSystemBytes() const {
  struct statvfs vfs {};
  if (fstatvfs(usage_.fd(), &vfs) != 0) return UINT64_MAX;
  const uint64_t blocks = vfs.f_blocks, frsize = vfs.f_frsize;
  return frsize != 0 && blocks > UINT64_MAX / frsize ? UINT64_MAX : blocks * frsize;
}

Result<UsageRecord> RootCache::ReadUsageLocked(bool* rewrite) {
  std::byte rec[kUsageBytes] = {};
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t got, usage_.PReadFull(rec, kUsageBytes, 0));
  const uint64_t now = NowNs();
  std::optional<UsageRecord> r =
      got == kUsageBytes ? ParseUsage({rec, kUsageBytes}, now, FileSystemBytes()) : std::nullopt;
  if (r && now - std::min(now, r->measured_ns) < measure_ns_) return *r;
  // New, damaged, lying (a count the file system cannot hold, a measure in the future) or
  // stale: measure (rarely: LIBSHARD_CACHE_MEASURE_SECONDS). Downloads in flight at this moment
  // are forgotten (bounded: one per fetcher connection; a killed process's are dropped here).
  UsageRecord fresh;
  LIBSHARD_ASSIGN_OR_RETURN(fresh.used, Walk(nullptr));
  fresh.measured_ns = now;
  *rewrite = true;
  return fresh;
}

Status RootCache::WriteUsageLocked(const UsageRecord& r) {
  std::byte rec[kUsageBytes];
  EncodeUsage(r, rec);
  return usage_.PWriteAll(rec, kUsageBytes, 0);
}

void RootCache::Register(EvictSource* source) {
  std::lock_guard<std::mutex> lock(mu_);
  sources_.push_back(source);
}

void RootCache::Unregister(EvictSource* source) {
  std::lock_guard<std::mutex> lock(mu_);
  sources_.erase(std::remove(sources_.begin(), sources_.end(), source), sources_.end());
}

Result<uint64_t> RootCache::Walk(std::vector<std::string>* state_files) const {
  namespace fs = std::filesystem;
  std::set<std::pair<dev_t, ino_t>> seen;
  uint64_t total = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec);
  if (ec) return Status::IoError(root_ + ": cannot list the cache: " + ec.message(), ec.value());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;  // a directory removed while walking: the next measure counts again
    const fs::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    if (it.depth() == 0 && name == "staging") {  // object-store writes (§6), not the cache
      it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (!seen.insert({st.st_dev, st.st_ino}).second) continue;  // a view's hard link
    total += uint64_t(st.st_blocks) * 512;
    if (state_files != nullptr && name.size() > 7 &&
        name.compare(name.size() - 7, 7, ".blocks") == 0 && name.find(".tmp-") == std::string::npos)
      state_files->push_back(e.path().string());
  }
  return total;
}

Result<uint64_t> RootCache::Measure() {
  std::lock_guard<std::mutex> in_process(count_mu_);
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                            RangeLock::Acquire(usage_.fd(), 0, kUsageBytes, true, usage_.path()));
  UsageRecord r;
  LIBSHARD_ASSIGN_OR_RETURN(r.used, Walk(nullptr));
  r.measured_ns = NowNs();
  LIBSHARD_RETURN_IF_ERROR(WriteUsageLocked(r));
  return r.used;
}

void RootCache::Update(uint64_t used_minus, uint64_t pending_minus) {
  if (used_minus == 0 && pending_minus == 0) return;
  std::lock_guard<std::mutex> in_process(count_mu_);
  Result<RangeLock> lock = RangeLock::Acquire(usage_.fd(), 0, kUsageBytes, true, usage_.path());
  if (!lock.ok()) return;  // the next measure corrects the count
  std::byte rec[kUsageBytes] = {};
  if (!usage_.PReadExact(rec, kUsageBytes, 0).ok()) return;
  std::optional<UsageRecord> r = ParseUsage({rec, kUsageBytes}, NowNs(), FileSystemBytes());
  if (!r) return;  // the next Reserve measures again
  r->used -= std::min(r->used, used_minus);
  r->pending -= std::min(r->pending, pending_minus);
  (void)WriteUsageLocked(*r);
}

void RootCache::Unreserve(uint64_t bytes) { Update(bytes, 0); }

void RootCache::Landed(uint64_t len) { Update(0, Allocated(len)); }

void RootCache::Abandoned(uint64_t len) { Update(Allocated(len), Allocated(len)); }

Status RootCache::Reserve(uint64_t len, uint64_t cache_size, uint64_t min_free, int fs_fd) {
  const uint64_t want = Allocated(len);
  const bool download = fs_fd >= 0;
  std::string why;
  // Each round: measure the need under the count's lock; evict outside it. Other processes may
  // take the room freed meanwhile, so a few rounds; none frees anything: full.
  for (int round = 0; round < 32; ++round) {
    uint64_t need = 0, used = 0, free_bytes = UINT64_MAX, pending = 0;
    {
      std::lock_guard<std::mutex> in_process(count_mu_);
      LIBSHARD_ASSIGN_OR_RETURN(
          RangeLock lock, RangeLock::Acquire(usage_.fd(), 0, kUsageBytes, true, usage_.path()));
      bool rewrite = false;
      LIBSHARD_ASSIGN_OR_RETURN(UsageRecord r, ReadUsageLocked(&rewrite));
      used = r.used;
      pending = r.pending;
      struct statvfs vfs {};
      if (download && fstatvfs(fs_fd, &vfs) == 0)
        free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
      // The floor: what the file system has free, less what the node's downloads in flight
      // (every process's) have reserved and not yet written (docs/CACHE.md §4).
      const uint64_t available = free_bytes - std::min(free_bytes, pending);
      if (download && available < want + min_free) need = want + min_free - available;
      if (cache_size > 0 && used + want > cache_size)
        need = std::max(need, used + want - cache_size);
      if (need == 0) {
        r.used = used + want;
        if (download) r.pending = pending + want;
      }
      if (need == 0 || rewrite) LIBSHARD_RETURN_IF_ERROR(WriteUsageLocked(r));
    }
    if (need == 0) return Status::OK();
    LIBSHARD_ASSIGN_OR_RETURN(uint64_t freed, Evict(need));
    if (freed > 0) continue;
    if (download && free_bytes - std::min(free_bytes, pending) < want + min_free)
      why = Bytes(free_bytes) + " free on its file system (" + Bytes(pending) +
            " of it reserved by downloads in flight), which must keep " + Bytes(min_free) +
            " free (LIBSHARD_CACHE_MIN_FREE)";
    else
      why = "it holds " + Bytes(used) + " of cache_size " + std::to_string(cache_size) +
            " (every dataset under this root counts) and a block of " + Bytes(want) +
            " does not fit";
    break;
  }
  if (why.empty()) why = "other processes of the node take the room freed";
  return Status::ResourceExhausted(
      root_ + ": the cache is full: " + why +
      ", and no block can be evicted (each is being read, or within the read-ahead of a "
      "process of this node); raise cache_size, free space, or point cache= at a larger disk "
      "(docs/CACHE.md §4)");
}

Result<uint64_t> RootCache::Evict(uint64_t need) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t freed = 0;
  // §5: consumed here first, then what no dataset of this process reads, then this process's
  // other blocks; never a pinned block or one within this process's read-ahead.
  for (int tier : {1, 2, 3}) {
    if (tier == 2) {
      LIBSHARD_ASSIGN_OR_RETURN(uint64_t got, EvictOthers(need - freed));
      freed += got;
    } else {
      for (EvictSource* s : sources_) {
        if (freed >= need) break;
        LIBSHARD_ASSIGN_OR_RETURN(uint64_t got, s->EvictTier(tier, need - freed));
        freed += got;
      }
    }
    if (freed >= need) break;
  }
  Unreserve(freed);
  return freed;
}

Result<uint64_t> RootCache::EvictOthers(uint64_t need) {
  std::vector<std::string> files;
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t total, Walk(&files));
  (void)total;
  uint64_t freed = 0;
  for (const std::string& state_path : files) {
    if (freed >= need) break;
    const std::string data_path = state_path.substr(0, state_path.size() - 7);
    Result<io::File> data = io::File::Open(data_path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (!data.ok()) continue;
    struct stat st {};
    if (fstat(data->fd(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    bool owned = false;
    for (EvictSource* s : sources_) owned = owned || s->OwnsDataFile(st.st_dev, st.st_ino);
    if (owned) continue;
    Result<io::File> state =
        io::File::Open(state_path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (!state.ok()) continue;
    struct stat sst {};
    if (fstat(state->fd(), &sst) != 0 || !S_ISREG(sst.st_mode)) continue;
    std::byte header[kStateHeader] = {};
    Result<uint64_t> have = state->Size();
    if (!have.ok() || *have < kStateHeader || !state->PReadExact(header, kStateHeader, 0).ok())
      continue;
    const std::optional<StateHeader> h = ParseStateHeader({header, kStateHeader}, *have);
    // Version 2 files only: a version 1 library reads without pins (CACHE.md §2).
    if (!h || h->version != kStateVersion || uint64_t(st.st_size) != h->size) continue;
    const uint64_t block_size = h->block_size, size = h->size, blocks = h->blocks;
    std::vector<std::byte> entries(blocks * kEntryBytes);
    if (!state->PReadExact(entries.data(), entries.size(), kStateHeader).ok()) continue;
    for (uint64_t b = 0; b < blocks && freed < need; ++b) {
      if (format::GetU64(entries.data() + b * kEntryBytes) != kPresent) continue;
      // The file's fresh description is this process's only one: its own lock.
      LIBSHARD_ASSIGN_OR_RETURN(uint64_t got,
                                EvictEntry(state->fd(), *state, *data, b, block_size, size));
      freed += got;
    }
  }
  return freed;
}

}  // namespace libshard::remote
