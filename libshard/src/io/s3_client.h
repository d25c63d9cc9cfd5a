// S3Client: the object-storage client (system calls and network only; no libshard format
// knowledge): the S3 API's requests, their retries and the checks of every reply, over an
// S3Transport (s3_transport.h: libcurl's, or a test's in-memory server).
//
// One client owns one transport (one connection, kept alive between requests) and is used by one
// thread at a time; the S3-dialect stores (objstore/s3_dialect_store.cc: s3://, gs://) keep a pool
// of them, one per call in flight, and never hand a child of fork its parent's. Every request is
// bounded: `max_attempts` tries with exponential backoff on 5xx / 429 / SlowDown, reset
// connections, short bodies and stalls (no byte for `stall_seconds`), each try bounded by
// `request_timeout_seconds`. Every error names the URL, the byte range and the HTTP status (or
// the transport error).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/s3_transport.h"
#include "libshard/status.h"

namespace libshard::io {

// An object's address: its bucket and key (no leading '/'). The s3:// (gs://) URLs users write
// are parsed and checked by their store (objstore/s3_store.cc, gcs_store.cc); the key is
// percent-encoded per segment when a request is built (UrlOf).
struct S3Url {
  std::string bucket;
  std::string key;
};

// Where and as whom requests go. LoadS3Config reads, in the AWS SDKs' order:
//   credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the profile
//     AWS_PROFILE (default "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), else
//     of AWS_CONFIG_FILE (~/.aws/config); none at all: unsigned (anonymous) requests.
//   region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`; else us-east-1.
//   endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's `endpoint_url`; else
//     https://s3.REGION.amazonaws.com.
//   addressing: LIBSHARD_S3_ADDRESSING=path|virtual, else the profile's
//     `s3 = addressing_style = ...` (or `s3_addressing_style`), else path-style for a custom
//     endpoint and virtual-host for AWS (path-style for a bucket name with dots).
//   bounds: LIBSHARD_S3_MAX_ATTEMPTS (8), LIBSHARD_S3_STALL_SECONDS (30),
//     LIBSHARD_S3_TIMEOUT_SECONDS (300 per request), LIBSHARD_S3_BACKOFF_MS (100, the first wait).
// Other servers of the S3 API under another scheme (gs://: objstore/gcs_store.cc) read their own
// configuration into the same struct.
struct S3Config;
Result<S3Config> LoadS3Config();
struct S3Config {
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string region = "us-east-1";
  std::string endpoint;  // scheme://host[:port], no trailing '/'
  bool path_style = true;
  uint32_t max_attempts = 8;
  uint32_t stall_seconds = 30;
  uint32_t request_timeout_seconds = 300;
  uint32_t backoff_ms = 100;
  std::string source;  // where the credentials came from ("environment", "profile x of FILE")
  // What a denied request's error tells the user to check (the variables that set the
  // credentials, and the store's scheme), and the loader that made this configuration: a client
  // re-reads its credentials with it once when a request is denied (rotated in the files or the
  // environment). The defaults are s3://'s; another S3-dialect store (gs://) sets its own.
  std::string credential_hint =
      "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN / AWS_PROFILE and AWS_REGION";
  Result<S3Config> (*reload)() = &LoadS3Config;  // nullptr: never re-read
};
// The client's bounds every S3-dialect configuration takes from the environment's table
// (util/env_knobs.h): LIBSHARD_S3_MAX_ATTEMPTS, _STALL_SECONDS, _TIMEOUT_SECONDS, _BACKOFF_MS.
[[nodiscard]] Status ReadS3ClientBounds(S3Config* config);

struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;  // as the server sent it, quotes included
  // The server-side encryption the reply names: x-amz-server-side-encryption ("AES256",
  // "aws:kms", "aws:kms:dsse"), or "SSE-C" for a customer key; "" when none is named. Under
  // aws:kms and SSE-C S3's ETag is not the MD5 of the bytes (objstore/etag_check.h).
  std::string encryption;
};

// Counters of one client (for tests and benchmarks).
struct S3ClientStats {
  uint64_t requests = 0;  // every try, retries included
  uint64_t retries = 0;
  uint64_t bytes = 0;     // body bytes received
  uint64_t bytes_sent = 0;  // request body bytes sent (successful tries)
};

class S3Client {
 public:
  // A client on a transport from MakeS3Transport (libcurl's unless a test installed another).
  static Result<std::unique_ptr<S3Client>> Create(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // HEAD: the object's size and ETag. NotFound (ENOENT) for 404.
  Result<ObjectInfo> Head(const S3Url& object);
  // GET of bytes [offset, offset + length) into dst (length bytes; any alignment). With
  // `if_match` (an ETag) the server refuses a replaced object: IoError with ESTALE ("the object
  // was replaced"). Succeeds only when exactly `length` bytes of that range arrived.
  [[nodiscard]] Status GetRange(const S3Url& object, uint64_t offset, uint64_t length,
                                const std::string& if_match, void* dst);
  // GET of a whole object of at most `max_bytes` (Corruption when larger), with its ETag.
  struct Body {
    std::string data;
    std::string etag;
  };
  Result<Body> GetObject(const S3Url& object, uint64_t max_bytes, const std::string& if_match = {});
  // PUT of a whole object (single request; UNSIGNED-PAYLOAD). With `content_md5` (the base64
  // MD5 of `data`) a server that checks it refuses a body damaged on the way. With `if_absent`
  // (If-None-Match: *) a server that supports it refuses to replace an object: AlreadyExists.
  // Returns the reply's ETag and encryption, with `size` the bytes sent.
  Result<ObjectInfo> Put(const S3Url& object, std::string_view data,
                         const std::string& content_md5 = {}, bool if_absent = false);
  // DELETE of an object (S3 answers 204 also for a missing one).
  [[nodiscard]] Status Delete(const S3Url& object);

  // ListObjectsV2 of the keys starting with `key_prefix` in `bucket` (key, size, ETag), at most
  // `max_entries` (more: ResourceExhausted). The request's prefix stops before the first '/' of
  // `key_prefix` (some servers refuse a '/' in a signed query value); the keys listed are
  // matched against the whole of it here.
  struct Listed {
    std::string key;
    uint64_t size = 0;
    std::string etag;
  };
  Result<std::vector<Listed>> ListObjects(const std::string& bucket, const std::string& key_prefix,
                                          size_t max_entries);

  // Multipart upload (the S3 API's CreateMultipartUpload / UploadPart / ListParts /
  // CompleteMultipartUpload / AbortMultipartUpload). Parts are numbered 1..10000; every part but
  // the last is at least 5 MiB on AWS. An upload is invisible to readers until completed.
  struct Part {
    uint32_t number = 0;
    uint64_t size = 0;
    std::string etag;  // quotes included
  };
  // Starts an upload of `object`; returns its upload id.
  Result<std::string> CreateMultipartUpload(const S3Url& object);
  // Uploads one part (with Content-MD5 when given); returns its ETag and the reply's encryption,
  // with `size` the bytes sent.
  Result<ObjectInfo> UploadPart(const S3Url& object, const std::string& upload_id,
                                uint32_t number, std::string_view data,
                                const std::string& content_md5 = {});
  // The parts uploaded so far, by number. NotFound (ENOENT) when the upload is no more (completed
  // or aborted).
  Result<std::vector<Part>> ListParts(const S3Url& object, const std::string& upload_id);
  // Makes the object of `parts` (ascending numbers) visible; returns its ETag and the reply's
  // encryption (`size` unset).
  Result<ObjectInfo> CompleteMultipartUpload(const S3Url& object, const std::string& upload_id,
                                              const std::vector<Part>& parts);
  [[nodiscard]] Status AbortMultipartUpload(const S3Url& object, const std::string& upload_id);
  // The unfinished multipart uploads of keys starting with `key_prefix` in `bucket` (key and
  // upload id), at most 10 pages of 1000.
  struct Upload {
    std::string key;
    std::string upload_id;
  };
  Result<std::vector<Upload>> ListMultipartUploads(const std::string& bucket,
                                                   const std::string& key_prefix);

  // "http://host:port/bucket/key" (path-style) or "http://bucket.host:port/key".
  std::string UrlOf(const S3Url& object) const;
  const S3Config& config() const { return config_; }
  const S3ClientStats& stats() const { return stats_; }

 private:
  explicit S3Client(S3Config config);
  // One request with retries. `method` is GET, HEAD, PUT, POST or DELETE; `range_len` 0 for no
  // Range header; `query` the canonical query string (sorted keys, values encoded: curl 7.88
  // signs it as given); `headers` extra "Name: value" lines (signed too).
  Status Perform(const char* method, const S3Url& object, uint64_t offset, uint64_t range_len,
                 const std::string& if_match, std::string_view body, S3Response* response,
                 const std::string& query = {}, const std::vector<std::string>& headers = {});

  S3Config config_;
  std::unique_ptr<S3Transport> transport_;
  S3ClientStats stats_;
};

}  // namespace libshard::io
