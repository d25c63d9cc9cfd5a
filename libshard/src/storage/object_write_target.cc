// Writing to an object store through a local staging directory (object_write_target.h).
#include "storage/object_write_target.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "format/journal.h"
#include "format/manifest.h"
#include "io/filesystem.h"
#include "remote/upload_verify.h"
#include "remote/uploader.h"

namespace libshard::storage {
namespace {

using internal::JoinPath;

constexpr uint64_t kMaxSmallObject = uint64_t{1} << 30;  // index and manifest, read locally

// PREFIX/manifest.json must not exist: a write never replaces a dataset readers may be using.
Status CheckNoDataset(remote::Uploader& up, const std::string& url) {
  Result<objstore::ObjectInfo> info = up.HeadNow(format::kManifestName);
  if (info.ok())
    return Status::AlreadyExists(url + " already holds a dataset (" + url + "/" +
                                 format::kManifestName + " exists); write to another prefix, or "
                                 "delete that dataset first");
  if (info.status().code() == StatusCode::kNotFound) return Status::OK();
  return info.status();
}

class ObjectWriteTarget final : public WriteTarget {
 public:
  ObjectWriteTarget(std::string url, std::string staging, std::unique_ptr<remote::Uploader> up,
                    bool committed, std::string finish_advice, uint32_t check_threads)
      : url_(std::move(url)), staging_(std::move(staging)), up_(std::move(up)),
        committed_(committed), finish_advice_(std::move(finish_advice)),
        check_threads_(check_threads) {}

  const std::string& local_dir() const override { return staging_; }

  Status ShardSealed(const std::string& name, const std::string& path) override {
    if (!up_) return Status::Internal(url_ + ": a shard sealed after the write was published");
    up_->Enqueue(path, name);
    return error();
  }

  Status error() const override {
    if (!up_) return Status::OK();
    Status e = up_->error();
    return e.ok() ? e : e.WithContext("uploading " + url_);
  }

  bool committed_unpublished() const override { return committed_; }

  Status Publish() override {
    if (!up_) return Status::Internal(url_ + ": published twice");
    Status st = PublishChecked();
    if (!st.ok())
      return st.WithContext("the dataset is complete in the staging directory " + staging_ +
                            " but not uploaded; " + finish_advice_ + " to finish the upload");
    committed_ = false;
    return st;
  }

  void Release() override {
    up_.reset();  // its threads and the upload journal's descriptor
    std::error_code ec;
    std::filesystem::remove_all(staging_, ec);  // best effort: the dataset is up and checked
  }

 private:
  // Every shard (those queued already are awaited), the index, a check of all of them, then
  // manifest.json (the commit point) and its check.
  Status PublishChecked() {
    const std::string manifest_path = JoinPath(staging_, format::kManifestName);
    LIBSHARD_ASSIGN_OR_RETURN(std::string manifest_text,
                              internal::ReadWholeFile(manifest_path, kMaxSmallObject));
    LIBSHARD_ASSIGN_OR_RETURN(format::Manifest m,
                              format::ParseManifest(manifest_text, manifest_path));
    std::vector<std::pair<std::string, uint64_t>> objects;
    for (const format::ManifestShard& s : m.shards) {
      up_->Enqueue(JoinPath(staging_, s.file), s.file);
      objects.emplace_back(s.file, s.size);
    }
    LIBSHARD_RETURN_IF_ERROR(up_->Wait().WithContext("uploading " + url_));
    LIBSHARD_ASSIGN_OR_RETURN(
        std::string index,
        internal::ReadWholeFile(JoinPath(staging_, m.index_file), kMaxSmallObject));
    LIBSHARD_RETURN_IF_ERROR(up_->PutNow(m.index_file, index).WithContext("uploading " + url_));
    objects.emplace_back(m.index_file, index.size());
    LIBSHARD_RETURN_IF_ERROR(remote::CheckUploaded(*up_, objects, check_threads_)
                                 .WithContext("checking " + url_ + " before its commit"));
    LIBSHARD_RETURN_IF_ERROR(
        up_->PutNow(format::kManifestName, manifest_text).WithContext("committing " + url_));
    LIBSHARD_RETURN_IF_ERROR(
        remote::CheckUploaded(*up_, {{format::kManifestName, manifest_text.size()}}, 1)
            .WithContext("checking " + url_ + " after its commit"));
    std::vector<std::string> names;
    for (const format::ManifestShard& s : m.shards) names.push_back(s.file);
    up_->AbortLeftovers(names);
    return Status::OK();
  }

  std::string url_;
  std::string staging_;
  std::unique_ptr<remote::Uploader> up_;
  bool committed_;
  std::string finish_advice_;  // what to run to finish an upload that failed
  uint32_t check_threads_;
};

}  // namespace

Result<std::unique_ptr<WriteTarget>> BeginObjectWrite(std::shared_ptr<objstore::ObjectStore> store,
                                                      const StorageInfo& info, WriteKind kind,
                                                      Caller caller,
                                                      remote::UploadOptions options) {
  const std::string& staging = info.work_dir;
  const std::string& where = info.location;
  const bool has_manifest = internal::PathExists(JoinPath(staging, format::kManifestName));
  const bool has_journal = internal::PathExists(JoinPath(staging, format::kJournalName));
  // A Writer's staging shards are its own: their bytes are freed once up (uploader.h). A merge's
  // are links to its parts' files.
  options.free_uploaded = kind != WriteKind::kMerge;
  bool fresh = true, committed = false;
  std::string advice =
      "resume the write (" + std::string(ResumeAdvice(caller)) + " on the same URL)";
  switch (kind) {
    case WriteKind::kCreate:
      if (has_journal || has_manifest)
        return Status::AlreadyExists(where + " has an interrupted write (staging directory " +
                                     staging + "); continue it with " +
                                     std::string(ResumeAdvice(caller)) +
                                     " or delete that directory");
      break;
    case WriteKind::kResume:
      if (!has_manifest && !has_journal)
        return Status::NotFound(where + ": nothing to resume (no " + format::kJournalName +
                                " in its staging directory " + staging +
                                "); start a new write instead");
      fresh = false;
      committed = has_manifest;
      break;
    case WriteKind::kMerge:
      fresh = !has_manifest;
      committed = has_manifest;
      advice = "run the same merge again";
      break;
    case WriteKind::kAppend:
      return Status::Unsupported(where + ": appending to an " + info.driver +
                                 ":// dataset is not supported; write the new samples to another "
                                 "prefix, or append locally and upload");
  }
  if (fresh) LIBSHARD_RETURN_IF_ERROR(internal::MakeDirectories(staging));
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<remote::Uploader> up,
                            remote::Uploader::Open(std::move(store), staging, fresh, options));
  if (fresh) {
    Status none = CheckNoDataset(*up, where);
    if (!none.ok()) return kind == WriteKind::kMerge ? none.WithContext("merge") : none;
  }
  return std::unique_ptr<WriteTarget>(
      std::make_unique<ObjectWriteTarget>(where, staging, std::move(up), committed, advice,
                                          options.threads));
}

}  // namespace libshard::storage
