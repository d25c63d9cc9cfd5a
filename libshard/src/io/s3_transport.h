// S3Transport: the HTTP exchange under S3Client (s3_client.h). One request out, one response in:
// no retries, no S3 knowledge, no checks of what the server sent (S3Client does those). The
// libcurl transport (s3_curl_transport.cc) talks to servers; tests install the S3 front over a
// memory store's server and its fault rules (tests/testutil/fake_s3.h) through
// SetS3TransportFactory, so the client's retries and checks, the cache, the block fetcher and the
// uploader run in-process, under the sanitizers, without a server.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/status.h"

namespace libshard::io {

// One request as S3Client made it. The transport signs it (SigV4) when `access_key` is set.
struct S3Request {
  std::string method;  // GET, HEAD, PUT, POST or DELETE
  std::string url;     // scheme://host[:port]/path?query, the key already encoded
  uint64_t range_offset = 0;
  uint64_t range_length = 0;         // 0: no Range header
  std::vector<std::string> headers;  // extra "Name: value" lines (If-Match, Content-MD5, ...)
  std::string_view body;             // PUT and POST
  std::string region;
  std::string access_key;
  std::string secret_key;
  uint32_t stall_seconds = 30;     // no body byte for this long: the transfer failed
  uint32_t timeout_seconds = 300;  // the whole exchange
};

// What came back, filled in by the transport through the On* calls, read by S3Client.
struct S3Response {
  long code = 0;  // the HTTP status of the last response (after a 100 Continue, say)
  // Body sink: `dst` (capacity `cap`) for a GET into a buffer, else `text` up to `cap` bytes.
  char* dst = nullptr;
  uint64_t cap = 0;
  uint64_t received = 0;
  bool overflow = false;  // more body than `cap`: the transfer was stopped
  std::string text;
  std::string error_body;  // a non-2xx body, at most kMaxErrorBody bytes
  std::string etag;
  std::string encryption;  // ObjectInfo::encryption (x-amz-server-side-encryption, or SSE-C)
  std::string content_range;
  int64_t content_length = -1;  // -1: no Content-Length header

  static constexpr size_t kMaxErrorBody = 4096;

  // Before each try: everything but the sink's target (dst, cap).
  void Reset();
  // A status line: a new response begins (its headers replace the previous one's).
  void OnStatus(long status);
  // One header line ("Name: value", CR LF or not). A line without a colon that starts with
  // "HTTP/" is a status line.
  void OnHeader(std::string_view line);
  // Body bytes of the current response. False: more than `cap` (overflow set); stop the
  // transfer.
  bool OnBody(const char* p, size_t n);
};

class S3Transport {
 public:
  virtual ~S3Transport() = default;
  // Performs one exchange. OK when a response arrived whole (any HTTP status, in
  // response->code), or when the sink stopped it (response->overflow). Otherwise an IoError
  // saying why the transfer failed (connection refused or reset, a body shorter than its
  // Content-Length, no byte for stall_seconds, over timeout_seconds); S3Client retries those.
  // One transport is used by one thread at a time.
  [[nodiscard]] virtual Status Exchange(const S3Request& request, S3Response* response) = 0;
};

using S3TransportFactory = std::function<Result<std::unique_ptr<S3Transport>>()>;

// A transport from the installed factory (libcurl's unless a test installed another).
Result<std::unique_ptr<S3Transport>> MakeS3Transport();
// Installs `factory` for every transport made from now on (an empty one: libcurl's again) and
// returns the previous one. For tests; thread-safe.
S3TransportFactory SetS3TransportFactory(S3TransportFactory factory);
// libcurl's transport (s3_curl_transport.cc).
Result<std::unique_ptr<S3Transport>> MakeCurlTransport();

}  // namespace libshard::io
