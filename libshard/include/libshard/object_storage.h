// Object-storage outputs (s3://BUCKET/PREFIX) for tools that prepare a write themselves
// (`libshard pack` inspects and locks its output before the Writer exists).
#pragma once

#include <string>
#include <string_view>

#include "libshard/status.h"

namespace libshard {

// True for an "s3://" URL.
bool IsObjectStorageUrl(std::string_view path);

// The local staging directory an s3:// output is written through before it is uploaded
// ($LIBSHARD_S3_STAGING/BUCKET/PREFIX, else CACHE_ROOT/staging/BUCKET/PREFIX; see
// docs/guide/object-storage.md). Writer::Create/Resume with the URL write there; a lock for
// that directory (DatasetLock) is the lock of the URL's write on this node.
Result<std::string> ObjectStorageStagingDir(const std::string& url);

}  // namespace libshard
