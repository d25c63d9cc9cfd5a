// S3Client's multipart upload calls (s3_client.h): CreateMultipartUpload, UploadPart, ListParts,
// CompleteMultipartUpload, ListMultipartUploads and AbortMultipartUpload, over Perform.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "io/s3_internal.h"
#include "io/s3_xml.h"

namespace libshard::io {

using s3_internal::EncodeQueryValue;
using s3_internal::XmlEscape;
using s3_internal::XmlTag;

Result<std::string> S3Client::CreateMultipartUpload(const S3Url& object) {
  S3Response r;
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
  S3Response r;
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
    S3Response r;
    r.cap = 16 << 20;
    const std::string query = (marker ? "part-number-marker=" + std::to_string(marker) + "&"
                                      : std::string()) +
                              "uploadId=" + EncodeQueryValue(upload_id);
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", object, 0, 0, {}, {}, &r, query));
    LIBSHARD_ASSIGN_OR_RETURN(PartsPage got, ParseListParts(r.text, "GET " + UrlOf(object) +
                                                                        "?" + query));
    for (PartsPage::Part& p : got.parts) parts.push_back({p.number, p.size, std::move(p.etag)});
    if (parts.size() > kMaxPartNumber)
      return Status::IoError("GET " + UrlOf(object) + "?uploadId=" + upload_id +
                                 ": more parts listed than an upload can have",
                             EIO);
    if (!got.truncated || got.next_marker <= marker) break;
    marker = got.next_marker;
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
  S3Response r;
  r.cap = 1 << 20;
  const std::string query = "uploadId=" + EncodeQueryValue(upload_id);
  LIBSHARD_RETURN_IF_ERROR(Perform("POST", object, 0, 0, {}, xml, &r, query));
  // S3 may answer 200 and report the failure in the body.
  LIBSHARD_ASSIGN_OR_RETURN(
      std::optional<std::string> etag,
      ParseCompleteResult(r.text, "POST " + UrlOf(object) + "?" + query + ": HTTP " +
                                      std::to_string(r.code)));
  return ObjectInfo{0, etag ? *etag : r.etag, r.encryption};
}

Result<std::vector<S3Client::Upload>> S3Client::ListMultipartUploads(
    const std::string& bucket, const std::string& key_prefix) {
  std::vector<Upload> out;
  std::string key_marker, id_marker;
  const S3Url where{bucket, ""};
  for (int page = 0; page < 10; ++page) {
    S3Response r;
    r.cap = 16 << 20;
    // Canonical order: key-marker, prefix, upload-id-marker, uploads.
    std::string query;
    if (!key_marker.empty()) query += "key-marker=" + EncodeQueryValue(key_marker) + "&";
    query += "prefix=" + EncodeQueryValue(key_prefix) + "&";
    if (!id_marker.empty()) query += "upload-id-marker=" + EncodeQueryValue(id_marker) + "&";
    query += "uploads=";
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", where, 0, 0, {}, {}, &r, query));
    LIBSHARD_ASSIGN_OR_RETURN(UploadsPage got,
                              ParseListUploads(r.text, "GET " + UrlOf(where) + "?" + query));
    for (UploadsPage::Upload& u : got.uploads)
      out.push_back({std::move(u.key), std::move(u.upload_id)});
    if (!got.truncated) break;
    key_marker = got.next_key_marker;
    id_marker = got.next_upload_id_marker;
    if (key_marker.empty()) break;
  }
  return out;
}

Result<std::vector<S3Client::Listed>> S3Client::ListObjects(const std::string& bucket,
                                                            const std::string& key_prefix,
                                                            size_t max_entries) {
  std::vector<Listed> out;
  std::string token;
  const S3Url where{bucket, ""};
  for (;;) {
    S3Response r;
    r.cap = 16 << 20;
    // Canonical order: continuation-token, list-type, prefix.
    std::string query;
    if (!token.empty()) query += "continuation-token=" + EncodeQueryValue(token) + "&";
    query += "list-type=2&prefix=" + EncodeQueryValue(key_prefix.substr(0, key_prefix.find('/')));
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", where, 0, 0, {}, {}, &r, query));
    LIBSHARD_ASSIGN_OR_RETURN(ObjectsPage got,
                              ParseListObjects(r.text, "GET " + UrlOf(where) + "?" + query));
    for (ObjectsPage::Object& o : got.objects) {
      if (o.key.rfind(key_prefix, 0) != 0) continue;
      if (out.size() >= max_entries)
        return Status::ResourceExhausted("GET " + UrlOf(where) + "?" + query + ": more than " +
                                         std::to_string(max_entries) + " objects listed");
      out.push_back({std::move(o.key), o.size, std::move(o.etag)});
    }
    if (!got.truncated || got.next_token.empty() || got.next_token == token) break;
    token = std::move(got.next_token);
  }
  return out;
}

Status S3Client::AbortMultipartUpload(const S3Url& object, const std::string& upload_id) {
  S3Response r;
  r.cap = 1 << 20;
  return Perform("DELETE", object, 0, 0, {}, {}, &r, "uploadId=" + EncodeQueryValue(upload_id));
}

}  // namespace libshard::io
