// Object-store URL rules (object_url.h).
#include "objstore/object_url.h"

#include <cctype>
#include <string>

namespace libshard::objstore {
namespace {

Status Refuse(std::string_view url, const std::string& why) {
  return Status::InvalidArgument(std::string(url) + ": " + why);
}

}  // namespace

std::string ObjectUrl::KeyOf(std::string_view name) const {
  return prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
}

std::string ObjectUrl::ToString(std::string_view scheme) const {
  return std::string(scheme) + "://" + bucket + (prefix.empty() ? "" : "/" + prefix);
}

std::string_view UrlScheme(std::string_view location) {
  const size_t colon = location.find("://");
  if (colon == std::string_view::npos || colon == 0) return {};
  const std::string_view scheme = location.substr(0, colon);
  if (!std::isalpha(static_cast<unsigned char>(scheme[0]))) return {};
  for (unsigned char c : scheme)
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return {};
  return scheme;
}

Result<ObjectUrl> ParseObjectUrl(std::string_view url, std::string_view scheme) {
  const std::string form = std::string(scheme) + "://BUCKET/PREFIX";
  if (UrlScheme(url) != scheme)
    return Refuse(url, "not a " + std::string(scheme) + ":// URL; write " + form);
  std::string_view rest = url.substr(scheme.size() + 3);
  const size_t slash = rest.find('/');
  ObjectUrl out;
  out.scheme = std::string(scheme);
  out.bucket = std::string(rest.substr(0, slash));
  if (out.bucket.empty()) return Refuse(url, "no bucket; write " + form);
  std::string_view key =
      slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (!key.empty() && key.back() == '/') {
    key.remove_suffix(1);
    if (key.empty() || key.back() == '/')
      return Refuse(url, "an empty path segment ('//'); write " + form);
  }
  for (unsigned char c : key)
    if (c < 0x20 || c == 0x7f)
      return Refuse(url, "a control character in the key prefix; write " + form +
                             " with printable characters");
  if (key.size() > kMaxKeyPrefix)
    return Refuse(url, "a key prefix of " + std::to_string(key.size()) + " bytes; at most " +
                           std::to_string(kMaxKeyPrefix) + " fit the dataset's object names");
  for (std::string_view walk = key; !walk.empty();) {
    const size_t end = walk.find('/');
    const std::string_view segment = walk.substr(0, end);
    if (segment.empty())
      return Refuse(url, "an empty path segment ('//'); write " + form +
                             " with one '/' between segments");
    if (segment == "." || segment == "..")
      return Refuse(url, "a '" + std::string(segment) +
                             "' path segment; write the prefix without '.' and '..' segments "
                             "(they would address another key, or another bucket)");
    walk = end == std::string_view::npos ? std::string_view() : walk.substr(end + 1);
  }
  out.prefix = std::string(key);
  return out;
}

}  // namespace libshard::objstore
