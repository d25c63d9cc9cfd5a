// MD5 (RFC 1321) of a byte range, for S3's Content-MD5 and part ETags only (an integrity check of
// the transfer, not a security property). Bytes only: no system calls.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace libshard::remote {

std::array<uint8_t, 16> Md5(std::string_view data);
// The base64 of the digest (the Content-MD5 header), of `data` or of a digest computed already.
std::string Md5Base64(std::string_view data);
std::string Md5Base64(const std::array<uint8_t, 16>& digest);
// The lower-case hex of the digest, quoted ("\"...\""): S3's ETag of a single-part object.
std::string Md5Etag(std::string_view data);

}  // namespace libshard::remote
