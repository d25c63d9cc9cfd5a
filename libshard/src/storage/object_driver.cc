// The object-store driver (storage_driver.h): SCHEME://BUCKET/PREFIX in any store of the store
// table (objstore/object_store.h: s3://, memory://). Reading goes through the node-local cache
// (remote/remote_dataset.h, docs/CACHE.md); a write writes a local staging directory, uploaded
// and published by object_write_target.cc; a follower waits for the manifest, which a write puts
// last (follow/remote_follower.h). The driver resolves, once when it is made, what the cache and
// the uploader take: the store, the cache's options and the upload options.
#include <memory>
#include <string>

#include "follow/remote_follower.h"
#include "io/filesystem.h"
#include "objstore/object_store.h"
#include "remote/remote_dataset.h"
#include "remote/uploader.h"
#include "storage/object_write_target.h"
#include "storage/storage_driver.h"
#include "util/env_knobs.h"

namespace libshard::storage {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// The cache directory `options` names (DatasetOptions::cache_dir, $LIBSHARD_CACHE_DIR,
// $XDG_CACHE_HOME/libshard, ~/.cache/libshard).
std::string CacheRoot(const DatasetOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  if (std::string e = EnvKnobsOrDefaults().cache_dir; !e.empty()) return e;
  if (std::string x = Env("XDG_CACHE_HOME"); !x.empty()) return x + "/libshard";
  const std::string home = Env("HOME");
  return (home.empty() ? std::string("/tmp") : home + "/.cache") + "/libshard";
}

// The cache's options: DatasetOptions over the environment's table (util/env_knobs.h). A bad
// LIBSHARD_* value is the error of every read.
Result<remote::CacheOptions> ResolveCacheOptions(const DatasetOptions& options) {
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  remote::CacheOptions c;
  c.dataset = options;
  c.root = CacheRoot(options);
  c.connections = options.fetch_connections > 0 ? options.fetch_connections
                                                : static_cast<uint32_t>(knobs.s3_connections);
  c.block_size = knobs.cache_block_size;
  c.min_free = knobs.cache_min_free == EnvKnobs::kUnset ? remote::CacheOptions::kUnset
                                                        : knobs.cache_min_free;
  return c;
}

// The uploads' options from the table (its bounds: below S3's 5 MiB parts only for servers that
// allow it, tests; 5 GiB is S3's part limit). A bad LIBSHARD_* value is the error of every write.
Result<remote::UploadOptions> ResolveUploadOptions() {
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  remote::UploadOptions o;
  o.part_size = knobs.s3_part_size;
  o.threads = static_cast<uint32_t>(knobs.s3_upload_threads);
  o.content_md5 = knobs.s3_content_md5;
  return o;
}

// $LIBSHARD_S3_STAGING, else CACHE_ROOT/staging; under it BUCKET/PREFIX for s3:// (as it has
// always been) and _SCHEME/BUCKET/PREFIX for any other store (no S3 bucket name starts with '_');
// a bucket's root is BUCKET/_root. The prefix's segments were checked (object_url.h), so the
// directory lies under the staging root.
std::string StagingDir(const objstore::ObjectUrl& url) {
  // A bad LIBSHARD_* value is reported by the write itself.
  const std::string staging = EnvKnobsOrDefaults().s3_staging;
  std::string root = !staging.empty() ? staging
                                      : internal::JoinPath(CacheRoot(DatasetOptions{}), "staging");
  if (url.scheme != "s3") root = internal::JoinPath(root, "_" + url.scheme);
  return internal::JoinPath(internal::JoinPath(root, url.bucket),
                            url.prefix.empty() ? "_root" : url.prefix);
}

class ObjectDriver final : public StorageDriver {
 public:
  ObjectDriver(std::shared_ptr<objstore::ObjectStore> store, const DatasetOptions& options)
      : store_(std::move(store)), cache_(ResolveCacheOptions(options)),
        upload_(ResolveUploadOptions()) {
    info_.driver = store_->url().scheme;
    info_.location = store_->url().ToString();
    info_.work_dir = StagingDir(store_->url());
    info_.staged = true;
    info_.local_files = false;
  }
  const StorageInfo& info() const override { return info_; }
  Result<std::shared_ptr<Dataset>> Open(LocalOpen open_local) const override {
    if (!cache_.ok()) return cache_.status();
    return remote::OpenRemoteDataset(store_, *cache_, open_local);
  }
  Result<std::unique_ptr<DatasetFollower>> Follow(LocalOpen open_local) const override {
    if (!cache_.ok()) return cache_.status();
    return follow::OpenRemoteFollower(
        store_, [store = store_, cache = *cache_, open_local]() {
          return remote::OpenRemoteDataset(store, cache, open_local);
        });
  }
  Result<std::unique_ptr<WriteTarget>> BeginWrite(WriteKind kind, Caller caller) const override {
    if (!upload_.ok()) return upload_.status();
    return BeginObjectWrite(store_, info_, kind, caller, *upload_);
  }

 private:
  std::shared_ptr<objstore::ObjectStore> store_;
  Result<remote::CacheOptions> cache_;
  Result<remote::UploadOptions> upload_;
  StorageInfo info_;
};

}  // namespace

Result<std::unique_ptr<StorageDriver>> OpenObjectDriver(std::string_view url,
                                                        const DatasetOptions& options) {
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<objstore::ObjectStore> store, objstore::OpenStore(url));
  return std::unique_ptr<StorageDriver>(std::make_unique<ObjectDriver>(std::move(store), options));
}

}  // namespace libshard::storage
