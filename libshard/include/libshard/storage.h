// Where a dataset lives: a local directory or an object-storage URL (s3://BUCKET/PREFIX), as the
// storage driver chosen for its location sees it (docs/guide/object-storage.md, "Storage
// drivers"). Dataset::Open, Writer, MergeDatasets, DatasetLock and `libshard pack` all ask the
// same driver; this is what a tool needs to know before it writes (pack runs its job in
// `work_dir`, where its lock, journal and skip report live).
#pragma once

#include <string>

#include "libshard/status.h"

namespace libshard {

struct StorageInfo {
  std::string driver;    // "local" or "s3"
  // The location as the driver keeps it: a local path as given; a URL without a trailing '/'.
  std::string location;
  // The local directory a write of the dataset works in: the directory itself, or the staging
  // directory of an object-storage URL ($LIBSHARD_S3_STAGING/BUCKET/PREFIX, else
  // CACHE_ROOT/staging/BUCKET/PREFIX), which is deterministic so that a resumed job finds it.
  std::string work_dir;
  // `work_dir` is a staging directory: the committed dataset is uploaded from it and it is removed
  // once the upload was checked.
  bool staged = false;
  // The dataset's files are a local directory. Appending, `upgrade`, joining the parts of several
  // ranks and merging parts (which link their files) need one.
  bool local_files = true;
};

// The storage of `location`. InvalidArgument naming the URL for a malformed one (a bad bucket
// name, an empty, '.' or '..' path segment); Unsupported for a scheme no driver takes
// ("gs://...").
Result<StorageInfo> DescribeStorage(const std::string& location);

}  // namespace libshard
