// The S3 client's request encoding and response parsing helpers (s3_internal.h).
#include <cctype>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "io/s3_internal.h"

namespace libshard::io::s3_internal {

// Each '/'-separated segment encoded on its own (EncodeQueryValue's unreserved set), joined by
// '/'. The storage driver refuses "." and ".." segments in the URLs users write, and the client
// sends the path as built (CURLOPT_PATH_AS_IS), so no segment is ever collapsed.
std::string EncodeKey(std::string_view key) {
  std::string out;
  for (std::string_view rest = key;;) {
    const size_t slash = rest.find('/');
    out += EncodeQueryValue(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    out.push_back('/');
    rest = rest.substr(slash + 1);
  }
  return out;
}

// The <Code> of an S3 XML error body, or "".
std::string S3ErrorCode(const std::string& body) {
  const size_t b = body.find("<Code>");
  const size_t e = body.find("</Code>");
  if (b == std::string::npos || e == std::string::npos || e < b) return {};
  return body.substr(b + 6, e - b - 6);
}

// A query-string value as SigV4 canonicalises it (RFC 3986 unreserved characters pass).
std::string EncodeQueryValue(std::string_view v) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string XmlUnescape(std::string s) {
  // One pass (a reply full of entities costs its length, not its length squared).
  static const std::pair<std::string_view, char> kEntities[] = {
      {"&quot;", '"'}, {"&apos;", '\''}, {"&lt;", '<'}, {"&gt;", '>'}, {"&#34;", '"'},
      {"&amp;", '&'}};
  if (s.find('&') == std::string::npos) return s;
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    bool replaced = false;
    if (s[i] == '&') {
      for (const auto& [from, to] : kEntities) {
        if (std::string_view(s).substr(i, from.size()) == from) {
          out.push_back(to);
          i += from.size();
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out.push_back(s[i++]);
  }
  return out;
}

// The text of the first <tag>...</tag> at or after `from` (end of it in *next), or nullopt.
std::optional<std::string> XmlTag(const std::string& xml, const std::string& tag, size_t from,
                                  size_t* next) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t b = xml.find(open, from);
  if (b == std::string::npos) return std::nullopt;
  const size_t e = xml.find(close, b + open.size());
  if (e == std::string::npos) return std::nullopt;
  if (next != nullptr) *next = e + close.size();
  return XmlUnescape(xml.substr(b + open.size(), e - b - open.size()));
}

std::string XmlEscape(std::string_view v) {
  std::string out;
  for (char c : v) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace libshard::io::s3_internal
