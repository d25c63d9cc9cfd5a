// Storage drivers: where a dataset's files live (docs/guide/object-storage.md, "Storage drivers").
//
// One driver per kind of place, chosen once from the dataset's location by OpenStorage, with
// the options it needs, when it is made: a local directory (local_driver.cc), or an object store
// (object_driver.cc over any store of the store table, objstore/object_store.h, with its
// uploads' publication in object_write_target.cc). Dataset::Open, DatasetFollower::Open, the
// Writer (create, resume, append), MergeDatasets, JoinParts, UpgradeIndex, DatasetLock and
// `libshard pack` ask their location's driver; nothing else looks at a location's scheme, and a
// driver never calls the Writer: the Writer writes the local directory a driver's WriteTarget
// names and tells the target what it sealed and committed.
//
// Adding an object store (gs://, az://) is one store file and one row of the store table
// (objstore/store_table.cc): the object driver reads any store through the node-local cache,
// writes to it through a staging directory, and follows a write by its manifest. Private to
// libshard.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "libshard/caller.h"
#include "libshard/dataset.h"
#include "libshard/follow.h"
#include "libshard/status.h"
#include "libshard/storage.h"

namespace libshard::storage {

// Opens a local dataset directory (Dataset::Open's local reader): a driver that reads through a
// cache opens the cached copy with it.
using LocalOpen = Result<std::shared_ptr<Dataset>> (*)(const std::string& dir,
                                                        const DatasetOptions& options);

// How a write starts (StorageDriver::BeginWrite).
enum class WriteKind {
  kCreate,  // a new dataset (Writer::Create): a location that holds one is refused
  kResume,  // an interrupted write continued (Writer::Resume)
  kAppend,  // samples added to a finished dataset (Writer::OpenForAppend)
  kMerge,   // MergeDatasets' output: a new dataset, or an interrupted merge's publication
};

// One write of a dataset: the local directory the Writer (or a merge) writes, and how the result
// reaches the location. A local directory's target is the directory itself and publishes
// nothing. ShardSealed and error() may be called from the Writer's appending thread while the
// target works in the background; the other calls come from one thread.
class WriteTarget {
 public:
  virtual ~WriteTarget() = default;

  // The local directory written: the dataset's own, or its staging directory.
  virtual const std::string& local_dir() const = 0;
  // A shard the Writer sealed (its bytes final at `path`, to be named `name`): an object store
  // starts uploading it while the next one is written.
  [[nodiscard]] virtual Status ShardSealed(const std::string& name, const std::string& path) = 0;
  // The first failure of the background work so far (OK while none failed).
  virtual Status error() const = 0;
  // True when local_dir() holds a dataset committed locally and not yet published (a write or
  // merge stopped while uploading): Publish finishes it.
  virtual bool committed_unpublished() const = 0;
  // After the local commit: makes local_dir()'s dataset the one at the location, and checks what
  // the location then holds against what was sent. The error names what to run to finish.
  [[nodiscard]] virtual Status Publish() = 0;
  // After Publish: the local copy is no longer needed (a staging directory is removed; best
  // effort, the dataset is safe at its location).
  virtual void Release() = 0;
};

class StorageDriver {
 public:
  virtual ~StorageDriver() = default;

  // What any front end needs to know of the location (libshard/storage.h).
  virtual const StorageInfo& info() const = 0;
  const std::string& location() const { return info().location; }

  // Opens the dataset with the options the driver was made with; `open_local` opens a local
  // directory (the dataset's own, or a cached copy).
  virtual Result<std::shared_ptr<Dataset>> Open(LocalOpen open_local) const = 0;
  // Follows a write of the dataset in progress (libshard/follow.h, FORMAT.md §6.1): a local
  // directory by its journal (one writer or the parts of several), an object store by its
  // manifest (a write there is seen whole once committed). Snapshots open with `open_local`.
  virtual Result<std::unique_ptr<DatasetFollower>> Follow(LocalOpen open_local) const = 0;
  // Starts a write of kind `kind` (an object store's staging directory is made for kCreate and
  // kMerge; the Writer makes or finds a local one). `caller` spells the advice of errors.
  virtual Result<std::unique_ptr<WriteTarget>> BeginWrite(WriteKind kind, Caller caller) const = 0;
};

// The driver of `location`: an object store's for "scheme://" of a store of the store table,
// else (no "scheme://") the local directory's. `options` are a reader's (Open, Follow: the
// cache's among them); a writer passes none. InvalidArgument naming the URL for a malformed one;
// Unsupported for a scheme no store takes; InvalidArgument naming the variable when a LIBSHARD_*
// environment variable is bad (ReadEnvKnobs: every entry point refuses one alike).
Result<std::unique_ptr<StorageDriver>> OpenStorage(std::string_view location,
                                                   const DatasetOptions& options = {});

// The drivers (one file each).
Result<std::unique_ptr<StorageDriver>> OpenLocalDriver(std::string_view path,
                                                       const DatasetOptions& options);
Result<std::unique_ptr<StorageDriver>> OpenObjectDriver(std::string_view url,
                                                        const DatasetOptions& options);

// "s3://b/p is in s3 storage; RULE (HOW)": Unsupported, the refusal of an operation that needs
// local files (StorageInfo::local_files), e.g. RULE "upgrade rewrites a local directory".
Status NeedsLocalFiles(const StorageDriver& driver, std::string_view rule, std::string_view how);

}  // namespace libshard::storage
