// Dataset identity (libshard/identity.h): its canonical encoding (FORMAT.md §2.2), its digest,
// and the differences messages name.
#include "libshard/identity.h"

#include <algorithm>
#include <cstdio>

#include "format/bytes.h"
#include "libshard/checksum.h"

namespace libshard {
namespace {

void PutU32(std::string* out, uint32_t v) {
  std::byte b[4];
  format::PutU32(b, v);
  out->append(reinterpret_cast<const char*>(b), 4);
}
void PutU64(std::string* out, uint64_t v) {
  std::byte b[8];
  format::PutU64(b, v);
  out->append(reinterpret_cast<const char*>(b), 8);
}
void PutString(std::string* out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

std::string FieldText(const Field& f) {
  return std::string(DTypeName(f.dtype)) + " rank " + std::to_string(f.rank) + " seq_dim " +
         std::to_string(f.seq_dim);
}

}  // namespace

std::string CanonicalIdentity(const Schema& schema, const Attributes& attributes) {
  std::string out = "LSID";
  PutU32(&out, kIdentityVersion);
  PutU32(&out, static_cast<uint32_t>(schema.fields.size()));
  for (const Field& f : schema.fields) {
    PutString(&out, f.name);
    PutString(&out, DTypeName(f.dtype));
    PutU32(&out, f.rank);
    PutU32(&out, static_cast<uint32_t>(f.seq_dim));
  }
  PutU32(&out, static_cast<uint32_t>(schema.length_field));
  PutU32(&out, static_cast<uint32_t>(attributes.size()));
  for (const auto& [key, value] : attributes) {  // std::map: byte-wise key order
    PutString(&out, key);
    if (const int64_t* i = std::get_if<int64_t>(&value)) {
      out.push_back('\0');
      PutU64(&out, static_cast<uint64_t>(*i));
    } else {
      out.push_back('\1');
      PutString(&out, std::get<std::string>(value));
    }
  }
  return out;
}

uint64_t IdentityDigest(const Schema& schema, const Attributes& attributes) {
  const std::string bytes = CanonicalIdentity(schema, attributes);
  return Xxh3(bytes.data(), bytes.size());
}

std::string IdentityDigestText(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

std::string QuotedAttribute(const AttributeValue& value) {
  if (const int64_t* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  std::string s = std::get<std::string>(value);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return "'" + s + "'";
}

std::vector<IdentityDifference> AttributeDifferences(const Attributes& recorded,
                                                     const Attributes& given) {
  std::vector<IdentityDifference> out;
  for (const auto& [key, value] : given) {
    auto it = recorded.find(key);
    if (it == recorded.end())
      out.push_back({key, "(none)", QuotedAttribute(value)});
    else if (it->second != value)
      out.push_back({key, QuotedAttribute(it->second), QuotedAttribute(value)});
  }
  return out;
}

std::vector<IdentityDifference> IdentityDifferences(const Schema& a_schema, const Attributes& a,
                                                    const Schema& b_schema, const Attributes& b) {
  std::vector<IdentityDifference> out = AttributeDifferences(a, b);
  for (const auto& [key, value] : a)
    if (!b.count(key)) out.push_back({key, QuotedAttribute(value), "(none)"});
  std::sort(out.begin(), out.end(), [](const IdentityDifference& x, const IdentityDifference& y) {
    return x.field < y.field;
  });
  if (!(a_schema == b_schema)) {
    // The first field that differs, by position, or the length field.
    const size_t n = std::max(a_schema.fields.size(), b_schema.fields.size());
    for (size_t f = 0; f < n; ++f) {
      const Field* x = f < a_schema.fields.size() ? &a_schema.fields[f] : nullptr;
      const Field* y = f < b_schema.fields.size() ? &b_schema.fields[f] : nullptr;
      if (x && y && *x == *y) continue;
      const std::string name = "schema field " + std::to_string(f);
      out.push_back({name, x ? "'" + x->name + "' " + FieldText(*x) : "(none)",
                     y ? "'" + y->name + "' " + FieldText(*y) : "(none)"});
      return out;
    }
    const auto length = [](const Schema& s) {
      return s.length_field < 0 ? std::string("(none)")
                                : "'" + s.fields[static_cast<size_t>(s.length_field)].name + "'";
    };
    out.push_back({"schema length field", length(a_schema), length(b_schema)});
  }
  return out;
}

std::string DescribeDifferences(const std::vector<IdentityDifference>& differences, size_t max) {
  std::string out;
  for (size_t k = 0; k < differences.size() && k < max; ++k) {
    if (!out.empty()) out += "; ";
    out += differences[k].field + ": " + differences[k].recorded + " -> " + differences[k].given;
  }
  if (differences.size() > max)
    out += "; and " + std::to_string(differences.size() - max) + " more";
  return out;
}

Attributes SharedAttributes(const Attributes& a, const Attributes& b) {
  Attributes out;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it != b.end() && it->second == value) out.emplace(key, value);
  }
  return out;
}

}  // namespace libshard
