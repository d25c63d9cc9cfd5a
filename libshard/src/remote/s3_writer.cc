// Writing to s3:// through a local staging directory (see s3_writer.h).
#include "remote/s3_writer.h"

#include "libshard/object_storage.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>

#include "format/journal.h"
#include "format/manifest.h"
#include "io/filesystem.h"
#include "io/s3_client.h"
#include "libshard/dataset.h"
#include "remote/remote_dataset.h"
#include "remote/uploader.h"

namespace libshard::remote {
namespace {

using internal::JoinPath;

constexpr uint64_t kMaxSmallObject = uint64_t{1} << 30;  // index and manifest, read locally

// PREFIX/manifest.json must not exist: a write never replaces a dataset readers may be using.
Status CheckNoDataset(Uploader& up, const std::string& url) {
  Result<io::ObjectInfo> info = up.HeadNow(format::kManifestName);
  if (info.ok())
    return Status::AlreadyExists(url + " already holds a dataset (" + url + "/" +
                                 format::kManifestName + " exists); write to another prefix, or "
                                 "delete that dataset first");
  if (info.status().code() == StatusCode::kNotFound) return Status::OK();
  return info.status();
}

// Uploads the committed dataset in `staging`: every shard (those queued already are awaited),
// then the index, then manifest.json, the commit point.
Status Publish(Uploader& up, const std::string& staging, const std::string& url) {
  const std::string manifest_path = JoinPath(staging, format::kManifestName);
  LIBSHARD_ASSIGN_OR_RETURN(std::string manifest_text,
                            internal::ReadWholeFile(manifest_path, kMaxSmallObject));
  LIBSHARD_ASSIGN_OR_RETURN(format::Manifest m, format::ParseManifest(manifest_text, manifest_path));
  for (const format::ManifestShard& s : m.shards) up.Enqueue(JoinPath(staging, s.file), s.file);
  LIBSHARD_RETURN_IF_ERROR(up.Wait().WithContext("uploading " + url));
  LIBSHARD_ASSIGN_OR_RETURN(std::string index,
                            internal::ReadWholeFile(JoinPath(staging, m.index_file),
                                                    kMaxSmallObject));
  LIBSHARD_RETURN_IF_ERROR(up.PutNow(m.index_file, index).WithContext("uploading " + url));
  LIBSHARD_RETURN_IF_ERROR(
      up.PutNow(format::kManifestName, manifest_text).WithContext("committing " + url));
  std::vector<std::string> names;
  for (const format::ManifestShard& s : m.shards) names.push_back(s.file);
  up.AbortLeftovers(names);
  return Status::OK();
}

// Removes the staging directory once its dataset is up (best effort: the data is safe).
void RemoveStaging(const std::string& staging) {
  std::error_code ec;
  std::filesystem::remove_all(staging, ec);
}

class S3Writer final : public Writer {
 public:
  S3Writer(std::string url, std::string staging, std::shared_ptr<Uploader> up,
           std::unique_ptr<Writer> inner)
      : url_(std::move(url)), staging_(std::move(staging)), up_(std::move(up)),
        inner_(std::move(inner)) {}

  Result<EncodedSample> Encode(const SampleInput& sample) const override {
    return inner_->Encode(sample);
  }
  Status AppendEncoded(EncodedSample sample) override {
    // A failed upload stops the write at once (not only at Finish).
    if (Status e = up_->error(); !e.ok()) return e.WithContext("uploading " + url_);
    return inner_->AppendEncoded(std::move(sample));
  }
  Status Append(const SampleInput& sample) override {
    LIBSHARD_ASSIGN_OR_RETURN(EncodedSample e, Encode(sample));
    return AppendEncoded(std::move(e));
  }
  Result<WriteSummary> Finish() override {
    if (finished_) return Status::InvalidArgument(url_ + ": Writer::Finish called twice");
    LIBSHARD_ASSIGN_OR_RETURN(WriteSummary summary, inner_->Finish());
    if (Status st = Publish(*up_, staging_, url_); !st.ok())
      return st.WithContext("the dataset is complete in the staging directory " + staging_ +
                            " but not uploaded; resume the write (Writer::Resume, libshard pack "
                            "--resume, libshard.Writer on the same URL) to finish the upload");
    finished_ = true;
    inner_.reset();
    RemoveStaging(staging_);
    return summary;
  }
  // After Finish nothing waits (inner_ is gone).
  Status Checkpoint() override { return inner_ ? inner_->Checkpoint() : Status::OK(); }
  Result<double> CheckpointIfDue() override {
    if (!inner_) return std::numeric_limits<double>::infinity();
    return inner_->CheckpointIfDue();
  }
  const Schema& schema() const override { return inner_->schema(); }
  uint64_t samples_written() const override { return inner_->samples_written(); }
  const std::vector<Provenance>& existing_sources() const override {
    return inner_->existing_sources();
  }

 private:
  std::string url_;
  std::string staging_;
  std::shared_ptr<Uploader> up_;   // before inner_: outlives it
  std::unique_ptr<Writer> inner_;  // writes the staging directory
  bool finished_ = false;
};

// `options` with the hook that uploads each sealed shard (its .tmp path; the uploader opens it at
// once, so Finish's rename does not matter).
WriterOptions WithUploadHook(const WriterOptions& options, const std::shared_ptr<Uploader>& up) {
  WriterOptions o = options;
  o.on_shard_sealed = [up](const std::string& name, const std::string& path) -> Status {
    up->Enqueue(path, name);
    return up->error();
  };
  return o;
}

// A Writer's staging shards are its own: their bytes are freed once up (uploader.h).
UploadOptions WriterUploadOptions() {
  UploadOptions o = UploadOptions::FromEnvironment();
  o.free_uploaded = true;
  return o;
}

}  // namespace

Result<std::string> StagingDir(const std::string& url) {
  LIBSHARD_ASSIGN_OR_RETURN(io::S3Url u, io::ParseS3Url(url));
  std::string key = u.key;
  while (!key.empty() && key.back() == '/') key.pop_back();
  for (std::string_view rest = key; !rest.empty();) {
    const size_t slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    if (part == "." || part == ".." || part.empty())
      return Status::InvalidArgument(url + ": a prefix with an empty, '.' or '..' component "
                                     "cannot be written (it names no single staging directory)");
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  }
  const char* env = std::getenv("LIBSHARD_S3_STAGING");
  const std::string root = env != nullptr && *env != '\0'
                               ? std::string(env)
                               : JoinPath(CacheRoot(DatasetOptions{}), "staging");
  return JoinPath(JoinPath(root, u.bucket), key.empty() ? "_root" : key);
}

Result<std::unique_ptr<Writer>> CreateS3Writer(const std::string& url, const Schema& schema,
                                               const WriterOptions& options) {
  LIBSHARD_ASSIGN_OR_RETURN(std::string staging, StagingDir(url));
  if (internal::PathExists(JoinPath(staging, format::kJournalName)) ||
      internal::PathExists(JoinPath(staging, format::kManifestName)))
    return Status::AlreadyExists(url + " has an interrupted write (staging directory " + staging +
                                 "); continue it with " +
                                 std::string(ResumeAdvice(options.caller)) +
                                 " or delete that directory");
  LIBSHARD_RETURN_IF_ERROR(internal::MakeDirectories(staging));
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<Uploader> made,
                            Uploader::Open(url, staging, /*fresh=*/true, WriterUploadOptions()));
  std::shared_ptr<Uploader> up = std::move(made);
  LIBSHARD_RETURN_IF_ERROR(CheckNoDataset(*up, url));
  Result<std::unique_ptr<Writer>> inner = Writer::Create(staging, schema, WithUploadHook(options, up));
  if (!inner.ok()) return inner.status().WithContext(url + " (staging directory " + staging + ")");
  return std::unique_ptr<Writer>(
      std::make_unique<S3Writer>(url, staging, std::move(up), std::move(*inner)));
}

Result<std::unique_ptr<Writer>> ResumeS3Writer(const std::string& url,
                                               const WriterOptions& options) {
  LIBSHARD_ASSIGN_OR_RETURN(std::string staging, StagingDir(url));
  const bool committed = internal::PathExists(JoinPath(staging, format::kManifestName));
  if (!committed && !internal::PathExists(JoinPath(staging, format::kJournalName)))
    return Status::NotFound(url + ": nothing to resume (no " + format::kJournalName + " in its "
                            "staging directory " + staging + "); start a new write instead");
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<Uploader> made,
                            Uploader::Open(url, staging, /*fresh=*/false, WriterUploadOptions()));
  std::shared_ptr<Uploader> up = std::move(made);
  if (committed) {
    // Committed locally, interrupted while uploading: finish the upload now. The dataset stays
    // open for appending in the staging directory (a Finish publishes the new version).
    LIBSHARD_RETURN_IF_ERROR(Publish(*up, staging, url));
  }
  Result<std::unique_ptr<Writer>> inner = Writer::Resume(staging, WithUploadHook(options, up));
  if (!inner.ok()) return inner.status().WithContext(url + " (staging directory " + staging + ")");
  if (!committed) {
    // The shards sealed before the interruption (every shard file but the last, still open one)
    // go up now; the upload journal skips what is up already.
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::string> names, internal::ListDirectory(staging));
    std::vector<std::string> open_shards;
    for (const std::string& n : names)
      if (n.starts_with("shard-") && n.ends_with(".lss.tmp")) open_shards.push_back(n);
    std::sort(open_shards.begin(), open_shards.end());
    if (!open_shards.empty()) open_shards.pop_back();
    for (const std::string& n : open_shards)
      up->Enqueue(JoinPath(staging, n), n.substr(0, n.size() - 4));
  }
  return std::unique_ptr<Writer>(
      std::make_unique<S3Writer>(url, staging, std::move(up), std::move(*inner)));
}

Status MergeToS3(const std::string& url, const std::vector<std::string>& parts,
                 const MergeOptions& options) {
  LIBSHARD_ASSIGN_OR_RETURN(std::string staging, StagingDir(url));
  const bool resumed = internal::PathExists(JoinPath(staging, format::kManifestName));
  if (!resumed) LIBSHARD_RETURN_IF_ERROR(internal::MakeDirectories(staging));
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<Uploader> up,
                            Uploader::Open(url, staging, /*fresh=*/!resumed,
                                           UploadOptions::FromEnvironment()));
  if (!resumed) {
    LIBSHARD_RETURN_IF_ERROR(CheckNoDataset(*up, url).WithContext("merge"));
    LIBSHARD_RETURN_IF_ERROR(MergeDatasets(staging, parts, options)
                                 .WithContext(url + " (staging directory " + staging + ")"));
  }
  LIBSHARD_RETURN_IF_ERROR(Publish(*up, staging, url).WithContext("merge"));
  up.reset();
  RemoveStaging(staging);
  return Status::OK();
}

}  // namespace libshard::remote

namespace libshard {

bool IsObjectStorageUrl(std::string_view path) { return io::IsS3Url(path); }

Result<std::string> ObjectStorageStagingDir(const std::string& url) {
  return remote::StagingDir(url);
}

}  // namespace libshard
