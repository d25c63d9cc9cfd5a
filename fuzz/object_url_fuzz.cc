// libFuzzer target for object-store URLs (objstore/object_url.h): ParseObjectUrl of any bytes
// either refuses them or yields a bucket and a prefix whose segments are neither empty, "." nor
// "..", without control characters, and which print back to a URL that parses to the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "objstore/object_url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  const std::string_view url(reinterpret_cast<const char*>(data), size);
  (void)objstore::UrlScheme(url);
  auto u = objstore::ParseObjectUrl(url, "s3");
  if (!u.ok()) return 0;
  const std::string& p = u->prefix;
  if (u->bucket.empty() || u->bucket.find('/') != std::string::npos) __builtin_trap();
  if (p.size() > objstore::kMaxKeyPrefix) __builtin_trap();
  if (!p.empty() && (p.front() == '/' || p.back() == '/')) __builtin_trap();
  for (size_t b = 0; b <= p.size() && !p.empty();) {
    const size_t e = std::min(p.find('/', b), p.size());
    const std::string_view seg(p.data() + b, e - b);
    if (seg.empty() || seg == "." || seg == "..") __builtin_trap();
    b = e + 1;
  }
  for (unsigned char c : p)
    if (c < 0x20 || c == 0x7f) __builtin_trap();
  auto again = objstore::ParseObjectUrl(u->ToString("s3"), "s3");
  if (!again.ok() || again->bucket != u->bucket || again->prefix != p) __builtin_trap();
  return 0;
}
