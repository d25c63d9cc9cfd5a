// MD5 of S3's Content-MD5 and part ETags; see md5.h. OpenSSL's libcrypto computes it (its
// assembly MD5, the same library libcurl already links for TLS) and encodes the base64.
#include "objstore/md5.h"

#include <openssl/evp.h>

#include <cstdio>

namespace libshard::objstore {

std::array<uint8_t, 16> Md5(std::string_view data) {
  std::array<uint8_t, 16> digest{};
  unsigned int size = 0;
  // EVP_Digest fails only when the allocator does (or MD5 is disabled by a FIPS-only
  // configuration); the digest stays zero then, which no server accepts as a Content-MD5 of
  // real bytes, so the upload is refused with the server's error rather than sent unchecked.
  EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_md5(), nullptr);
  return digest;
}

std::string Md5Base64(std::string_view data) { return Md5Base64(Md5(data)); }

std::string Md5Base64(const std::array<uint8_t, 16>& d) {
  unsigned char out[32] = {};  // 4 * ceil(16 / 3) = 24 characters and the terminator
  const int n = EVP_EncodeBlock(out, d.data(), static_cast<int>(d.size()));
  return std::string(reinterpret_cast<const char*>(out), n > 0 ? static_cast<size_t>(n) : 0);
}

std::string Md5Etag(std::string_view data) {
  const std::array<uint8_t, 16> d = Md5(data);
  std::string s = "\"";
  char hex[3];
  for (uint8_t b : d) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    s += hex;
  }
  s += '"';
  return s;
}

}  // namespace libshard::objstore
