// libFuzzer target for the S3 API's XML replies (io/s3_xml.h): ListObjectsV2, ListParts,
// ListMultipartUploads and CompleteMultipartUpload bodies and error codes, as a server (or whatever
// answers in its place) may send them. Checks the bounds the parsers promise.
//
// Input: one byte choosing the parser, then the body.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/s3_internal.h"
#include "io/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard::io;
  if (size < 1) return 0;
  const std::string xml(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0: {
      auto page = ParseListParts(xml, "fuzz");
      if (!page.ok()) return 0;
      if (page->parts.size() > 10000) __builtin_trap();
      for (const auto& p : page->parts)
        if (p.number < 1 || p.number > kMaxPartNumber) __builtin_trap();
      break;
    }
    case 1: {
      auto page = ParseListUploads(xml, "fuzz");
      if (page.ok() && page->uploads.size() > 10000) __builtin_trap();
      break;
    }
    case 2:
      (void)ParseCompleteResult(xml, "fuzz");
      break;
    case 4: {
      auto page = ParseListObjects(xml, "fuzz");
      if (!page.ok()) return 0;
      if (page->objects.size() > 10000 || page->next_token.size() > xml.size()) __builtin_trap();
      for (const auto& o : page->objects)
        if (o.key.empty() || o.key.size() > xml.size()) __builtin_trap();
      break;
    }
    default: {
      const std::string code = s3_internal::S3ErrorCode(xml);
      const std::string plain = s3_internal::XmlUnescape(xml);
      if (code.size() > xml.size() || plain.size() > xml.size()) __builtin_trap();
      break;
    }
  }
  return 0;
}
