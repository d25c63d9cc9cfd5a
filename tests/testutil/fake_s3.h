// FakeS3: an in-memory S3 server behind the client's transport seam (io/s3_transport.h), with
// faults injected per request, so the tests drive the real S3Client (its retries and checks),
// the node-local cache, the block fetcher and the uploader in-process, under ASan and TSan,
// without a network. tests/python/s3_server.py (moto behind a fault proxy) stays the end-to-end
// check against a real server.
//
// What it serves, as S3 does: HEAD, GET (whole or one Range, If-Match answered 412 when the
// object's ETag differs), PUT (Content-MD5 checked: 400 BadDigest), DELETE, and the multipart
// calls (CreateMultipartUpload, UploadPart, ListParts, CompleteMultipartUpload,
// AbortMultipartUpload, ListMultipartUploads). ETags are quoted MD5 hex ("md5-N" for multipart
// objects). Signatures are not checked. Path-style URLs only: http://fake-s3/BUCKET/KEY.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "io/s3_transport.h"

namespace libshard::testing {

// What a fault does to the one response it applies to.
enum class S3Fault {
  kStatus503,        // 503 SlowDown (retried by the client)
  kReset,            // the connection fails before any response (a transport error)
  kShortBody,        // half the body, then the connection fails (curl: partial file)
  kShortNoLength,    // half the body and no Content-Length: looks complete
  kFlipByte,         // the body whole, one byte flipped (at `arg` of the body, or its middle)
  kStall,            // no byte for the stall time: the transport's timeout error
  kNoEtag,           // no ETag header
  kNoContentLength,  // no Content-Length header
  kNoContentRange,   // a 206 without Content-Range
  kIgnoreIfMatch,    // If-Match not checked (serves whatever the object is now)
  kIgnoreRange,      // the Range header ignored: 200 and the whole object
};

// A rule applies its faults (one or several together) to the next `times` matching requests.
struct S3FaultRule {
  std::vector<S3Fault> faults;
  std::string method;                  // "GET", ...; empty: any
  std::string key_contains;            // applies to keys containing this; empty: any
  std::string query_contains;          // and to query strings containing this ("partNumber=7&")
  bool ranged_only = false;            // only GETs with a Range header
  uint64_t range_offset = UINT64_MAX;  // only ranges starting here (UINT64_MAX: any)
  int times = 1;                       // how many matching requests it applies to (-1: every one)
  uint64_t arg = UINT64_MAX;           // kFlipByte: the body offset flipped
};

class FakeS3 : public std::enable_shared_from_this<FakeS3> {
 public:
  static std::shared_ptr<FakeS3> Make();

  // Installs this server as the transport of every S3Client made until the returned guard is
  // destroyed (it restores the previous transport factory).
  class Installed {
   public:
    explicit Installed(io::S3TransportFactory previous) : previous_(std::move(previous)) {}
    ~Installed();
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;

   private:
    io::S3TransportFactory previous_;
  };
  std::unique_ptr<Installed> Install();
  // The endpoint the S3Config should name (path-style).
  static constexpr const char* kEndpoint = "http://fake-s3";

  // Objects. Put replaces (a new ETag when the bytes differ).
  void Put(const std::string& bucket, const std::string& key, std::string data);
  bool Has(const std::string& bucket, const std::string& key) const;
  std::string Get(const std::string& bucket, const std::string& key) const;
  std::string Etag(const std::string& bucket, const std::string& key) const;
  void Remove(const std::string& bucket, const std::string& key);
  // Flips the byte at `offset` of an object and keeps its ETag: an object damaged in the bucket.
  void Damage(const std::string& bucket, const std::string& key, uint64_t offset);
  // Every object under "bucket/prefix/" from a local directory's regular files.
  void PutDirectory(const std::string& bucket, const std::string& prefix, const std::string& dir);
  // Keys of `bucket` (sorted).
  std::vector<std::string> Keys(const std::string& bucket) const;

  void AddFault(S3FaultRule rule);
  void ClearFaults();

  // Counts (requests received, faults included).
  uint64_t Requests(const std::string& method, const std::string& key_contains = {}) const;
  // GETs with a Range delivered in full, per key and offset.
  uint64_t RangedGets(const std::string& key_contains, uint64_t offset = UINT64_MAX) const;
  uint64_t FaultsApplied() const;
  void ResetCounts();

  // The transport (one exchange, see io/s3_transport.h).
  Status Exchange(const io::S3Request& request, io::S3Response* response);

 private:
  struct Object {
    std::string data;
    std::string etag;
  };
  struct Upload {
    std::string bucket, key;
    std::map<uint32_t, Object> parts;
  };
  struct Logged {
    std::string method, key;
    bool ranged = false;
    uint64_t offset = 0;
    bool delivered = false;
  };
  FakeS3() = default;
  // Requires mu_: the first rule that applies to the request, consumed.
  bool TakeFault(const std::string& method, const std::string& key, const std::string& query,
                 bool ranged, uint64_t offset, S3FaultRule* out);

  mutable std::mutex mu_;
  std::map<std::string, Object> objects_;  // "bucket/key"
  std::map<std::string, Upload> uploads_;  // upload id
  uint64_t next_upload_ = 1;
  std::vector<S3FaultRule> faults_;
  std::vector<Logged> log_;
  uint64_t faults_applied_ = 0;
};

}  // namespace libshard::testing
