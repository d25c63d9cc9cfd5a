// S3Client's multipart upload calls (s3_client.h): CreateMultipartUpload, UploadPart, ListParts,
// CompleteMultipartUpload, ListMultipartUploads and AbortMultipartUpload, over Perform.
#include <string>
#include <string_view>
#include <vector>

#include "io/s3_internal.h"

namespace libshard::io {

using s3_internal::EncodeQueryValue;
using s3_internal::XmlEscape;
using s3_internal::XmlTag;

Result<std::string> S3Client::CreateMultipartUpload(const S3Url& object) {
  Response r;
  r.cap = 1 << 20;
  LIBSHARD_RETURN_IF_ERROR(Perform("POST", object, 0, 0, {}, {}, &r, "uploads="));
  std::optional<std::string> id = XmlTag(r.text, "UploadId");
  if (!id || id->empty())
    return Status::IoError("POST " + UrlOf(object) + "?uploads: HTTP " + std::to_string(r.code) +
                               " without an UploadId",
                           EIO);
  return *id;
}

Result<ObjectInfo> S3Client::UploadPart(const S3Url& object, const std::string& upload_id,
                                         uint32_t number, std::string_view data,
                                         const std::string& content_md5) {
  Response r;
  r.cap = 1 << 20;
  std::vector<std::string> headers;
  if (!content_md5.empty()) headers.push_back("Content-MD5: " + content_md5);
  const std::string query =
      "partNumber=" + std::to_string(number) + "&uploadId=" + EncodeQueryValue(upload_id);
  LIBSHARD_RETURN_IF_ERROR(Perform("PUT", object, 0, 0, {}, data, &r, query, headers));
  if (r.etag.empty())
    return Status::IoError("PUT " + UrlOf(object) + "?" + query + ": HTTP " +
                               std::to_string(r.code) + " without an ETag",
                           EIO);
  return ObjectInfo{data.size(), r.etag, r.encryption};
}

Result<std::vector<S3Client::Part>> S3Client::ListParts(const S3Url& object,
                                                        const std::string& upload_id) {
  std::vector<Part> parts;
  uint64_t marker = 0;
  for (int page = 0; page < 100; ++page) {  // 10000 parts at most, 1000 a page
    Response r;
    r.cap = 16 << 20;
    const std::string query = (marker ? "part-number-marker=" + std::to_string(marker) + "&"
                                      : std::string()) +
                              "uploadId=" + EncodeQueryValue(upload_id);
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", object, 0, 0, {}, {}, &r, query));
    size_t pos = 0;
    for (size_t next = 0; XmlTag(r.text, "Part", pos, &next); pos = next) {
      const size_t b = r.text.find("<Part>", pos);
      const std::string part = r.text.substr(b, next - b);
      Part p;
      p.number = static_cast<uint32_t>(std::strtoul(XmlTag(part, "PartNumber").value_or("0").c_str(),
                                                    nullptr, 10));
      p.size = std::strtoull(XmlTag(part, "Size").value_or("0").c_str(), nullptr, 10);
      p.etag = XmlTag(part, "ETag").value_or("");
      if (p.number > 0) parts.push_back(std::move(p));
    }
    if (XmlTag(r.text, "IsTruncated").value_or("false") != "true") break;
    const uint64_t m = std::strtoull(XmlTag(r.text, "NextPartNumberMarker").value_or("0").c_str(),
                                     nullptr, 10);
    if (m <= marker) break;
    marker = m;
  }
  std::sort(parts.begin(), parts.end(),
            [](const Part& a, const Part& b) { return a.number < b.number; });
  return parts;
}

Result<ObjectInfo> S3Client::CompleteMultipartUpload(const S3Url& object,
                                                      const std::string& upload_id,
                                                      const std::vector<Part>& parts) {
  std::string xml = "<CompleteMultipartUpload>";
  for (const Part& p : parts)
    xml += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" +
           XmlEscape(p.etag) + "</ETag></Part>";
  xml += "</CompleteMultipartUpload>";
  Response r;
  r.cap = 1 << 20;
  const std::string query = "uploadId=" + EncodeQueryValue(upload_id);
  LIBSHARD_RETURN_IF_ERROR(Perform("POST", object, 0, 0, {}, xml, &r, query));
  // S3 may answer 200 and report the failure in the body.
  if (r.text.find("<Error>") != std::string::npos)
    return Status::IoError("POST " + UrlOf(object) + "?" + query + ": HTTP " +
                               std::to_string(r.code) + " " +
                               XmlTag(r.text, "Code").value_or("") + ": " +
                               XmlTag(r.text, "Message").value_or(""),
                           EIO);
  std::optional<std::string> etag = XmlTag(r.text, "ETag");
  return ObjectInfo{0, etag ? *etag : r.etag, r.encryption};
}

Result<std::vector<S3Client::Upload>> S3Client::ListMultipartUploads(
    const std::string& bucket, const std::string& key_prefix) {
  std::vector<Upload> out;
  std::string key_marker, id_marker;
  const S3Url where{bucket, ""};
  for (int page = 0; page < 10; ++page) {
    Response r;
    r.cap = 16 << 20;
    // Canonical order: key-marker, prefix, upload-id-marker, uploads.
    std::string query;
    if (!key_marker.empty()) query += "key-marker=" + EncodeQueryValue(key_marker) + "&";
    query += "prefix=" + EncodeQueryValue(key_prefix) + "&";
    if (!id_marker.empty()) query += "upload-id-marker=" + EncodeQueryValue(id_marker) + "&";
    query += "uploads=";
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", where, 0, 0, {}, {}, &r, query));
    size_t pos = 0;
    for (size_t next = 0; XmlTag(r.text, "Upload", pos, &next); pos = next) {
      const size_t b = r.text.find("<Upload>", pos);
      const std::string u = r.text.substr(b, next - b);
      Upload up{XmlTag(u, "Key").value_or(""), XmlTag(u, "UploadId").value_or("")};
      if (!up.key.empty() && !up.upload_id.empty()) out.push_back(std::move(up));
    }
    if (XmlTag(r.text, "IsTruncated").value_or("false") != "true") break;
    key_marker = XmlTag(r.text, "NextKeyMarker").value_or("");
    id_marker = XmlTag(r.text, "NextUploadIdMarker").value_or("");
    if (key_marker.empty()) break;
  }
  return out;
}

Status S3Client::AbortMultipartUpload(const S3Url& object, const std::string& upload_id) {
  Response r;
  r.cap = 1 << 20;
  return Perform("DELETE", object, 0, 0, {}, {}, &r, "uploadId=" + EncodeQueryValue(upload_id));
}

}  // namespace libshard::io
