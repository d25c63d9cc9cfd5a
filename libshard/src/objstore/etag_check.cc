// Upload replies checked against what was sent (etag_check.h).
#include "objstore/etag_check.h"

#include <cctype>
#include <string>

#include "objstore/md5.h"

namespace libshard::objstore {
namespace {

std::string Hex(const Md5Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

// The ETag without its quotes and weak prefix, lower-cased.
std::string Bare(std::string_view e) {
  if (e.size() >= 2 && e[0] == 'W' && e[1] == '/') e.remove_prefix(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  std::string out(e);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// 32 hex digits, optionally followed by "-N" (N in 1..10000).
bool Md5Form(const std::string& bare) {
  if (bare.size() < 32) return false;
  for (size_t i = 0; i < 32; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(bare[i]))) return false;
  if (bare.size() == 32) return true;
  if (bare[32] != '-' || bare.size() == 33 || bare.size() > 38) return false;
  for (size_t i = 33; i < bare.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(bare[i]))) return false;
  return true;
}

}  // namespace

std::string EtagOfMd5(const Md5Digest& digest) { return "\"" + Hex(digest) + "\""; }

std::string MultipartEtag(const std::vector<Md5Digest>& part_digests) {
  std::string concatenated;
  concatenated.reserve(part_digests.size() * 16);
  for (const Md5Digest& d : part_digests)
    concatenated.append(reinterpret_cast<const char*>(d.data()), d.size());
  return "\"" + Hex(Md5(concatenated)) + "-" + std::to_string(part_digests.size()) + "\"";
}

EtagCheck CheckEtag(std::string_view returned, std::string_view expected,
                    std::string_view encryption) {
  // SSE-S3 ("AES256") keeps the MD5 ETags; a KMS or customer key does not.
  if (encryption.starts_with("aws:kms") || encryption == "SSE-C") return EtagCheck::kUnverifiable;
  const std::string got = Bare(returned);
  if (!Md5Form(got)) return EtagCheck::kUnverifiable;
  return got == Bare(expected) ? EtagCheck::kMatch : EtagCheck::kMismatch;
}

bool SameEtag(std::string_view a, std::string_view b) { return Bare(a) == Bare(b); }

}  // namespace libshard::objstore
