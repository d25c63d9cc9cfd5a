#include "follow/part_follower.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "dataset/dataset_impl.h"
#include "format/bytes.h"
#include "format/manifest.h"
#include "format/shard_format.h"
#include "io/filesystem.h"
#include "writer/commit.h"

namespace libshard::follow {

namespace {

constexpr const char* kTmp = ".tmp";

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

PartFollower::PartFollower(std::string dir, std::string empty_marker, DatasetOptions options)
    : dir_(std::move(dir)),
      marker_(std::move(empty_marker)),
      options_(std::move(options)),
      journal_(internal::JoinPath(dir_, format::kJournalName)) {}

FollowedShard* PartFollower::Shard(uint32_t number) {
  auto it = shards_.find(number);
  return it == shards_.end() ? nullptr : it->second.get();
}

std::string PartFollower::CurrentPath(const FollowedShard& shard) const {
  const std::string final_path = internal::JoinPath(dir_, shard.name);
  struct stat st {};
  if (::lstat(final_path.c_str(), &st) == 0 && st.st_dev == shard.dev && st.st_ino == shard.ino)
    return final_path;
  return final_path + kTmp;
}

Status PartFollower::SetHeader(format::JournalHeader header, const std::string& where) {
  if (!header_) {
    header_ = std::move(header);
    return Status::OK();
  }
  if (!(*header_ == header))
    return Status::Corruption(where + ": the schema, field codecs or field checksums differ from "
                              "what its journal said; the write was replaced and cannot be "
                              "followed");
  return Status::OK();
}

Status PartFollower::OpenShard(uint32_t number, const std::string& where) {
  auto shard = std::make_unique<FollowedShard>();
  shard->number = number;
  shard->name = format::ShardFileName(number);
  const std::string final_path = internal::JoinPath(dir_, shard->name);
  // The writer renames NAME.tmp to NAME when it commits (and back when a resume continues an
  // interrupted commit): look at both names, twice, before calling the file missing.
  Result<io::File> opened = Status::NotFound("");
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::string path = attempt % 2 == 0 ? final_path + kTmp : final_path;
    opened = io::File::Open(path, O_RDONLY | O_NOFOLLOW);
    if (opened.ok() || opened.status().code() != StatusCode::kNotFound) break;
  }
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kNotFound)
      return Status::Corruption(where + " lives in " + final_path + "(.tmp), which does not "
                                "exist; the write is damaged and cannot be followed");
    return opened.status().WithContext(where);
  }
  struct stat st {};
  if (::fstat(opened->fd(), &st) != 0) return Status::FromErrno(errno, "fstat " + final_path);
  std::vector<std::byte> header(format::kShardHeaderSize);
  Result<uint64_t> got = opened->PReadFull(header.data(), header.size(), 0);
  if (!got.ok()) return got.status();
  if (*got < header.size())
    return Status::Corruption(opened->path() + ": " + std::to_string(*got) +
                              " bytes, shorter than a shard header, but " + where +
                              " lives in it; the shard is shorter than the journal says");
  LIBSHARD_RETURN_IF_ERROR(format::CheckShardHeader(header, opened->path(), &shard->uid));
  shard->dev = st.st_dev;
  shard->ino = st.st_ino;
  shard->size = static_cast<uint64_t>(st.st_size);
  shard->file = std::move(opened).value();
  shards_.emplace(number, std::move(shard));
  return Status::OK();
}

Status PartFollower::CheckExtent(uint32_t number, uint64_t end, uint64_t sample,
                                 const std::string& where) {
  FollowedShard* shard = Shard(number);
  if (shard == nullptr) {
    LIBSHARD_RETURN_IF_ERROR(OpenShard(number, where));
    shard = Shard(number);
  }
  if (end > shard->size) {
    LIBSHARD_ASSIGN_OR_RETURN(shard->size, shard->file.Size());
    if (end > shard->size)
      return Status::Corruption(shard->file.path() + ": " + std::to_string(shard->size) +
                                " bytes, but " + where + " extends to byte " +
                                std::to_string(end) + "; the shard is shorter than the journal "
                                "says and the write cannot be followed");
  }
  ++shard->samples;
  (void)sample;
  return Status::OK();
}

Status PartFollower::Poll(std::vector<format::IndexSample>* out) {
  if (finished()) return Status::OK();
  const std::string manifest = internal::JoinPath(dir_, format::kManifestName);
  if (Exists(manifest)) return Complete(out);
  std::vector<format::IndexSample> found;
  Status st = journal_.Poll(&found);
  if (st.code() == StatusCode::kNotFound) {
    // No journal: not started, finished empty, or committed since the check above.
    if (Exists(manifest)) return Complete(out);
    if (!marker_.empty() && samples_ == 0 && Exists(marker_) && !Exists(dir_ + "/" +
                                                                         format::kJournalName)) {
      state_ = State::kEmpty;
      return Status::OK();
    }
    if (state_ == State::kWriting && !Exists(manifest))
      return Status::Corruption(journal_.path() + ": the journal of a write in progress "
                                "disappeared without a commit after " +
                                std::to_string(samples_) + " samples were read; the write was "
                                "removed and cannot be followed");
    return Status::OK();
  }
  LIBSHARD_RETURN_IF_ERROR(st);
  if (journal_.has_header()) {
    LIBSHARD_RETURN_IF_ERROR(SetHeader(journal_.header(), journal_.path()));
    state_ = State::kWriting;
  }
  for (format::IndexSample& s : found) {
    const std::string where = "sample " + std::to_string(samples_) + " of " + journal_.path();
    uint64_t end = 0;
    if (!format::CheckedAdd(s.record.offset, s.record.stored_size, &end))
      return Status::Corruption(where + ": extent overflows");
    LIBSHARD_RETURN_IF_ERROR(CheckExtent(s.record.shard, end, samples_, where));
    read_.push_back(ReadRecord{s.record.offset, s.record.stored_size, s.record.checksum,
                               s.record.shard});
    ++samples_;
    out->push_back(std::move(s));
  }
  return Status::OK();
}

Status PartFollower::Complete(std::vector<format::IndexSample>* out) {
  Result<std::shared_ptr<Dataset>> opened = internal::DatasetImpl::Open(dir_, options_);
  if (!opened.ok()) {
    // A manifest seen in the middle of being replaced (never by libshard's writers, whose
    // commit is a rename) or a dataset that does not open: report it as it is.
    return opened.status().WithContext("following the write of " + dir_);
  }
  const Dataset& ds = **opened;
  const std::string where = dir_ + "/" + format::kManifestName;
  format::JournalHeader header;
  header.schema = ds.schema();
  header.codecs = ds.field_codecs();
  header.field_checksums = ds.has_field_checksums();
  header.block_tables = ds.has_row_blocks();  // FORMAT.md §6: journal header flag bit 1
  LIBSHARD_RETURN_IF_ERROR(SetHeader(std::move(header), where));
  if (ds.size() < samples_)
    return Status::Corruption(where + ": the committed dataset has " + std::to_string(ds.size()) +
                              " samples, fewer than the " + std::to_string(samples_) +
                              " its journal described; it was rewritten and cannot be followed");
  for (uint64_t i = 0; i < samples_; ++i) {
    Result<SampleLocation> loc = ds.Locate(i);
    if (!loc.ok()) return loc.status().WithContext(where);
    const ReadRecord& r = read_[i];
    if (loc->shard != r.shard || loc->offset != r.offset || loc->stored_size != r.stored_size ||
        loc->checksum != r.checksum)
      return Status::Corruption(where + ": sample " + std::to_string(i) + " of the committed "
                                "dataset is not the sample its journal described (shard, "
                                "offset, size or checksum differ); it was rewritten and cannot "
                                "be followed");
  }
  for (auto& [number, shard] : shards_) {
    if (number >= ds.shards().size())
      return Status::Corruption(where + ": shard " + std::to_string(number) +
                                " was read but is not in the committed dataset");
    const ShardInfo& info = ds.shards()[number];
    struct stat st {};
    const bool same_file = ::stat(info.path.c_str(), &st) == 0 && st.st_dev == shard->dev &&
                           st.st_ino == shard->ino;
    if (!same_file || (info.uid != 0 && info.uid != shard->uid))
      return Status::Corruption(info.path + ": not the shard file its journaled samples were "
                                "read from (another file or uid); the write was replaced and "
                                "cannot be followed");
  }
  for (uint64_t i = samples_; i < ds.size(); ++i) {
    LIBSHARD_ASSIGN_OR_RETURN(format::IndexSample s, internal::SampleEntryFromDataset(ds, i));
    const std::string sample_where = "sample " + std::to_string(i) + " of " + where;
    uint64_t end = 0;
    if (!format::CheckedAdd(s.record.offset, s.record.stored_size, &end))
      return Status::Corruption(sample_where + ": extent overflows");
    LIBSHARD_RETURN_IF_ERROR(CheckExtent(s.record.shard, end, i, sample_where));
    if (header_->field_checksums && s.field_checksums.empty())
      return Status::Corruption(sample_where + ": no field checksums, unlike its journal");
    ++samples_;
    out->push_back(std::move(s));
  }
  read_.clear();
  read_.shrink_to_fit();
  state_ = State::kComplete;
  return Status::OK();
}

std::string PartFollower::WaitingFor() const {
  switch (state_) {
    case State::kNotStarted:
      return dir_ + ": the writer has not started (no " + format::kJournalName + " or " +
             format::kManifestName + " yet)";
    case State::kWriting: {
      std::string s = dir_ + ": the writer's next commit (" + std::to_string(samples_) +
                      " samples so far)";
      if (journal_.stalled())
        s += "; its journal has an incomplete or damaged entry at byte " +
             std::to_string(journal_.good_bytes());
      return s;
    }
    default:
      return "";
  }
}

}  // namespace libshard::follow
