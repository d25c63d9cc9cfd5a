// DatasetFollower::Open (libshard/follow.h: the location's storage driver follows it) and the
// follower of a local write (local_follower.h, FORMAT.md §6.1): one writer's directory or the W
// parts of a multi-rank write, merged into the arrival order.
#include "libshard/follow.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "dataset/dataset_impl.h"
#include "follow/arrival_index.h"
#include "follow/part_follower.h"
#include "follow/local_follower.h"
#include "format/manifest.h"
#include "io/filesystem.h"
#include "libshard/merge.h"
#include "storage/storage_driver.h"

namespace libshard {
namespace follow {
namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// "rank-RRRRR-of-WWWWW" or "rank-RRRRR-of-WWWWW.empty" (FORMAT.md §7.1): its W; 0 otherwise.
uint32_t PartWorld(std::string_view name) {
  if (name.ends_with(".empty")) name.remove_suffix(6);
  if (name.size() != 19 || !name.starts_with("rank-") || name.substr(10, 4) != "-of-") return 0;
  uint32_t w = 0;
  for (char c : name.substr(14)) {
    if (c < '0' || c > '9') return 0;
    w = w * 10 + static_cast<uint32_t>(c - '0');
  }
  for (char c : name.substr(5, 5))
    if (c < '0' || c > '9') return 0;
  return w >= 1 && w <= kMaxWorldSize ? w : 0;
}

class LocalFollower final : public DatasetFollower {
 public:
  LocalFollower(std::string path, DatasetOptions options)
      : path_(std::move(path)), options_(std::move(options)) {}

  Status Poll() override;
  FollowProgress progress() const override;
  Result<std::shared_ptr<Dataset>> Snapshot() override;
  const std::string& path() const override { return path_; }

 private:
  struct Part {
    std::unique_ptr<PartFollower> follower;
    std::deque<format::IndexSample> pending;  // read, not yet in the arrival order
    std::map<uint32_t, uint32_t> files;       // shard number -> file id
  };
  struct FileRef {
    uint32_t part = 0;
    uint32_t number = 0;
    uint64_t samples = 0;
  };

  // Finds the layout: W parts under parts/, or one writer in the directory itself.
  Status Discover();
  // Appends to the arrival order every sample whose place in it is decided (FORMAT.md §6.1).
  Status Advance();
  Status Emit(uint32_t rank, format::IndexSample s);

  std::string path_;
  DatasetOptions options_;
  uint32_t world_ = 0;  // 0 until a writer started
  std::vector<Part> parts_;
  std::optional<ArrivalStore> store_;
  std::vector<FileRef> files_;
  uint64_t round_ = 0;
  uint32_t next_rank_ = 0;
  uint64_t pending_ = 0;   // samples in every part's `pending`
  uint32_t finished_ = 0;  // parts finished (their last Poll said so)
  bool complete_ = false;
};

Status LocalFollower::Discover() {
  const std::string parts = internal::JoinPath(path_, "parts");
  std::set<uint32_t> worlds;
  struct stat st {};
  if (::lstat(parts.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::string> names, internal::ListDirectory(parts));
    for (const std::string& n : names)
      if (uint32_t w = PartWorld(n); w != 0) worlds.insert(w);
  }
  if (worlds.size() > 1)
    return Status::InvalidArgument(
        parts + " holds parts of " + std::to_string(worlds.size()) + " world sizes (" +
        std::to_string(*worlds.begin()) + ", " + std::to_string(*worlds.rbegin()) +
        ", ...); a follower cannot tell which write to follow: remove the parts of the old one");
  if (worlds.size() == 1) {
    world_ = *worlds.begin();
    for (uint32_t r = 0; r < world_; ++r) {
      const std::string dir = PartDirectory(path_, r, world_);
      parts_.push_back(Part{std::make_unique<PartFollower>(dir, dir + ".empty", options_), {}, {}});
    }
    return Status::OK();
  }
  if (Exists(internal::JoinPath(path_, format::kManifestName)) ||
      Exists(internal::JoinPath(path_, format::kJournalName))) {
    world_ = 1;
    parts_.push_back(Part{std::make_unique<PartFollower>(path_, "", options_), {}, {}});
  }
  return Status::OK();
}

Status LocalFollower::Poll() {
  if (complete_) return Status::OK();
  if (world_ == 0) LIBSHARD_RETURN_IF_ERROR(Discover());
  for (uint32_t r = 0; r < parts_.size(); ++r) {
    Part& p = parts_[r];
    if (p.follower->finished()) continue;
    std::vector<format::IndexSample> found;
    LIBSHARD_RETURN_IF_ERROR(p.follower->Poll(&found));
    if (p.follower->header() && store_ && !(*p.follower->header() == store_->header()))
      return Status::Corruption(p.follower->dir() + ": its schema, field codecs or field "
                                "checksums differ from those of the other parts of " + path_ +
                                "; parts of one write must agree");
    if (p.follower->header() && !store_) store_.emplace(*p.follower->header());
    pending_ += found.size();
    for (format::IndexSample& s : found) p.pending.push_back(std::move(s));
    if (p.follower->finished()) ++finished_;
  }
  return Advance();
}

Status LocalFollower::Emit(uint32_t rank, format::IndexSample s) {
  Part& p = parts_[rank];
  auto [it, added] = p.files.emplace(s.record.shard, static_cast<uint32_t>(files_.size()));
  if (added) files_.push_back(FileRef{rank, s.record.shard, 0});
  ++files_[it->second].samples;
  store_->Append(s, it->second);
  return Status::OK();
}

Status LocalFollower::Advance() {
  while (world_ != 0 && !complete_) {
    if (finished_ == world_ && pending_ == 0) {
      complete_ = true;
      break;
    }
    Part& p = parts_[next_rank_];
    if (!p.pending.empty()) {
      format::IndexSample s = std::move(p.pending.front());
      p.pending.pop_front();
      --pending_;
      LIBSHARD_RETURN_IF_ERROR(Emit(next_rank_, std::move(s)));
    } else if (!p.follower->finished()) {
      break;  // this rank's next sample decides the order: wait for it
    }
    if (++next_rank_ == world_) {
      next_rank_ = 0;
      ++round_;
    }
  }
  return Status::OK();
}

FollowProgress LocalFollower::progress() const {
  FollowProgress p;
  p.samples = store_ ? store_->size() : 0;
  p.complete = complete_;
  p.writers = world_;
  if (complete_) return p;
  if (world_ == 0) {
    p.waiting_for = path_ + ": the writer has not started (no " + format::kJournalName + ", " +
                    format::kManifestName + " or parts/ yet)";
  } else {
    p.waiting_for = (world_ > 1 ? "rank " + std::to_string(next_rank_) + " of " +
                                      std::to_string(world_) + ", "
                                : std::string()) +
                    parts_[next_rank_].follower->WaitingFor();
  }
  return p;
}

Result<std::shared_ptr<Dataset>> LocalFollower::Snapshot() {
  if (!store_)
    return Status::NotFound(path_ + ": no sample yet: " +
                            (world_ == 0 ? "the writer has not started" : "no schema written yet"));
  std::vector<ShardInfo> shards;
  std::vector<format::IndexShard> index_shards;
  std::vector<io::File> files;
  for (const FileRef& f : files_) {
    FollowedShard* shard = parts_[f.part].follower->Shard(f.number);
    const std::string path = parts_[f.part].follower->CurrentPath(*shard);
    LIBSHARD_ASSIGN_OR_RETURN(const uint64_t size, shard->file.Size());
    const int fd = ::dup(shard->file.fd());
    if (fd < 0) return Status::FromErrno(errno, "dup " + path);
    files.emplace_back(fd, path);
    shards.push_back(ShardInfo{path, size, f.samples, shard->uid});
    index_shards.push_back(format::IndexShard{shard->name, size, f.samples, shard->uid});
  }
  auto index = std::make_unique<ArrivalIndex>(*store_, store_->size(), std::move(index_shards),
                                              store_->total_raw_bytes());
  return internal::DatasetImpl::FromIndex(path_, "the journal of " + path_, std::move(index),
                                          std::move(shards), std::move(files), options_);
}

}  // namespace

Result<std::unique_ptr<DatasetFollower>> OpenLocalFollower(const std::string& path,
                                                           const DatasetOptions& options) {
  std::error_code ec;
  std::string dir = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec || dir.empty()) dir = path;
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  auto f = std::make_unique<LocalFollower>(std::move(dir), options);
  LIBSHARD_RETURN_IF_ERROR(f->Poll());
  return std::unique_ptr<DatasetFollower>(std::move(f));
}

}  // namespace follow

Result<std::unique_ptr<DatasetFollower>> DatasetFollower::Open(const std::string& path,
                                                               const DatasetOptions& options) {
  // The location's storage driver follows it (storage/storage_driver.h).
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                            storage::OpenStorage(path, options));
  return driver->Follow(&internal::DatasetImpl::Open);
}

}  // namespace libshard
