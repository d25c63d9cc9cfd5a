// What an upload's replies prove about the bytes the server stored (docs/guide/object-storage.md,
// "What is checked on upload"). S3 names a single PUT's object and each part of a multipart
// upload by the MD5 of its bytes (its ETag: the quoted lower-case hex), and a completed multipart
// object by the MD5 of its parts' digests with "-N" appended; comparing that ETag with the MD5 of
// what was sent tells a body damaged on the way (which a server that ignores Content-MD5 stores
// as it arrived) from one stored intact. Bytes only: no system calls.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace libshard::objstore {

using Md5Digest = std::array<uint8_t, 16>;

// The ETag S3 gives bytes of MD5 `digest` sent in one request (a PUT or one part).
std::string EtagOfMd5(const Md5Digest& digest);
// The ETag S3 gives the object completed from parts of these MD5s, in part order.
std::string MultipartEtag(const std::vector<Md5Digest>& part_digests);

enum class EtagCheck {
  kMatch,         // the reply's ETag is the MD5 of what was sent
  kMismatch,      // it is an MD5, of other bytes: the body was damaged on the way
  kUnverifiable,  // the server's ETags are not MD5s (SSE-KMS, SSE-C, some S3-compatible stores)
};
// Compares `returned` (an upload reply's ETag, the reply naming `encryption` as
// io::ObjectInfo::encryption does) with `expected` (EtagOfMd5 or MultipartEtag). Under aws:kms
// and SSE-C, or when `returned` is not of the MD5 form (32 hex digits, "-N" for a multipart
// object), it proves nothing: kUnverifiable (the server's check of Content-MD5 is then what
// protects the transfer).
EtagCheck CheckEtag(std::string_view returned, std::string_view expected,
                    std::string_view encryption);

// ETags as servers spell them compared: surrounding quotes and a weak "W/" prefix dropped, hex
// digits of either case.
bool SameEtag(std::string_view a, std::string_view b);

}  // namespace libshard::objstore
