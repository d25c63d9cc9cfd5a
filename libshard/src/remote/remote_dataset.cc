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
#include <optional>
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
#include "remote/cache_log.h"
#include "remote/cache_verify.h"
#include "remote/remote_dataset_impl.h"
#include "util/env_knobs.h"

namespace libshard::remote {

Result<std::shared_ptr<Dataset>> RemoteDataset::Open(const io::S3Url& base,
                                                     const DatasetOptions& options,
                                                     LocalOpen open_local) {
  auto ds = std::make_shared<RemoteDataset>();
  ds->url_ = "s3://" + base.bucket + (base.key.empty() ? "" : "/" + base.key);
  ds->options_ = options;
  LIBSHARD_ASSIGN_OR_RETURN(ds->config_, io::LoadS3Config());
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  ds->connections_ = options.fetch_connections > 0
                         ? options.fetch_connections
                         : static_cast<uint32_t>(knobs.s3_connections);
  const uint64_t block = knobs.cache_block_size;
  auto object = [&](const std::string& name) {
    return io::S3Url{base.bucket, base.key.empty() ? name : base.key + "/" + name};
  };

  // The dataset's directory in the cache: one per endpoint and URL (docs/CACHE.md §1).
  const std::string root = CacheRoot(options);
  ds->root_ = root;
  const std::string id = ds->config_.endpoint + " " + ds->url_;
  const std::string relative = Sanitize(base.bucket, 63) + "/" + Sanitize(base.key, 80) + "-" +
                               format::Hex16(format::Xxh3(id.data(), id.size()));
  ds->cache_dir_ = internal::JoinPath(root, relative);
  const std::string objects = internal::JoinPath(ds->cache_dir_, "objects");
  LIBSHARD_RETURN_IF_ERROR(MakeCacheDirs(root, relative + "/objects"));
  {
    struct statvfs vfs {};
    const uint64_t fallback =
        statvfs(objects.c_str(), &vfs) == 0
            ? std::min<uint64_t>(uint64_t{vfs.f_blocks} * vfs.f_frsize / 20, uint64_t{10} << 30)
            : 0;
    ds->min_free_ = knobs.cache_min_free == EnvKnobs::kUnset ? fallback : knobs.cache_min_free;
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
  // The manifest by GET (small; its ETag comes with it), so a changed dataset is seen at once,
  // and by HEAD: nothing is cached unless it parses and has the object's size (a body cut short
  // without a Content-Length looks complete). docs/CACHE.md §7.
  const io::S3Url manifest_obj = object(format::kManifestName);
  std::string manifest_text, manifest_etag, why;
  std::optional<format::Manifest> parsed;
  for (int attempt = 0; attempt < 3 && !parsed; ++attempt) {
    Result<io::S3Client::Body> body = client->GetObject(manifest_obj, kMaxSmallObject);
    if (!body.ok()) {
      if (body.status().code() == StatusCode::kNotFound)
        return Status::NotFound(ds->url_ + ": no manifest.json (" + body.status().message() +
                                    "); not a libshard dataset",
                                ENOENT);
      return body.status();
    }
    LIBSHARD_ASSIGN_OR_RETURN(io::ObjectInfo head, client->Head(manifest_obj));
    if (!body->etag.empty() && head.etag != body->etag) {
      why = "it was replaced between two requests";
      continue;
    }
    if (head.size != body->data.size()) {
      why = "received " + std::to_string(body->data.size()) + " of its " +
            std::to_string(head.size) + " bytes";
      continue;
    }
    Result<format::Manifest> m = format::ParseManifest(body->data, ds->url_ + "/manifest.json");
    if (!m.ok()) {
      why = WithoutLocalAdvice(m.status().message());
      continue;
    }
    parsed = std::move(m).value();
    manifest_text = std::move(body->data);
    manifest_etag = head.etag;
  }
  if (!parsed)
    return Status::Corruption(ds->url_ + "/manifest.json (bucket " + base.bucket + ", key " +
                              manifest_obj.key + "): three downloads failed their checks, the "
                              "last: " + why + "; if the bucket's copy is damaged, upload the "
                              "dataset again from its source");
  format::Manifest manifest = std::move(*parsed);
  const std::string manifest_path = internal::JoinPath(
      objects, std::string(format::kManifestName) + "." + EtagTag(manifest_etag));
  if (Result<std::string> cached = ReadCachedFile(manifest_path, manifest_text.size());
      cached.ok() && *cached == manifest_text) {
    // As in the bucket.
  } else if (cached.ok() || cached.status().code() == StatusCode::kCorruption) {
    LIBSHARD_RETURN_IF_ERROR(RewriteCachedFile(manifest_path, manifest_text));
    CacheWarning(ds->url_ + "/manifest.json: the cached copy " + manifest_path +
                 " differed from the bucket's (damaged on this node's disk); repaired");
  } else if (internal::PathExists(manifest_path)) {
    return cached.status().WithContext("the cached manifest (docs/CACHE.md §7; delete " +
                                       ds->cache_dir_ + ")");
  } else {
    LIBSHARD_RETURN_IF_ERROR(reserve(manifest_text.size()));
    LIBSHARD_RETURN_IF_ERROR(WriteCachedFile(manifest_path, manifest_text));
  }
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
  // A cached index is checked by the local reader as it reads it (its head at open, each block
  // on first use) and repaired when it fails (HealIndex); a new one is checked whole first.
  struct stat cached_index {};
  if (::lstat(index_path.c_str(), &cached_index) != 0 || !S_ISREG(cached_index.st_mode) ||
      uint64_t(cached_index.st_size) != index_info.size) {
    const std::string where = ds->url_ + "/" + manifest.index_file;
    LIBSHARD_ASSIGN_OR_RETURN(
        std::string index_bytes,
        FetchChecked(client.get(), index_obj, index_info, [&](const std::string& b) {
          return CheckIndexBytes(AsBytes(b), manifest.index_size, manifest.index_xxh3, where);
        }));
    LIBSHARD_RETURN_IF_ERROR(reserve(index_info.size));
    LIBSHARD_RETURN_IF_ERROR(WriteCachedFile(index_path, index_bytes));
  }
  ds->index_obj_ = index_obj;
  ds->index_info_ = index_info;
  ds->index_xxh3_ = manifest.index_xxh3;
  ds->index_path_ = index_path;
  ds->open_local_ = open_local;

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
    // The header the local reader checks at open: the cached one when it checks (the same bytes
    // under the same ETag), else fetched again (docs/CACHE.md §7).
    std::vector<std::byte> header(format::kShardHeaderSize);
    LIBSHARD_RETURN_IF_ERROR(s->data.PReadExact(header.data(), header.size(), 0));
    if (format::CheckShardHeader(header, s->url).ok()) return Status::OK();
    LIBSHARD_ASSIGN_OR_RETURN(bool here, s->IsPresentOnDisk(0));
    if (here) {
      // Block 0 is recorded present, yet its header fails: damaged since. Absent again, so the
      // block is fetched anew when read.
      LIBSHARD_RETURN_IF_ERROR(InvalidateEntry(*s, 0));
      CacheWarning(s->url + ": the cached copy's shard header was damaged (" + s->data_path +
                   "); block 0 is fetched again");
    }
    Status bad;
    for (int attempt = 0; attempt < 2; ++attempt) {
      Status st = c->GetRange(s->object, 0, header.size(), s->etag, header.data());
      if (!st.ok()) return st.WithContext("the header of " + s->url);
      bad = format::CheckShardHeader(header, s->url);
      if (bad.ok()) return s->data.PWriteAll(header.data(), header.size(), 0);
    }
    return Status::Corruption(s->url + " (bucket " + s->object.bucket + ", key " + s->object.key +
                              ", bytes 0-4095, ETag " + s->etag +
                              "): the object in the bucket is damaged: " +
                              WithoutLocalAdvice(bad.message()) +
                              " on two downloads; upload the dataset again from its source");
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
  // A view holds hard links to this version's objects and nothing else: one that does not (a
  // symlink, a file replaced, an object repaired as a new file) is made again.
  const auto sound = [&] {
    struct stat v {}, o {};
    const auto same = [&](const std::string& link, const std::string& target) {
      return ::lstat(link.c_str(), &v) == 0 && S_ISREG(v.st_mode) &&
             ::lstat(target.c_str(), &o) == 0 && v.st_dev == o.st_dev && v.st_ino == o.st_ino;
    };
    if (::lstat(view.c_str(), &v) != 0 || !S_ISDIR(v.st_mode)) return false;
    if (!same(internal::JoinPath(view, format::kManifestName), manifest_path) ||
        !same(internal::JoinPath(view, manifest.index_file), index_path))
      return false;
    for (size_t k = 0; k < manifest.shards.size(); ++k)
      if (!same(internal::JoinPath(view, manifest.shards[k].file), ds->shards_[k]->data_path))
        return false;
    return true;
  };
  std::error_code ec;
  if (struct stat v {}; ::lstat(view.c_str(), &v) == 0 && !sound()) {
    const std::string old = view + ".tmp-old-" + std::to_string(getpid());
    if (S_ISDIR(v.st_mode) ? ::rename(view.c_str(), old.c_str()) == 0
                           : ::unlink(view.c_str()) == 0)
      std::filesystem::remove_all(old, ec);  // removes links, never follows them
  }
  if (!sound()) {
    const std::string tmp = view + ".tmp-" + std::to_string(getpid());
    std::filesystem::remove_all(tmp, ec);
    if (::mkdir(tmp.c_str(), 0755) != 0) return Errno(tmp + ": mkdir");
    LIBSHARD_RETURN_IF_ERROR(LinkInto(index_path, internal::JoinPath(tmp, manifest.index_file)));
    for (size_t k = 0; k < manifest.shards.size(); ++k)
      LIBSHARD_RETURN_IF_ERROR(LinkInto(ds->shards_[k]->data_path,
                                        internal::JoinPath(tmp, manifest.shards[k].file)));
    // The manifest last: a view with a manifest is complete.
    LIBSHARD_RETURN_IF_ERROR(
        LinkInto(manifest_path, internal::JoinPath(tmp, format::kManifestName)));
    if (::rename(tmp.c_str(), view.c_str()) != 0) {
      const int e = errno;
      std::filesystem::remove_all(tmp, ec);  // another process made the view first
      if (e != EEXIST && e != ENOTEMPTY) return Errno(view + ": rename", e);
    }
  }

  ds->view_ = view;
  Result<std::shared_ptr<Dataset>> inner = open_local(view, options);
  if (!inner.ok() && inner.status().code() == StatusCode::kCorruption) {
    // The manifest and the shard headers were checked above; the cached index is checked whole
    // and repaired when it fails (HealIndex opens the reader again).
    if (ds->HealIndex(inner.status()).ok()) return std::shared_ptr<Dataset>(std::move(ds));
    return Status::Corruption(ds->url_ + " (cached in " + view + "): " +
                              WithoutLocalAdvice(inner.status().message()) +
                              "; the manifest, the index and the shard headers the cache holds "
                              "are those of the bucket: upload the dataset again from its source");
  }
  if (!inner.ok()) return inner.status().WithContext(ds->url_ + " (cached in " + view + ")");
  ds->inners_.push_back(std::move(inner).value());
  ds->inner_.store(ds->inners_.back().get(), std::memory_order_release);
  return std::shared_ptr<Dataset>(std::move(ds));
}

std::string CacheRoot(const DatasetOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  if (std::string e = EnvKnobsOrDefaults().cache_dir; !e.empty()) return e;
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
