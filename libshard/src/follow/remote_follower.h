// Following an s3:// dataset being written (FORMAT.md §6.1): the s3 writer keeps its journal in
// its local staging directory and puts manifest.json last, so a follower of the URL sees the
// dataset whole once its manifest is there. One function, kept apart so that the storage layer
// (io/s3_client.h, remote/) can take it over.
#pragma once

#include <memory>
#include <string>

#include "libshard/follow.h"

namespace libshard::follow {

// A follower of `url` whose Poll looks for its manifest (one GET per Poll until it is there,
// through Dataset::Open and the node-local cache), then serves the complete dataset.
Result<std::unique_ptr<DatasetFollower>> OpenRemoteFollower(const std::string& url,
                                                            const DatasetOptions& options);

}  // namespace libshard::follow
