// A write to an object store's SCHEME://BUCKET/PREFIX (docs/guide/object-storage.md, "Writing"):
// the object driver's WriteTarget. The Writer (or a merge) writes the staging directory as it would
// any directory, with its journal (FORMAT.md §6); each shard it seals is uploaded at once
// (remote/uploader.h), while the next is written. Publish, after the local commit, waits for every
// shard, puts the index, checks every object's size and ETag against what was uploaded, then puts
// manifest.json (the commit point: until that PUT a reader of the URL finds no dataset, after it
// the whole new one) and checks it too. Only then does Release remove the staging directory. A new
// write refuses a prefix that already holds a manifest.json, so a reader never sees a mix of two.
//
// A killed write resumes from the staging directory: the local journal restores the samples, the
// upload journal the uploads (no part that is up is sent again).
#pragma once

#include <memory>

#include "libshard/caller.h"
#include "libshard/storage.h"
#include "objstore/object_store.h"
#include "remote/uploader.h"
#include "storage/storage_driver.h"

namespace libshard::storage {

// A write of kind `kind` to `store` through the staging directory info.work_dir, its uploads
// made with `options` (free_uploaded set here by the kind).
Result<std::unique_ptr<WriteTarget>> BeginObjectWrite(std::shared_ptr<objstore::ObjectStore> store,
                                                      const StorageInfo& info, WriteKind kind,
                                                      Caller caller,
                                                      remote::UploadOptions options);

}  // namespace libshard::storage
