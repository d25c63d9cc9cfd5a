#include "format/metadata_codec.h"

#include <bit>
#include <cstring>
#include <unordered_set>

#include "format/bytes.h"
#include "libshard/schema.h"

namespace libshard::format {

namespace {
enum MetaType : uint8_t { kBool = 1, kInt64 = 2, kFloat64 = 3, kString = 4 };
}  // namespace

Status EncodeMetadata(const Metadata& metadata, std::string* out) {
  if (metadata.empty()) return Status::OK();
  std::string buf;
  ByteWriter w(&buf);
  w.U32(static_cast<uint32_t>(metadata.size()));
  std::unordered_set<std::string_view> keys;
  for (const MetaEntry& e : metadata) {
    if (e.key.empty() || e.key.size() > kMaxNameBytes)
      return Status::InvalidArgument("metadata key '" + e.key + "' must have 1.." +
                                     std::to_string(kMaxNameBytes) + " bytes");
    if (!keys.insert(e.key).second)
      return Status::InvalidArgument("metadata key '" + e.key + "' appears twice");
    w.U16(static_cast<uint16_t>(e.key.size()));
    w.Bytes(e.key);
    if (const bool* b = std::get_if<bool>(&e.value)) {
      w.U8(kBool);
      w.U8(*b ? 1 : 0);
    } else if (const int64_t* i = std::get_if<int64_t>(&e.value)) {
      w.U8(kInt64);
      w.I64(*i);
    } else if (const double* d = std::get_if<double>(&e.value)) {
      w.U8(kFloat64);
      w.U64(std::bit_cast<uint64_t>(*d));
    } else {
      const std::string& s = std::get<std::string>(e.value);
      if (s.size() > kMaxMetadataBytes)
        return Status::InvalidArgument("metadata value of '" + e.key + "' is too long");
      w.U8(kString);
      w.U32(static_cast<uint32_t>(s.size()));
      w.Bytes(s);
    }
    if (buf.size() > kMaxMetadataBytes)
      return Status::InvalidArgument("metadata exceeds " + std::to_string(kMaxMetadataBytes) +
                                     " bytes encoded");
  }
  out->append(buf);
  return Status::OK();
}

Status DecodeMetadata(std::span<const std::byte> bytes, Metadata* out) {
  if (out) out->clear();
  if (bytes.empty()) return Status::OK();
  if (bytes.size() > kMaxMetadataBytes)
    return Status::Corruption("metadata of " + std::to_string(bytes.size()) +
                              " bytes exceeds the limit");
  ByteReader r(bytes.data(), bytes.size());
  auto bad = [&](const std::string& what) {
    return Status::Corruption("metadata byte " + std::to_string(r.position()) + ": " + what);
  };
  uint32_t count = 0;
  if (!r.U32(&count)) return bad("truncated entry count");
  // The smallest entry is 5 bytes (key length, 1-byte key, type, bool), so a count larger than
  // that allows is rejected before reserving anything.
  if (count > r.remaining() / 5) return bad("entry count " + std::to_string(count) + " too large");
  if (out) out->reserve(count);
  // Keys are checked as EncodeMetadata checks them (1..kMaxNameBytes, §5; unique, §3.4), so
  // whatever decodes encodes again, and a duplicate never silently shadows a value (a Python
  // dict keeps only one of them).
  std::unordered_set<std::string_view> keys;
  for (uint32_t k = 0; k < count; ++k) {
    uint16_t key_len = 0;
    std::string_view key;
    uint8_t type = 0;
    if (!r.U16(&key_len)) return bad("truncated key length");
    if (key_len == 0) return bad("empty key");
    if (key_len > kMaxNameBytes)
      return bad("key of " + std::to_string(key_len) + " bytes exceeds " +
                 std::to_string(kMaxNameBytes));
    if (!r.Bytes(key_len, &key)) return bad("truncated key");
    if (!keys.insert(key).second) return bad("key '" + std::string(key) + "' appears twice");
    if (!r.U8(&type)) return bad("truncated type");
    MetaValue value;
    switch (type) {
      case kBool: {
        uint8_t b = 0;
        if (!r.U8(&b)) return bad("truncated bool");
        if (b > 1) return bad("bool value " + std::to_string(b) + " is not 0 or 1");
        value = b != 0;
        break;
      }
      case kInt64: {
        int64_t i = 0;
        if (!r.I64(&i)) return bad("truncated int64");
        value = i;
        break;
      }
      case kFloat64: {
        uint64_t bits = 0;
        if (!r.U64(&bits)) return bad("truncated float64");
        value = std::bit_cast<double>(bits);
        break;
      }
      case kString: {
        uint32_t len = 0;
        std::string_view s;
        if (!r.U32(&len)) return bad("truncated string length");
        if (!r.Bytes(len, &s)) return bad("string of " + std::to_string(len) + " bytes truncated");
        value = std::string(s);
        break;
      }
      default:
        return bad("unknown value type " + std::to_string(type));
    }
    if (out) out->push_back(MetaEntry{std::string(key), std::move(value)});
  }
  if (r.remaining() != 0) return bad(std::to_string(r.remaining()) + " trailing bytes");
  return Status::OK();
}

}  // namespace libshard::format
