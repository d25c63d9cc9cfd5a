// s3:// datasets through the node-local cache (remote_dataset.h, docs/CACHE.md): opening one
// (the cache directory, manifest, index, the shards' probes and the version's view).
#include "remote/remote_dataset.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
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
#include "remote/remote_dataset_impl.h"

namespace libshard::remote {

Result<std::shared_ptr<Dataset>> RemoteDataset::Open(const io::S3Url& base,
                                                     const DatasetOptions& options,
                                                     LocalOpen open_local) {
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
  ds->root_ = root;
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

  // Every file the open creates is counted in the root's running count before it is written,
  // evicting to make room like a block (docs/CACHE.md §4).
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<RootCache> root_cache, RootCache::Get(root));
  auto reserve = [&](uint64_t bytes) {
    return root_cache->Reserve(bytes, options.cache_size, 0, -1);
  };

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
    LIBSHARD_RETURN_IF_ERROR(reserve(manifest_body->data.size()));
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
  if (!internal::PathExists(index_path)) LIBSHARD_RETURN_IF_ERROR(reserve(index_info.size));
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
    if (!internal::PathExists(s->state_path)) {  // its state file and the header written below
      const uint64_t n = (s->size + block - 1) / block;
      LIBSHARD_RETURN_IF_ERROR(reserve(Allocated(kStateHeader + n * kEntryBytes) + kKeptHead));
    }
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

std::string CacheRoot(const DatasetOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  if (std::string e = Env("LIBSHARD_CACHE_DIR"); !e.empty()) return e;
  if (std::string x = Env("XDG_CACHE_HOME"); !x.empty()) return x + "/libshard";
  const std::string home = Env("HOME");
  return (home.empty() ? std::string("/tmp") : home + "/.cache") + "/libshard";
}

Result<std::shared_ptr<Dataset>> OpenRemoteDataset(const io::S3Url& base,
                                                   const DatasetOptions& options,
                                                   LocalOpen open_local) {
  return RemoteDataset::Open(base, options, open_local);
}

}  // namespace libshard::remote
