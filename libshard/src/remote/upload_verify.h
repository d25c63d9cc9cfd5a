// Uploads checked (docs/guide/object-storage.md, "What is checked on upload"): each request's
// reply against the bytes sent (SendChecked), and a published dataset's objects against what was
// uploaded (CheckUploaded), before the staging copy is removed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libshard/status.h"
#include "objstore/etag_check.h"
#include "objstore/object_store.h"
#include "remote/uploader.h"

namespace libshard::remote {

struct CheckedSend {
  objstore::ObjectInfo reply;  // the last reply (the one accepted)
  objstore::Md5Digest digest{};        // the MD5 of the bytes sent (when checked)
  bool verified = false;     // the reply's ETag is that MD5
  bool unverifiable = false; // the server's ETags are no MD5s (its Content-MD5 check stands)
  uint32_t mismatches = 0;   // earlier replies whose ETag was the MD5 of other bytes
};

// Sends `data` by `send(content_md5)` (a PUT or one part; `content_md5` the base64 MD5 header,
// "" for none). With `check`: the MD5 is sent and compared with each reply's ETag (CheckEtag),
// and the body is sent again while the ETag is the MD5 of other bytes, at most `max_attempts`
// times in all; then IoError naming `where`, the ETags seen and `attempts_setting` (what sets
// `max_attempts`). Without `check`: sent once, unchecked. Errors of `send` are returned as they
// are.
Result<CheckedSend> SendChecked(
    std::string_view data, bool check, uint32_t max_attempts, const std::string& where,
    const std::function<Result<objstore::ObjectInfo>(const std::string& content_md5)>& send,
    const std::string& attempts_setting = "the store's bound on attempts");

// Heads every (NAME, size) given in the uploader's store, on up to `threads` threads, and compares
// each object's size with `size` and its ETag with the one `up` recorded when it was finished
// (Uploader::Finished): Corruption naming the first object that differs (replaced, truncated or
// damaged in the bucket since), NotFound for one that is gone, Internal for a name never finished.
[[nodiscard]] Status CheckUploaded(const Uploader& up,
                                   const std::vector<std::pair<std::string, uint64_t>>& objects,
                                   uint32_t threads);

}  // namespace libshard::remote
