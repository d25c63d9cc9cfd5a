// Datasets in an object store (objstore/object_store.h), read through a node-local cache
// directory shared by every process of the node (docs/CACHE.md is the cache's normative format;
// docs/guide/object-storage.md the user guide). Any store: the storage driver
// (storage/object_driver.cc) makes the store from the URL and resolves these options, once.
//
// Open reads manifest.json and the index (no listing), asks the store for every shard's size and
// generation, creates one sparse cache file per shard and opens the cached copy with the local
// reader. Shard bytes arrive later, as aligned blocks fetched by parallel range reads (each
// conditional on the generation recorded at open) on libshard's own fetcher threads. A block is
// served only once its bytes are written in full, synced, and its entry in the shard's state
// file says so; an OFD lock on that entry makes one process of the node download it while the
// others wait. A block the cache has no room for, with nothing left to evict, is read through
// from the store uncached (docs/CACHE.md §4): a read never fails for the cache's lack of space.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "libshard/dataset.h"
#include "objstore/object_store.h"

namespace libshard::remote {

using LocalOpen = Result<std::shared_ptr<Dataset>> (*)(const std::string& dir,
                                                        const DatasetOptions& options);

// The cache's settings, resolved once (the driver's: DatasetOptions over the environment's
// table, util/env_knobs.h).
struct CacheOptions {
  DatasetOptions dataset;           // the local reader's options; cache_size bounds the root
  std::string root;                 // the cache directory (DatasetOptions::cache_dir, ...)
  uint32_t connections = 8;         // fetcher threads: parallel range reads
  uint64_t block_size = uint64_t{4} << 20;
  // Bytes left free on the cache's file system; unset: 5 % of it, at most 10 GiB.
  uint64_t min_free = UINT64_MAX;
  static constexpr uint64_t kUnset = UINT64_MAX;
};

// Opens the dataset whose objects are `store`'s (manifest.json, the index, the shards) through
// the cache `options` names; `open_local` opens the cached copy (Dataset::Open's local path).
Result<std::shared_ptr<Dataset>> OpenRemoteDataset(std::shared_ptr<objstore::ObjectStore> store,
                                                   CacheOptions options, LocalOpen open_local);

}  // namespace libshard::remote
