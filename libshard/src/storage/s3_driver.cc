// The S3 driver (storage_driver.h): s3://BUCKET/PREFIX on AWS S3 or an S3-compatible store.
// Reading goes through the node-local cache (remote/remote_dataset.h, docs/CACHE.md); a write
// writes a local staging directory, uploaded and published by s3_write_target.cc.
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>

#include "io/filesystem.h"
#include "io/s3_client.h"
#include "remote/remote_dataset.h"
#include "storage/object_url.h"
#include "storage/s3_write_target.h"
#include "storage/storage_driver.h"
#include "util/env_knobs.h"

namespace libshard::storage {
namespace {

constexpr std::string_view kScheme = "s3";

// S3's bucket naming rules: 3-63 characters of a-z, 0-9, '-', '.', beginning and ending with a
// letter or digit, no "..".
Status CheckBucket(std::string_view url, const std::string& bucket) {
  const auto bucket_char = [](unsigned char c) {
    return std::islower(c) || std::isdigit(c) || c == '-' || c == '.';
  };
  const auto alnum = [](unsigned char c) { return std::islower(c) || std::isdigit(c); };
  bool ok = bucket.size() >= 3 && bucket.size() <= 63 && alnum(bucket.front()) &&
            alnum(bucket.back()) && bucket.find("..") == std::string::npos;
  for (unsigned char c : bucket) ok = ok && bucket_char(c);
  if (ok) return Status::OK();
  return Status::InvalidArgument(std::string(url) + ": '" + bucket +
                                 "' is not a valid bucket name (3-63 characters of a-z, 0-9, "
                                 "'-', '.', beginning and ending with a letter or digit); write "
                                 "s3://BUCKET/PREFIX");
}

// $LIBSHARD_S3_STAGING/BUCKET/PREFIX, else CACHE_ROOT/staging/BUCKET/PREFIX (the node-local cache
// root of remote_dataset.h); a bucket's root is BUCKET/_root. The prefix's segments were checked
// (object_url.h), so the directory lies under the staging root.
std::string StagingDir(const ObjectUrl& url) {
  // A bad LIBSHARD_* value is reported by the write itself (Uploader::Open reads the table).
  const std::string staging = EnvKnobsOrDefaults().s3_staging;
  const std::string root = !staging.empty()
                               ? staging
                               : internal::JoinPath(remote::CacheRoot(DatasetOptions{}), "staging");
  return internal::JoinPath(internal::JoinPath(root, url.bucket),
                            url.prefix.empty() ? "_root" : url.prefix);
}

class S3Driver final : public StorageDriver {
 public:
  explicit S3Driver(ObjectUrl url) : url_(std::move(url)) {
    info_.driver = std::string(kScheme);
    info_.location = url_.ToString(kScheme);
    info_.work_dir = StagingDir(url_);
    info_.staged = true;
    info_.local_files = false;
  }
  const StorageInfo& info() const override { return info_; }
  Result<std::shared_ptr<Dataset>> Open(const DatasetOptions& options,
                                        LocalOpen open_local) const override {
    return remote::OpenRemoteDataset(io::S3Url{url_.bucket, url_.prefix}, options, open_local);
  }
  Result<std::unique_ptr<WriteTarget>> BeginWrite(WriteKind kind, Caller caller) const override {
    return BeginS3Write(url_, info_, kind, caller);
  }

 private:
  ObjectUrl url_;
  StorageInfo info_;
};

}  // namespace

Result<std::unique_ptr<StorageDriver>> OpenS3Driver(std::string_view url) {
  LIBSHARD_ASSIGN_OR_RETURN(ObjectUrl parsed, ParseObjectUrl(url, kScheme));
  LIBSHARD_RETURN_IF_ERROR(CheckBucket(url, parsed.bucket));
  return std::unique_ptr<StorageDriver>(std::make_unique<S3Driver>(std::move(parsed)));
}

}  // namespace libshard::storage
