// The S3 API's XML replies (s3_xml.h).
#include "io/s3_xml.h"

#include <cerrno>
#include <charconv>

#include "io/s3_internal.h"

namespace libshard::io {
namespace {

using s3_internal::XmlTag;

constexpr size_t kMaxEntries = 10000;

std::optional<uint64_t> Number(const std::string& text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

// Calls f(element) for each <tag>...</tag> in order; at most kMaxEntries.
template <typename F>
Status EachElement(const std::string& xml, const std::string& tag, const std::string& where,
                   F&& f) {
  const std::string open = "<" + tag + ">";
  size_t pos = 0, count = 0;
  for (size_t next = 0; XmlTag(xml, tag, pos, &next); pos = next) {
    if (++count > kMaxEntries)
      return Status::InvalidArgument(where + ": more than " + std::to_string(kMaxEntries) + " <" +
                                     tag + "> in one reply");
    const size_t b = xml.find(open, pos);
    LIBSHARD_RETURN_IF_ERROR(f(xml.substr(b, next - b)));
  }
  return Status::OK();
}

}  // namespace

Result<PartsPage> ParseListParts(const std::string& xml, const std::string& where) {
  PartsPage page;
  LIBSHARD_RETURN_IF_ERROR(EachElement(xml, "Part", where, [&](const std::string& e) -> Status {
    const std::optional<uint64_t> number = Number(XmlTag(e, "PartNumber").value_or(""));
    const std::optional<uint64_t> size = Number(XmlTag(e, "Size").value_or(""));
    if (!number || *number < 1 || *number > kMaxPartNumber || !size)
      return Status::InvalidArgument(where +
                                     ": a listed part without a number in 1..10000 "
                                     "and a size");
    page.parts.push_back({static_cast<uint32_t>(*number), *size, XmlTag(e, "ETag").value_or("")});
    return Status::OK();
  }));
  page.truncated = XmlTag(xml, "IsTruncated").value_or("false") == "true";
  page.next_marker = Number(XmlTag(xml, "NextPartNumberMarker").value_or("")).value_or(0);
  return page;
}

Result<UploadsPage> ParseListUploads(const std::string& xml, const std::string& where) {
  UploadsPage page;
  LIBSHARD_RETURN_IF_ERROR(EachElement(xml, "Upload", where, [&](const std::string& e) {
    UploadsPage::Upload up{XmlTag(e, "Key").value_or(""), XmlTag(e, "UploadId").value_or("")};
    if (!up.key.empty() && !up.upload_id.empty()) page.uploads.push_back(std::move(up));
    return Status::OK();
  }));
  page.truncated = XmlTag(xml, "IsTruncated").value_or("false") == "true";
  page.next_key_marker = XmlTag(xml, "NextKeyMarker").value_or("");
  page.next_upload_id_marker = XmlTag(xml, "NextUploadIdMarker").value_or("");
  return page;
}

Result<ObjectsPage> ParseListObjects(const std::string& xml, const std::string& where) {
  ObjectsPage page;
  LIBSHARD_RETURN_IF_ERROR(EachElement(xml, "Contents", where, [&](const std::string& e) -> Status {
    const std::optional<std::string> key = XmlTag(e, "Key");
    const std::optional<uint64_t> size = Number(XmlTag(e, "Size").value_or(""));
    if (!key || key->empty() || !size)
      return Status::InvalidArgument(where + ": a listed object without a key and a size");
    page.objects.push_back({*key, *size, XmlTag(e, "ETag").value_or("")});
    return Status::OK();
  }));
  page.truncated = XmlTag(xml, "IsTruncated").value_or("false") == "true";
  page.next_token = XmlTag(xml, "NextContinuationToken").value_or("");
  return page;
}

Result<std::optional<std::string>> ParseCompleteResult(const std::string& xml,
                                                       const std::string& where) {
  if (xml.find("<Error>") != std::string::npos)
    return Status::IoError(where + ": " + XmlTag(xml, "Code").value_or("") + ": " +
                               XmlTag(xml, "Message").value_or(""),
                           EIO);
  return XmlTag(xml, "ETag");
}

}  // namespace libshard::io
