// The S3 protocol front of the tests: serves an in-memory object server (objstore/memory_store.h:
// the objects, the multipart uploads, the fault rules and the counts, one copy for every
// object-storage test) over the S3 client's transport seam (io/s3_transport.h), so that the real
// S3Client (its retries and checks), the s3:// store, the node-local cache and the uploader run
// in-process, under ASan and TSan, without a network. tests/python/s3_server.py (moto behind a
// fault proxy) is the end-to-end check against a real server.
//
// What it serves, as S3 does: HEAD, GET (whole, one Range, or ListObjectsV2; If-Match answered
// 412 when the object's ETag differs), PUT (Content-MD5 checked: 400 BadDigest; If-None-Match:
// * answered 412 for an existing object), DELETE, and the multipart calls. Signatures are not
// checked. Path-style URLs only: http://fake-s3/BUCKET/KEY. Every fault rule of the server
// applies, in HTTP terms (objstore::Fault).
#pragma once

#include <memory>

#include "io/s3_transport.h"
#include "objstore/memory_store.h"

namespace libshard::testing {

// The endpoint the S3 configuration names (AWS_ENDPOINT_URL_S3; path-style).
inline constexpr const char* kS3Endpoint = "http://fake-s3";

// While it lives, every S3Client made talks to `server`; destroyed, the previous transport
// factory is back.
class S3Front {
 public:
  explicit S3Front(std::shared_ptr<objstore::MemoryServer> server);
  ~S3Front();
  S3Front(const S3Front&) = delete;
  S3Front& operator=(const S3Front&) = delete;

  // One exchange (io/s3_transport.h).
  static Status Exchange(objstore::MemoryServer& server, const io::S3Request& request,
                         io::S3Response* response);

 private:
  io::S3TransportFactory previous_;
};

inline std::unique_ptr<S3Front> ServeS3(std::shared_ptr<objstore::MemoryServer> server) {
  return std::make_unique<S3Front>(std::move(server));
}

}  // namespace libshard::testing
