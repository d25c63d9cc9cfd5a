// MD5 (RFC 1321) of a byte range, for Content-MD5 headers and the ETags of stores that name objects
// by their MD5 (etag_check.h) (an integrity check of the transfer, not a security property). Bytes
// only: no system calls.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace libshard::objstore {

std::array<uint8_t, 16> Md5(std::string_view data);
// The base64 of the digest (the Content-MD5 header), of `data` or of a digest computed already.
std::string Md5Base64(std::string_view data);
std::string Md5Base64(const std::array<uint8_t, 16>& digest);
// The lower-case hex of the digest, quoted ("\"...\""): the ETag such a store gives a single-part
// object.
std::string Md5Etag(std::string_view data);

}  // namespace libshard::objstore
