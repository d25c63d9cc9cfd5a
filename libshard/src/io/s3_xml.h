// The S3 API's XML replies as data (the bodies of ListObjectsV2, ListParts, ListMultipartUploads,
// CreateMultipartUpload and CompleteMultipartUpload, and error bodies). Untrusted input: every
// count bounded by what S3 itself allows. Bytes only, no system calls (fuzz/s3_xml_fuzz.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libshard/status.h"

namespace libshard::io {

// One page of ListParts: its parts (numbers 1..10000, as listed) and where the next page starts.
struct PartsPage {
  struct Part {
    uint32_t number = 0;
    uint64_t size = 0;
    std::string etag;
  };
  std::vector<Part> parts;
  bool truncated = false;
  uint64_t next_marker = 0;
};
// At most kMaxParts parts a page (S3 lists 1000); a part number outside 1..10000 or a size that
// is not a number is refused (InvalidArgument naming `where`).
inline constexpr uint32_t kMaxPartNumber = 10000;
Result<PartsPage> ParseListParts(const std::string& xml, const std::string& where);

// One page of ListMultipartUploads.
struct UploadsPage {
  struct Upload {
    std::string key;
    std::string upload_id;
  };
  std::vector<Upload> uploads;  // at most 10000 a page (S3 lists 1000)
  bool truncated = false;
  std::string next_key_marker;
  std::string next_upload_id_marker;
};
Result<UploadsPage> ParseListUploads(const std::string& xml, const std::string& where);

// One page of ListObjectsV2: the objects (at most 10000 a page; S3 lists 1000) and the token of
// the next page. A listed object without a key or with a size that is not a number is refused
// (InvalidArgument naming `where`).
struct ObjectsPage {
  struct Object {
    std::string key;
    uint64_t size = 0;
    std::string etag;
  };
  std::vector<Object> objects;
  bool truncated = false;
  std::string next_token;
};
Result<ObjectsPage> ParseListObjects(const std::string& xml, const std::string& where);

// CompleteMultipartUpload's body: the new object's ETag, or the error S3 may report with a 200
// ("<Error><Code>..." : IoError naming `where`, code and message).
Result<std::optional<std::string>> ParseCompleteResult(const std::string& xml,
                                                       const std::string& where);

}  // namespace libshard::io
