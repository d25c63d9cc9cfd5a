// Following a local write (FORMAT.md §6.1): one writer's directory or the W parts of a
// multi-rank write, merged into the arrival order (dataset_follower.cc). The local driver's
// Follow (storage/local_driver.cc) makes one.
#pragma once

#include <memory>
#include <string>

#include "libshard/follow.h"

namespace libshard::follow {

Result<std::unique_ptr<DatasetFollower>> OpenLocalFollower(const std::string& path,
                                                           const DatasetOptions& options);

}  // namespace libshard::follow
