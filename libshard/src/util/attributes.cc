#include "libshard/attributes.h"

#include "libshard_support/text.h"

namespace libshard {

std::string AttributeText(const AttributeValue& value) {
  if (const int64_t* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  return std::get<std::string>(value);
}

std::string AttributesText(const Attributes& attributes) {
  std::string out;
  for (const auto& [key, value] : attributes) {
    if (!out.empty()) out += ", ";
    out += key + "=" + AttributeText(value);
  }
  return out;
}

Status CheckAttributes(const Attributes& actual, const Attributes& expected,
                       const std::string& what) {
  for (const auto& [key, want] : expected) {
    auto it = actual.find(key);
    if (it == actual.end())
      return Status::InvalidArgument(what + " does not record attribute '" + key +
                                     "' (expected '" + AttributeText(want) +
                                     "'); it was written without it (" +
                                     (actual.empty() ? std::string("no attributes")
                                                     : AttributesText(actual)) +
                                     "): regenerate it with that attribute, or do not expect it");
    if (it->second != want)
      return Status::InvalidArgument(what + " was made with " + key + "='" +
                                     AttributeText(it->second) + "', not '" + AttributeText(want) +
                                     "': it belongs to another " + key +
                                     "; use the dataset made for '" + AttributeText(want) + "'");
  }
  return Status::OK();
}

Status ValidateAttributes(const Attributes& attributes) {
  if (attributes.size() > 256)
    return Status::InvalidArgument("more than 256 dataset attributes");
  for (const auto& [key, value] : attributes) {
    if (key.empty() || key.size() > 256)
      return Status::InvalidArgument("dataset attribute key '" + key.substr(0, 80) +
                                     "' must be 1..256 bytes");
    if (key.find('\0') != std::string::npos)
      return Status::InvalidArgument("dataset attribute keys must not contain NUL");
    // The manifest holds them as JSON strings, and the identity's digest their bytes (FORMAT.md
    // §2.2): bytes JSON cannot hold would be replaced in one and not in the other.
    if (!IsValidUtf8(key))
      return Status::InvalidArgument("dataset attribute key '" + EscapeNonUtf8(key.substr(0, 80)) +
                                     "' is not valid UTF-8");
    if (const std::string* s = std::get_if<std::string>(&value); s && s->size() > 65536)
      return Status::InvalidArgument("dataset attribute '" + key + "' is longer than 64 KiB");
    if (const std::string* s = std::get_if<std::string>(&value); s && !IsValidUtf8(*s))
      return Status::InvalidArgument("dataset attribute '" + key + "' is not valid UTF-8 ('" +
                                     EscapeNonUtf8(s->substr(0, 80)) + "')");
  }
  return Status::OK();
}

}  // namespace libshard
