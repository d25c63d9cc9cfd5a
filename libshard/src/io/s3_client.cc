// S3Client (see s3_client.h): Perform (one request with its retries, over the transport) and
// the object calls. The multipart calls are in s3_client_multipart.cc, URLs and configuration in
// s3_config.cc, the request encoding and response parsing helpers in s3_request.cc, the libcurl
// transport in s3_curl_transport.cc.
#include "io/s3_client.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "io/s3_internal.h"

namespace libshard::io {

namespace {

using s3_internal::EncodeKey;
using s3_internal::S3ErrorCode;

}  // namespace

S3Client::S3Client(S3Config config) : config_(std::move(config)) {}
S3Client::~S3Client() = default;

Result<std::unique_ptr<S3Client>> S3Client::Create(S3Config config) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<S3Transport> transport, MakeS3Transport());
  std::unique_ptr<S3Client> c(new S3Client(std::move(config)));
  c->transport_ = std::move(transport);
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
                         S3Response* response, const std::string& query,
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
    S3Response& r = *response;
    r.Reset();
    S3Request q;
    q.method = method;
    q.url = url;
    if (range_len > 0) {
      q.range_offset = offset;
      q.range_length = range_len;
    }
    q.headers = extra_headers;
    if (!config_.session_token.empty())
      q.headers.push_back("x-amz-security-token: " + config_.session_token);
    if (!if_match.empty()) q.headers.push_back("If-Match: " + if_match);
    q.body = body;
    q.region = config_.region;
    q.access_key = config_.access_key;
    q.secret_key = config_.secret_key;
    q.stall_seconds = config_.stall_seconds;
    q.timeout_seconds = config_.request_timeout_seconds;
    const Status sent = transport_->Exchange(q, &r);
    stats_.bytes += r.received;
    const bool sends_body = q.method == "PUT" || q.method == "POST";

    if (!sent.ok()) {
      // Transport failures are retried: refused/reset connections, short bodies, stalls.
      last = sent.message();
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
      if (!reloaded_credentials && config_.reload != nullptr) {
        reloaded_credentials = true;
        Result<S3Config> fresh = config_.reload();
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
                                 "; check " + config_.credential_hint,
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
    const bool if_absent = std::find(extra_headers.begin(), extra_headers.end(),
                                     "If-None-Match: *") != extra_headers.end();
    if (code == 412 && if_absent)
      return Status::AlreadyExists(where + ": " + status_text + ": the object exists");
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
  S3Response r;
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
  S3Response r;
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
  S3Response r;
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
                                  const std::string& content_md5, bool if_absent) {
  S3Response r;
  r.cap = 1 << 20;
  std::vector<std::string> headers;
  if (!content_md5.empty()) headers.push_back("Content-MD5: " + content_md5);
  if (if_absent) headers.push_back("If-None-Match: *");
  LIBSHARD_RETURN_IF_ERROR(Perform("PUT", object, 0, 0, {}, data, &r, {}, headers));
  return ObjectInfo{data.size(), r.etag, r.encryption};
}

Status S3Client::Delete(const S3Url& object) {
  S3Response r;
  r.cap = 1 << 20;
  return Perform("DELETE", object, 0, 0, {}, {}, &r);
}

}  // namespace libshard::io
