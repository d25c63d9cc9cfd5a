// Datasets in object storage (s3://BUCKET/PREFIX), read through a node-local cache directory
// shared by every process of the node (docs/CACHE.md is the cache's normative format;
// docs/guide/object-storage.md the user guide).
//
// Open fetches manifest.json and the index (no bucket listing), HEADs every shard (size, ETag),
// creates one sparse cache file per shard and opens the cached copy with the local reader. Shard
// bytes arrive later, as aligned blocks fetched by parallel range GETs (each with If-Match: the
// ETag recorded at open) on libshard's own fetcher threads, each with its own S3Client made in
// that thread (so after any fork). A block is served only once its bytes are written in full,
// synced, and its entry in the shard's state file says so; an OFD lock on that entry makes one
// process of the node download it while the others wait.
#pragma once

#include <memory>
#include <string>

#include "io/s3_client.h"
#include "libshard/dataset.h"

namespace libshard::remote {

using LocalOpen = Result<std::shared_ptr<Dataset>> (*)(const std::string& dir,
                                                        const DatasetOptions& options);

// Opens the dataset whose objects are `base`.key/NAME in `base`.bucket (an s3:// URL the storage
// driver parsed and checked, storage/s3_driver.cc) through the cache of options.cache_dir;
// `open_local` opens the cached copy (Dataset::Open's local path).
Result<std::shared_ptr<Dataset>> OpenRemoteDataset(const io::S3Url& base,
                                                   const DatasetOptions& options,
                                                   LocalOpen open_local);

// The cache directory `options` names (DatasetOptions::cache_dir, $LIBSHARD_CACHE_DIR,
// $XDG_CACHE_HOME/libshard, ~/.cache/libshard).
std::string CacheRoot(const DatasetOptions& options);

}  // namespace libshard::remote
