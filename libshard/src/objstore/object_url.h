// The rules every object-store URL follows (SCHEME://BUCKET[/PREFIX]), for the stores' factories
// (store_table.cc). A URL is parsed once, here, when its driver is chosen;
// the client percent-encodes each key segment when it builds a request (io/s3_request.cc).
#pragma once

#include <string>
#include <string_view>

#include "libshard/status.h"

namespace libshard::objstore {

// An object-store location: the bucket and the key prefix of the dataset's objects.
struct ObjectUrl {
  std::string scheme;  // "s3", "memory"
  std::string bucket;  // as written; the driver checks its own naming rules
  std::string prefix;  // the key prefix, no leading or trailing '/' ("" for the bucket's root)
  // The key of the object `name` under the prefix.
  std::string KeyOf(std::string_view name) const;
  // "scheme://bucket[/prefix]" (the URL's own scheme, or `scheme`).
  std::string ToString() const { return ToString(scheme); }
  std::string ToString(std::string_view scheme) const;
};

// The longest key prefix a dataset may have: S3 keys are at most 1024 bytes, and the dataset's
// own names ("shard-00000.lss", "manifest.json", ...) need the rest.
inline constexpr size_t kMaxKeyPrefix = 960;

// Parses `url` of `scheme` ("s3"): "scheme://" then the bucket, then the key prefix. One trailing
// '/' is dropped (s3://b/p/ is s3://b/p). InvalidArgument, naming the URL and what to write
// instead, for: another scheme, an empty bucket, an empty path segment ("a//b"), a "." or ".."
// segment (an HTTP client would collapse it and address another key or bucket), a control
// character, or a prefix longer than kMaxKeyPrefix bytes.
Result<ObjectUrl> ParseObjectUrl(std::string_view url, std::string_view scheme);

// The scheme of "scheme://..." (RFC 3986: a letter, then letters, digits, '+', '-', '.'), or ""
// when `location` has none (a local path).
std::string_view UrlScheme(std::string_view location);

}  // namespace libshard::objstore
