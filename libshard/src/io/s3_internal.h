// What the S3 client's files share (s3_client.cc, s3_client_multipart.cc, s3_config.cc,
// s3_request.cc): small string helpers, the request encoding and response parsing helpers, and
// the response sink of S3Client::Perform. Private to io/.
#pragma once

#include <curl/curl.h>

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

inline constexpr size_t kMaxErrorBody = 4096;

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

// The sink of one request (S3Client::Perform): status, body and the headers it uses.
struct S3Client::Response {
  long code = 0;
  // Body sink: `dst` (capacity `cap`) for a GET into a buffer, else `text` up to `cap`.
  char* dst = nullptr;
  uint64_t cap = 0;
  uint64_t received = 0;
  bool overflow = false;
  std::string text;
  std::string error_body;  // a non-2xx body, truncated
  std::string etag;
  std::string encryption;  // ObjectInfo::encryption
  std::string content_range;
  int64_t content_length = -1;
  CURL* curl = nullptr;

  static size_t OnBody(char* p, size_t, size_t n, void* user) {
    auto* r = static_cast<Response*>(user);
    long code = 0;
    curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300) {
      r->error_body.append(p, std::min(n, s3_internal::kMaxErrorBody - std::min(s3_internal::kMaxErrorBody,
                                                                   r->error_body.size())));
      return n;
    }
    if (r->received + n > r->cap) {
      r->overflow = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    if (r->dst != nullptr) {
      std::memcpy(r->dst + r->received, p, n);
    } else {
      r->text.append(p, n);
    }
    r->received += n;
    return n;
  }
  static size_t OnHeader(char* p, size_t, size_t n, void* user) {
    auto* r = static_cast<Response*>(user);
    std::string line(p, n);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect or 100)
        r->etag.clear();
        r->encryption.clear();
        r->content_range.clear();
        r->content_length = -1;
      }
      return n;
    }
    const std::string name = s3_internal::Lower(s3_internal::Trim(line.substr(0, colon)));
    const std::string value = s3_internal::Trim(line.substr(colon + 1));
    if (name == "etag") r->etag = value;
    if (name == "x-amz-server-side-encryption") r->encryption = value;
    if (name == "x-amz-server-side-encryption-customer-algorithm") r->encryption = "SSE-C";
    if (name == "content-range") r->content_range = value;
    if (name == "content-length") r->content_length = std::strtoll(value.c_str(), nullptr, 10);
    return n;
  }
};

}  // namespace libshard::io
