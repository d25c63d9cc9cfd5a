// Following a dataset being written to an object store (FORMAT.md §6.1): such a write keeps its
// journal in its local staging directory and puts manifest.json last, so a follower of the URL
// sees the dataset whole once its manifest is there. The object driver's Follow
// (storage/object_driver.cc) makes one.
#pragma once

#include <functional>
#include <memory>

#include "libshard/follow.h"
#include "objstore/object_store.h"

namespace libshard::follow {

// A follower whose Poll asks `store` for manifest.json (one Head per Poll until it is there),
// then opens the dataset with `open` (through the node-local cache) and serves it whole.
Result<std::unique_ptr<DatasetFollower>> OpenRemoteFollower(
    std::shared_ptr<objstore::ObjectStore> store,
    std::function<Result<std::shared_ptr<Dataset>>()> open);

}  // namespace libshard::follow
