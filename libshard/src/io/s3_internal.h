// What the S3 client's files share (s3_client.cc, s3_client_multipart.cc, s3_config.cc,
// s3_request.cc, s3_transport.cc): small string helpers and the request encoding and response
// parsing helpers. Private to io/.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "io/s3_client.h"

namespace libshard::io {
namespace s3_internal {

inline std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

inline std::string Trim(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Request encoding and response parsing (s3_request.cc).
// The key as a URL path: each '/'-separated segment percent-encoded on its own (RFC 3986
// unreserved characters pass, everything else is %XX), as the SigV4 canonical URI has it.
std::string EncodeKey(std::string_view key);
// The <Code> of an S3 XML error body, or "".
std::string S3ErrorCode(const std::string& body);
// A query-string value as SigV4 canonicalises it (RFC 3986 unreserved characters pass).
std::string EncodeQueryValue(std::string_view v);
std::string XmlUnescape(std::string s);
// The text of the first <tag>...</tag> at or after `from` (end of it in *next), or nullopt.
std::optional<std::string> XmlTag(const std::string& xml, const std::string& tag, size_t from = 0,
                                  size_t* next = nullptr);
std::string XmlEscape(std::string_view v);

}  // namespace s3_internal

}  // namespace libshard::io
