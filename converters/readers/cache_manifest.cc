#include "readers/cache_manifest.h"

#include <set>

#include "libshard_support/text.h"

namespace libshard::convert {

Result<CacheJson> ParseCacheJson(std::string_view text, const std::string& what) {
  // The caches' own readers load their manifests with Python's json, which refuses a text that
  // starts with a UTF-8 byte-order mark ("Unexpected UTF-8 BOM"); the JSON parser here would skip
  // it, and pack a cache its owner cannot read.
  if (text.starts_with("\xEF\xBB\xBF"))
    return Status::Corruption(what + ": starts with a UTF-8 byte-order mark, which the cache's "
                              "own reader (Python's json) refuses; write it without one");
  if (JsonTooDeepAt(text, kMaxCacheJsonNesting) != std::string_view::npos)
    return Status::Corruption(what + ": JSON nested deeper than " +
                              std::to_string(kMaxCacheJsonNesting) +
                              " levels; the file is damaged or not this cache's");
  std::vector<std::set<std::string>> keys;  // one set per open object
  bool duplicate = false;
  std::string duplicate_key;
  CacheJson::parser_callback_t check = [&](int, CacheJson::parse_event_t event, CacheJson& v) {
    switch (event) {
      case CacheJson::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case CacheJson::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case CacheJson::parse_event_t::key:
        if (!keys.empty() && v.is_string() && !keys.back().insert(v.get<std::string>()).second &&
            !duplicate) {
          duplicate = true;
          duplicate_key = v.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  CacheJson j = CacheJson::parse(text.begin(), text.end(), check, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return Status::Corruption(what + ": invalid JSON; the file is damaged or not this cache's");
  if (duplicate)
    return Status::Corruption(what + ": the key '" + PrintableBytes(duplicate_key) +
                              "' appears twice in one object; the file is damaged");
  return j;
}

Result<CacheJson> ReadCacheJsonObject(const CacheDir& dir, const std::string& rel,
                                      uint64_t max_bytes) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> f, dir.Open(rel));
  if (f->size() > max_bytes)
    return Status::ResourceExhausted(dir.Name(rel) + ": " + std::to_string(f->size()) +
                                     " bytes, more than the " + std::to_string(max_bytes) +
                                     " a cache manifest may have; the file is not a manifest");
  std::string text(static_cast<size_t>(f->size()), '\0');
  LIBSHARD_RETURN_IF_ERROR(f->ReadAt(0, std::as_writable_bytes(std::span(text)), "the manifest"));
  LIBSHARD_ASSIGN_OR_RETURN(CacheJson j, ParseCacheJson(text, dir.Name(rel)));
  if (!j.is_object())
    return Status::Corruption(dir.Name(rel) + ": not a JSON object; the file is damaged or not "
                              "this cache's manifest");
  return j;
}

void ManifestAttributes(const CacheJson& manifest, SourceFormat format,
                        const std::vector<std::string_view>& skip, Attributes* attributes,
                        std::vector<std::string>* omitted) {
  constexpr size_t kMaxKey = 256, kMaxValue = size_t{64} << 10, kMaxMembers = 255;
  const std::string prefix = std::string(SourceFormatName(format)) + ".";
  (*attributes)["source_format"] = std::string(SourceFormatName(format));
  size_t members = 0;
  for (const auto& [key, value] : manifest.items()) {
    bool skipped = false;
    for (std::string_view s : skip) skipped = skipped || key == s;
    if (skipped) continue;
    AttributeValue v;
    if (value.is_string()) {
      v = value.get<std::string>();
    } else if (value.is_number_integer() &&
               (value.is_number_unsigned() ? value.get<uint64_t>() <= INT64_MAX : true)) {
      v = value.get<int64_t>();
    } else {
      v = value.dump(-1, ' ', false, CacheJson::error_handler_t::replace);
    }
    const std::string name = prefix + key;
    const bool fits = name.size() <= kMaxKey && members < kMaxMembers &&
                      (!std::holds_alternative<std::string>(v) ||
                       std::get<std::string>(v).size() <= kMaxValue) &&
                      !key.empty();
    if (!fits) {
      omitted->push_back(PrintableBytes(key, 200));
      continue;
    }
    (*attributes)[name] = std::move(v);
    ++members;
  }
}

std::optional<uint64_t> JsonUnsigned(const CacheJson& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

}  // namespace libshard::convert
