// S3Client on libcurl (see s3_client.h): the handle, Perform (one request with its retries) and
// the object calls. The multipart calls are in s3_client_multipart.cc, URLs and configuration in
// s3_config.cc, the request encoding and response parsing helpers in s3_request.cc.
#include "io/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "io/s3_internal.h"

namespace libshard::io {

namespace {

using s3_internal::EncodeKey;
using s3_internal::Env;
using s3_internal::S3ErrorCode;

std::once_flag g_curl_once;
CURLcode g_curl_init = CURLE_OK;

}  // namespace

struct S3Client::Handle {
  CURL* curl = nullptr;
  ~Handle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

S3Client::S3Client(S3Config config) : config_(std::move(config)) {}
S3Client::~S3Client() = default;

Result<std::unique_ptr<S3Client>> S3Client::Create(S3Config config) {
  std::call_once(g_curl_once, [] { g_curl_init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (g_curl_init != CURLE_OK)
    return Status::Internal(std::string("curl_global_init: ") + curl_easy_strerror(g_curl_init));
  std::unique_ptr<S3Client> c(new S3Client(std::move(config)));
  c->handle_ = std::make_unique<Handle>();
  c->handle_->curl = curl_easy_init();
  if (c->handle_->curl == nullptr) return Status::ResourceExhausted("curl_easy_init failed");
  return c;
}

std::string S3Client::UrlOf(const S3Url& object) const {
  const std::string key = EncodeKey(object.key);
  if (config_.path_style || object.bucket.find('.') != std::string::npos)
    return config_.endpoint + "/" + object.bucket + "/" + key;
  const size_t scheme_end = config_.endpoint.find("://") + 3;
  return config_.endpoint.substr(0, scheme_end) + object.bucket + "." +
         config_.endpoint.substr(scheme_end) + "/" + key;
}

Status S3Client::Perform(const char* method, const S3Url& object, uint64_t offset,
                         uint64_t range_len, const std::string& if_match, std::string_view body,
                         Response* response, const std::string& query,
                         const std::vector<std::string>& extra_headers) {
  const std::string url = UrlOf(object) + (query.empty() ? "" : "?" + query);
  std::string where = std::string(method) + " " + url;
  if (range_len > 0)
    where += " bytes " + std::to_string(offset) + "-" + std::to_string(offset + range_len - 1);
  std::mt19937_64 rng(std::random_device{}());
  bool reloaded_credentials = false;
  std::string last;  // why the last try failed
  for (uint32_t attempt = 0; attempt < config_.max_attempts; ++attempt) {
    if (attempt > 0) {
      ++stats_.retries;
      const uint64_t cap = std::min<uint64_t>(uint64_t{config_.backoff_ms} << std::min(attempt, 16u),
                                              5000);
      std::uniform_int_distribution<uint64_t> jitter(cap / 2, cap);
      std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
    }
    ++stats_.requests;
    CURL* h = handle_->curl;
    curl_easy_reset(h);  // keeps the connection cache
    Response& r = *response;
    r.code = 0;
    r.received = 0;
    r.overflow = false;
    r.text.clear();
    r.error_body.clear();
    r.etag.clear();
    r.encryption.clear();
    r.content_range.clear();
    r.content_length = -1;
    r.curl = h;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, static_cast<long>(config_.request_timeout_seconds));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(config_.stall_seconds));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Response::OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &Response::OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    // The path as built (EncodeKey): never "/../" or "/./" collapsed into another key or bucket.
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (const std::string ca = Env("CURL_CA_BUNDLE").empty() ? Env("SSL_CERT_FILE")
                                                             : Env("CURL_CA_BUNDLE");
        !ca.empty())
      curl_easy_setopt(h, CURLOPT_CAINFO, ca.c_str());
    std::string range;
    if (range_len > 0) {
      range = std::to_string(offset) + "-" + std::to_string(offset + range_len - 1);
      curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
    }
    const bool sends_body = std::strcmp(method, "PUT") == 0 || std::strcmp(method, "POST") == 0;
    if (std::strcmp(method, "HEAD") == 0) {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (sends_body) {
      // The body from memory with its Content-Length (no chunked encoding: S3 needs the length).
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
      // Never null: a null CURLOPT_POSTFIELDS makes curl read the body from its read callback.
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.empty() ? "" : body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      // curl asks "Expect: 100-continue" for large bodies; a server that never answers it must
      // not cost a second per part.
      curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 100L);
    } else if (std::strcmp(method, "DELETE") == 0) {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    struct curl_slist* headers = nullptr;
    // curl 7.88 signs with SigV4 but does not send x-amz-content-sha256, which S3 requires.
    // (No "Expect:" to turn off 100-continue: curl would sign it as an empty header it then does
    // not send, and the server would refuse the signature.)
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (sends_body)
      headers = curl_slist_append(headers, std::strcmp(method, "POST") == 0
                                               ? "Content-Type: application/xml"
                                               : "Content-Type: application/octet-stream");
    for (const std::string& extra : extra_headers) headers = curl_slist_append(headers, extra.c_str());
    std::string token_header, if_match_header;
    if (!config_.session_token.empty()) {
      token_header = "x-amz-security-token: " + config_.session_token;
      headers = curl_slist_append(headers, token_header.c_str());
    }
    if (!if_match.empty()) {
      if_match_header = "If-Match: " + if_match;
      headers = curl_slist_append(headers, if_match_header.c_str());
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    std::string userpwd, sigv4;
    if (!config_.access_key.empty()) {
      sigv4 = "aws:amz:" + config_.region + ":s3";
      userpwd = config_.access_key + ":" + config_.secret_key;
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
    }
    const CURLcode cc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.code);
    stats_.bytes += r.received;

    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && r.overflow)) {
      // Transport failures are retried: refused/reset connections, short bodies, stalls.
      last = std::string(curl_easy_strerror(cc)) +
             (cc == CURLE_OPERATION_TIMEDOUT
                  ? " (no progress for " + std::to_string(config_.stall_seconds) + " s or over " +
                        std::to_string(config_.request_timeout_seconds) + " s)"
                  : "");
      if (r.code != 0) last += ", HTTP " + std::to_string(r.code);
      continue;
    }
    const long code = r.code;
    const std::string s3code = S3ErrorCode(r.error_body);
    const std::string status_text =
        "HTTP " + std::to_string(code) + (s3code.empty() ? "" : " " + s3code);
    if (code >= 200 && code < 300) {
      if (r.overflow) {
        last = status_text + ", more body bytes than the " + std::to_string(r.cap) + " asked";
        continue;
      }
      if (sends_body) stats_.bytes_sent += body.size();
      return Status::OK();
    }
    if (code >= 500 || code == 429 || s3code == "SlowDown" || s3code == "RequestTimeout" ||
        s3code == "InternalError") {
      last = status_text;
      continue;
    }
    if (code == 403 || code == 401 || code == 400) {
      // Credentials may have been rotated in the files (or the environment of a child): re-read
      // them once and retry when they changed.
      if (!reloaded_credentials) {
        reloaded_credentials = true;
        Result<S3Config> fresh = LoadS3Config();
        if (fresh.ok() && (fresh->access_key != config_.access_key ||
                           fresh->secret_key != config_.secret_key ||
                           fresh->session_token != config_.session_token)) {
          config_.access_key = fresh->access_key;
          config_.secret_key = fresh->secret_key;
          config_.session_token = fresh->session_token;
          config_.source = fresh->source;
          --attempt;  // not a failure of the server
          continue;
        }
      }
      if (code == 400 && s3code != "ExpiredToken" && s3code != "InvalidToken" &&
          s3code != "AuthorizationHeaderMalformed")
        return Status::InvalidArgument(where + ": " + status_text);
      return Status::IoError(where + ": " + status_text +
                                 ": access denied with credentials from " + config_.source +
                                 "; check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / "
                                 "AWS_SESSION_TOKEN / AWS_PROFILE and AWS_REGION",
                             EACCES);
    }
    if (code == 404)
      return Status::NotFound(where + ": " + status_text +
                                  (s3code == "NoSuchUpload"
                                       ? std::string(" (no such upload: completed or aborted)")
                                       : " (no such object" +
                                             std::string(s3code == "NoSuchBucket" ? " or bucket"
                                                                                  : "") +
                                             ")"),
                              ENOENT);
    if (code == 412 || code == 416)
      return Status::IoError(where + ": " + status_text + ": the object was replaced since the "
                                 "dataset was opened (its ETag " + if_match +
                                 " no longer matches); reopen the dataset to read the new version",
                             ESTALE);
    return Status::IoError(where + ": " + status_text, EIO);
  }
  return Status::IoError(where + ": failed after " + std::to_string(config_.max_attempts) +
                             " attempts (LIBSHARD_S3_MAX_ATTEMPTS); last: " + last,
                         EIO);
}

Result<ObjectInfo> S3Client::Head(const S3Url& object) {
  Response r;
  LIBSHARD_RETURN_IF_ERROR(Perform("HEAD", object, 0, 0, {}, {}, &r));
  if (r.content_length < 0)
    return Status::IoError("HEAD " + UrlOf(object) + ": HTTP " + std::to_string(r.code) +
                               " without Content-Length",
                           EIO);
  return ObjectInfo{static_cast<uint64_t>(r.content_length), r.etag, r.encryption};
}

Status S3Client::GetRange(const S3Url& object, uint64_t offset, uint64_t length,
                          const std::string& if_match, void* dst) {
  if (length == 0) return Status::OK();
  Response r;
  r.dst = static_cast<char*>(dst);
  r.cap = length;
  const std::string where = "GET " + UrlOf(object) + " bytes " + std::to_string(offset) + "-" +
                            std::to_string(offset + length - 1);
  // A short body (a connection cut mid-transfer that curl did not see as one) is retried here.
  Status last;
  for (uint32_t attempt = 0; attempt < config_.max_attempts; ++attempt) {
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", object, offset, length, if_match, {}, &r));
    const std::string want_range = "bytes " + std::to_string(offset) + "-" +
                                   std::to_string(offset + length - 1) + "/";
    const bool whole = r.code == 200 && offset == 0;
    if (r.received == length && (whole || r.content_range.rfind(want_range, 0) == 0)) {
      if (!if_match.empty() && !r.etag.empty() && r.etag != if_match)
        return Status::IoError(where + ": HTTP " + std::to_string(r.code) + " with ETag " +
                                   r.etag + " but " + if_match + " was asked: the object was "
                                   "replaced; reopen the dataset",
                               ESTALE);
      return Status::OK();
    }
    last = Status::IoError(where + ": HTTP " + std::to_string(r.code) + " delivered " +
                               std::to_string(r.received) + " of " + std::to_string(length) +
                               " bytes (Content-Range '" + r.content_range + "')",
                           EIO);
    ++stats_.retries;
  }
  return last;
}

Result<S3Client::Body> S3Client::GetObject(const S3Url& object, uint64_t max_bytes,
                                           const std::string& if_match) {
  Response r;
  r.cap = max_bytes;
  Status st = Perform("GET", object, 0, 0, if_match, {}, &r);
  if (r.overflow)
    return Status::Corruption("GET " + UrlOf(object) + ": larger than " +
                              std::to_string(max_bytes) + " bytes");
  LIBSHARD_RETURN_IF_ERROR(st);
  if (r.content_length >= 0 && static_cast<uint64_t>(r.content_length) != r.received)
    return Status::IoError("GET " + UrlOf(object) + ": received " + std::to_string(r.received) +
                               " of " + std::to_string(r.content_length) + " bytes",
                           EIO);
  return Body{std::move(r.text), std::move(r.etag)};
}

Result<ObjectInfo> S3Client::Put(const S3Url& object, std::string_view data,
                                  const std::string& content_md5) {
  Response r;
  r.cap = 1 << 20;
  std::vector<std::string> headers;
  if (!content_md5.empty()) headers.push_back("Content-MD5: " + content_md5);
  LIBSHARD_RETURN_IF_ERROR(Perform("PUT", object, 0, 0, {}, data, &r, {}, headers));
  return ObjectInfo{data.size(), r.etag, r.encryption};
}

Status S3Client::Delete(const S3Url& object) {
  Response r;
  r.cap = 1 << 20;
  return Perform("DELETE", object, 0, 0, {}, {}, &r);
}

}  // namespace libshard::io
