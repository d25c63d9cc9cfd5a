// Object-store datasets through the node-local cache (remote_dataset.h, docs/CACHE.md): opening
// one, in its steps (the cache directory, the free-space floor, the manifest, the index, the
// shards' probes, the version's view, the local reader over it).
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

#include "dataset/dataset_impl.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/manifest.h"
#include "format/shard_format.h"
#include "io/file.h"
#include "io/filesystem.h"
#include "remote/cache_log.h"
#include "remote/cache_verify.h"
#include "remote/remote_dataset_impl.h"

namespace libshard::remote {
namespace {

// A name the manifest gives a file: a plain file name, nothing the cache would resolve elsewhere.
Status SafeName(const std::string& url, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
      name.find(".tmp-") != std::string::npos)
    return Status::Corruption(url + "/manifest.json: file name '" + name +
                              "' is not a plain file name");
  return Status::OK();
}

}  // namespace

RemoteDataset::RemoteDataset(std::shared_ptr<objstore::ObjectStore> store, CacheOptions options,
                             LocalOpen open_local)
    : store_(std::move(store)), options_(std::move(options)), open_local_(open_local) {
  url_ = store_->url().ToString();
  root_ = options_.root;
  connections_ = std::max<uint32_t>(1, options_.connections);
}

Result<std::shared_ptr<Dataset>> RemoteDataset::Open(std::shared_ptr<objstore::ObjectStore> store,
                                                     CacheOptions options, LocalOpen open_local) {
  auto ds = std::make_shared<RemoteDataset>(std::move(store), std::move(options), open_local);
  LIBSHARD_RETURN_IF_ERROR(ds->MakeCacheDirectory());
  ds->ResolveFreeSpace();
  LIBSHARD_ASSIGN_OR_RETURN(ds->root_cache_, RootCache::Get(ds->root_));
  LIBSHARD_ASSIGN_OR_RETURN(const format::Manifest manifest, ds->FetchManifest());
  LIBSHARD_RETURN_IF_ERROR(ds->FetchIndex(manifest));
  LIBSHARD_RETURN_IF_ERROR(ds->ProbeShards(manifest));
  LIBSHARD_RETURN_IF_ERROR(ds->MakeView(manifest));
  LIBSHARD_RETURN_IF_ERROR(ds->OpenView());
  return std::shared_ptr<Dataset>(std::move(ds));
}

Status RemoteDataset::MakeCacheDirectory() {
  const objstore::ObjectUrl& u = store_->url();
  const std::string id = store_->identity() + " " + url_;
  const std::string relative = Sanitize(u.bucket, 63) + "/" + Sanitize(u.prefix, 80) + "-" +
                               format::Hex16(format::Xxh3(id.data(), id.size()));
  cache_dir_ = internal::JoinPath(root_, relative);
  objects_dir_ = internal::JoinPath(cache_dir_, "objects");
  return MakeCacheDirs(root_, relative + "/objects");
}

void RemoteDataset::ResolveFreeSpace() {
  if (options_.min_free != CacheOptions::kUnset) {
    min_free_ = options_.min_free;
    return;
  }
  struct statvfs vfs {};
  min_free_ = statvfs(objects_dir_.c_str(), &vfs) == 0
                  ? std::min<uint64_t>(uint64_t{vfs.f_blocks} * vfs.f_frsize / 20,
                                       uint64_t{10} << 30)
                  : 0;
}

Status RemoteDataset::Reserve(uint64_t bytes) {
  // Every file the open creates is counted in the root's running count before it is written,
  // evicting to make room like a block (docs/CACHE.md §4).
  return root_cache_->Reserve(bytes, options_.dataset.cache_size, 0, -1);
}

Result<format::Manifest> RemoteDataset::FetchManifest() {
  // The manifest whole (small; its generation comes with it), so a changed dataset is seen at
  // once, and by Head: nothing is cached unless it parses and has the object's size (a body cut
  // short without a length looks complete). docs/CACHE.md §7.
  const std::string name = format::kManifestName;
  std::string text, generation, why;
  std::optional<format::Manifest> parsed;
  for (int attempt = 0; attempt < 3 && !parsed; ++attempt) {
    Result<objstore::ObjectBody> body = store_->ReadWhole(name, kMaxSmallObject);
    if (!body.ok()) {
      if (body.status().code() == StatusCode::kNotFound)
        return Status::NotFound(url_ + ": no manifest.json (" + body.status().message() +
                                    "); not a libshard dataset",
                                ENOENT);
      return body.status();
    }
    LIBSHARD_ASSIGN_OR_RETURN(objstore::ObjectInfo head, store_->Head(name));
    if (!body->generation.empty() && head.generation != body->generation) {
      why = "it was replaced between two requests";
      continue;
    }
    if (head.size != body->data.size()) {
      why = "received " + std::to_string(body->data.size()) + " of its " +
            std::to_string(head.size) + " bytes";
      continue;
    }
    Result<format::Manifest> m = format::ParseManifest(body->data, url_ + "/manifest.json");
    if (!m.ok()) {
      why = WithoutLocalAdvice(m.status().message());
      continue;
    }
    parsed = std::move(m).value();
    text = std::move(body->data);
    generation = head.generation;
  }
  if (!parsed)
    return Status::Corruption(url_ + "/manifest.json (" + store_->KeyWhere(name) +
                              "): three downloads failed their checks, the last: " + why +
                              "; if the bucket's copy is damaged, upload the dataset again from "
                              "its source");
  manifest_generation_ = generation;
  manifest_path_ = internal::JoinPath(objects_dir_, name + "." + EtagTag(generation));
  if (Result<std::string> cached = ReadCachedFile(manifest_path_, text.size());
      cached.ok() && *cached == text) {
    // As in the bucket.
  } else if (cached.ok() || cached.status().code() == StatusCode::kCorruption) {
    LIBSHARD_RETURN_IF_ERROR(RewriteCachedFile(manifest_path_, text));
    CacheWarning(url_ + "/manifest.json: the cached copy " + manifest_path_ +
                 " differed from the bucket's (damaged on this node's disk); repaired");
  } else if (internal::PathExists(manifest_path_)) {
    return cached.status().WithContext("the cached manifest (docs/CACHE.md §7; delete " +
                                       cache_dir_ + ")");
  } else {
    LIBSHARD_RETURN_IF_ERROR(Reserve(text.size()));
    LIBSHARD_RETURN_IF_ERROR(WriteCachedFile(manifest_path_, text));
  }
  LIBSHARD_RETURN_IF_ERROR(SafeName(url_, parsed->index_file));
  for (const format::ManifestShard& m : parsed->shards)
    LIBSHARD_RETURN_IF_ERROR(SafeName(url_, m.file));
  return std::move(*parsed);
}

Status RemoteDataset::FetchIndex(const format::Manifest& manifest) {
  const std::string& name = manifest.index_file;
  LIBSHARD_ASSIGN_OR_RETURN(objstore::ObjectInfo info, store_->Head(name));
  if (info.size != manifest.index_size)
    return Status::Corruption(url_ + "/" + name + ": " + std::to_string(info.size) +
                              " bytes, but manifest.json says " +
                              std::to_string(manifest.index_size) +
                              " (the dataset is being rewritten, or damaged); reopen it later");
  const std::string path = internal::JoinPath(
      objects_dir_, Sanitize(name, 200) + "." + EtagTag(info.generation));
  // A cached index is checked by the local reader as it reads it (its head at open, each block
  // on first use) and repaired when it fails (HealIndex); a new one is checked whole first.
  struct stat cached {};
  if (::lstat(path.c_str(), &cached) != 0 || !S_ISREG(cached.st_mode) ||
      uint64_t(cached.st_size) != info.size) {
    const std::string where = url_ + "/" + name;
    LIBSHARD_ASSIGN_OR_RETURN(
        std::string bytes, FetchChecked(*store_, name, info, [&](const std::string& b) {
          return CheckIndexBytes(AsBytes(b), manifest.index_size, manifest.index_xxh3, where);
        }));
    LIBSHARD_RETURN_IF_ERROR(Reserve(info.size));
    LIBSHARD_RETURN_IF_ERROR(WriteCachedFile(path, bytes));
  }
  index_name_ = name;
  index_info_ = info;
  index_xxh3_ = manifest.index_xxh3;
  index_path_ = path;
  return Status::OK();
}

Status RemoteDataset::ProbeShard(CachedShard* s) {
  Result<objstore::ObjectInfo> info = store_->Head(s->name);
  if (!info.ok()) return info.status().WithContext(s->url + " (a shard named by manifest.json)");
  if (info->size != s->size)
    return Status::Corruption(s->url + ": " + std::to_string(info->size) +
                              " bytes, but manifest.json says " + std::to_string(s->size) +
                              " (replaced or truncated); re-upload the dataset");
  s->etag = info->generation;
  s->data_path = internal::JoinPath(objects_dir_, Sanitize(s->name, 200) + "." + EtagTag(s->etag));
  s->state_path = s->data_path + ".blocks";
  const uint64_t block = options_.block_size;
  if (!internal::PathExists(s->state_path)) {  // its state file and the header written below
    const uint64_t n = (s->size + block - 1) / block;
    LIBSHARD_RETURN_IF_ERROR(Reserve(Allocated(kStateHeader + n * kEntryBytes) + kKeptHead));
  }
  LIBSHARD_RETURN_IF_ERROR(s->Init(block));
  if (s->size < format::kShardHeaderSize) return Status::OK();  // the local reader says why
  // The header the local reader checks at open: the cached one when it checks (the same bytes
  // under the same generation), else fetched again (docs/CACHE.md §7). Writing it into a block
  // not yet present is harmless: the block still counts as missing until fetched whole.
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
    Status st = store_->Read(s->name, 0, header.size(), s->etag, header.data());
    if (!st.ok()) return st.WithContext("the header of " + s->url);
    bad = format::CheckShardHeader(header, s->url);
    if (bad.ok()) return s->data.PWriteAll(header.data(), header.size(), 0);
  }
  return Status::Corruption(s->url + " (" + store_->KeyWhere(s->name) + ", bytes 0-4095, ETag " +
                            s->etag + "): the object in the bucket is damaged: " +
                            WithoutLocalAdvice(bad.message()) +
                            " on two downloads; upload the dataset again from its source");
}

Status RemoteDataset::ProbeShards(const format::Manifest& manifest) {
  for (const format::ManifestShard& m : manifest.shards) {
    auto s = std::make_unique<CachedShard>();
    s->name = m.file;
    s->url = url_ + "/" + m.file;
    s->size = m.size;
    shards_.push_back(std::move(s));
  }
  // In parallel: the store is thread-safe, each call on its own connection.
  const size_t n = shards_.size();
  std::vector<Status> results(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k = next++; k < n; k = next++) results[k] = ProbeShard(shards_[k].get());
  };
  std::vector<std::thread> threads;
  const size_t nthreads = std::min<size_t>(n, connections_);
  for (size_t t = 1; t < nthreads; ++t) threads.emplace_back(worker);
  if (n > 0) worker();
  for (std::thread& t : threads) t.join();
  for (Status& st : results) LIBSHARD_RETURN_IF_ERROR(st);
  return Status::OK();
}

Status RemoteDataset::MakeView(const format::Manifest& manifest) {
  std::string version = manifest_generation_ + index_info_.generation;
  for (const auto& s : shards_) version += s->etag;
  // A directory of hard links with the dataset's own file names, opened by the local reader.
  // Immutable once made (a new generation anywhere makes another view).
  const std::string view = internal::JoinPath(
      cache_dir_, "v-" + format::Hex16(format::Xxh3(version.data(), version.size())));
  // A view holds hard links to this version's objects and nothing else: one that does not (a
  // symlink, a file replaced, an object repaired as a new file) is made again.
  const auto sound = [&] {
    struct stat v {}, o {};
    const auto same = [&](const std::string& link, const std::string& target) {
      return ::lstat(link.c_str(), &v) == 0 && S_ISREG(v.st_mode) &&
             ::lstat(target.c_str(), &o) == 0 && v.st_dev == o.st_dev && v.st_ino == o.st_ino;
    };
    if (::lstat(view.c_str(), &v) != 0 || !S_ISDIR(v.st_mode)) return false;
    if (!same(internal::JoinPath(view, format::kManifestName), manifest_path_) ||
        !same(internal::JoinPath(view, manifest.index_file), index_path_))
      return false;
    for (size_t k = 0; k < manifest.shards.size(); ++k)
      if (!same(internal::JoinPath(view, manifest.shards[k].file), shards_[k]->data_path))
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
    LIBSHARD_RETURN_IF_ERROR(LinkInto(index_path_, internal::JoinPath(tmp, manifest.index_file)));
    for (size_t k = 0; k < manifest.shards.size(); ++k)
      LIBSHARD_RETURN_IF_ERROR(LinkInto(shards_[k]->data_path,
                                        internal::JoinPath(tmp, manifest.shards[k].file)));
    // The manifest last: a view with a manifest is complete.
    LIBSHARD_RETURN_IF_ERROR(
        LinkInto(manifest_path_, internal::JoinPath(tmp, format::kManifestName)));
    if (::rename(tmp.c_str(), view.c_str()) != 0) {
      const int e = errno;
      std::filesystem::remove_all(tmp, ec);  // another process made the view first
      if (e != EEXIST && e != ENOTEMPTY) return Errno(view + ": rename", e);
    }
  }
  view_ = view;
  return Status::OK();
}

Status RemoteDataset::OpenView() {
  Result<std::shared_ptr<Dataset>> inner = open_local_(view_, options_.dataset);
  if (!inner.ok() && inner.status().code() == StatusCode::kCorruption) {
    // The manifest and the shard headers were checked; the cached index is checked whole and
    // repaired when it fails (HealIndex opens the reader again).
    if (HealIndex(inner.status()).ok()) return Status::OK();
    return Status::Corruption(url_ + " (cached in " + view_ + "): " +
                              WithoutLocalAdvice(inner.status().message()) +
                              "; the manifest, the index and the shard headers the cache holds "
                              "are those of the bucket: upload the dataset again from its source");
  }
  if (!inner.ok()) return inner.status().WithContext(url_ + " (cached in " + view_ + ")");
  AdoptInner(std::move(inner).value());
  return Status::OK();
}

void RemoteDataset::AdoptInner(std::shared_ptr<Dataset> inner) const {
  // Its notes about row-range reads name the URL, and the dataset is upgraded at its source.
  if (auto* impl = dynamic_cast<internal::DatasetImpl*>(inner.get()))
    impl->SetNotes(url_, "upgrade the dataset where it was packed (`libshard upgrade DIR`) and "
                         "upload it again");
  inners_.push_back(std::move(inner));
  inner_.store(inners_.back().get(), std::memory_order_release);
}

Result<std::shared_ptr<Dataset>> OpenRemoteDataset(std::shared_ptr<objstore::ObjectStore> store,
                                                   CacheOptions options, LocalOpen open_local) {
  return RemoteDataset::Open(std::move(store), std::move(options), open_local);
}

}  // namespace libshard::remote
