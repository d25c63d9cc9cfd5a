#include "format/manifest.h"

#include <ctime>

#include <nlohmann/json.hpp>

#include "format/bytes.h"
#include "format/index_common.h"
#include "libshard/identity.h"
#include "libshard_support/text.h"

namespace libshard::format {

using nlohmann::json;

std::string EncodeManifest(const Manifest& m) {
  json fields = json::array();
  for (const Field& f : m.schema.fields)
    fields.push_back({{"name", f.name}, {"dtype", std::string(DTypeName(f.dtype))},
                      {"rank", f.rank}, {"seq_dim", f.seq_dim}});
  json length_field = nullptr;
  if (m.schema.length_field >= 0) length_field = m.schema.fields[m.schema.length_field].name;
  json shards = json::array();
  for (const ManifestShard& s : m.shards)
    shards.push_back({{"file", s.file}, {"size", s.size}, {"samples", s.samples}});
  json j = json::object();
  j["format"] = "libshard";
  j["version"] = m.index_version;
  j["schema"] = {{"fields", fields}, {"length_field", length_field}};
  j["index"] = {{"file", m.index_file}, {"size", m.index_size}, {"xxh3", Hex16(m.index_xxh3)}};
  j["shards"] = shards;
  j["totals"] = {{"samples", m.total_samples}, {"raw_bytes", m.total_raw_bytes},
                 {"stored_bytes", m.total_stored_bytes}};
  j["provenance"] = {{"source_root", m.source_root}, {"sources", m.sources},
                     {"created_by", m.created_by}, {"created_at", m.created_at}};
  if (!m.attributes.empty()) {
    json attributes = json::object();
    for (const auto& [key, value] : m.attributes) {
      if (const int64_t* i = std::get_if<int64_t>(&value)) attributes[key] = *i;
      else attributes[key] = std::get<std::string>(value);
    }
    j["provenance"]["attributes"] = std::move(attributes);
  }
  // What made the dataset (FORMAT.md §2.2): the digest of its schema and attributes.
  const std::string digest = IdentityDigestText(IdentityDigest(m.schema, m.attributes));
  j["provenance"]["identity"] = {{"version", kIdentityVersion}, {"xxh3", digest}};
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

// A strict reader over one JSON object; the first error sticks and later calls are no-ops.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path, Status* status)
      : j_(j), path_(std::move(path)), status_(status) {
    if (status_->ok() && !j_.is_object()) Fail(path_ + " is not an object");
  }
  const json* Get(const char* key) {
    if (!status_->ok()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end()) {
      Fail(path_ + "." + key + " is missing");
      return nullptr;
    }
    return &*it;
  }
  uint64_t U64(const char* key) {
    const json* v = Get(key);
    if (!v) return 0;
    if (!v->is_number_unsigned()) {
      Fail(path_ + "." + key + " is not a non-negative integer");
      return 0;
    }
    return v->get<uint64_t>();
  }
  int64_t I64(const char* key) {
    const json* v = Get(key);
    if (!v) return 0;
    if (!v->is_number_integer()) {
      Fail(path_ + "." + key + " is not an integer");
      return 0;
    }
    return v->get<int64_t>();
  }
  std::string Str(const char* key) {
    const json* v = Get(key);
    if (!v) return {};
    if (!v->is_string()) {
      Fail(path_ + "." + key + " is not a string");
      return {};
    }
    return v->get<std::string>();
  }
  const json* Array(const char* key) {
    const json* v = Get(key);
    if (v && !v->is_array()) {
      Fail(path_ + "." + key + " is not an array");
      return nullptr;
    }
    return v;
  }
  // Unknown members are errors (FORMAT.md §2.2) unless `lenient`.
  void Only(std::initializer_list<const char*> keys) {
    if (!status_->ok()) return;
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      bool known = false;
      for (const char* k : keys) known = known || it.key() == k;
      if (!known) return Fail(path_ + " has an unknown member '" + it.key() + "'");
    }
  }
  void Fail(const std::string& what) {
    if (status_->ok()) *status_ = Status::Corruption(what);
  }

 private:
  const json& j_;
  std::string path_;
  Status* status_;
};

}  // namespace

Status CheckJsonNesting(std::string_view text, const std::string& file) {
  const size_t at = JsonTooDeepAt(text, kMaxJsonDepth);
  if (at == std::string_view::npos) return Status::OK();
  return Status::Corruption(file + ": offset " + std::to_string(at) +
                            ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                            " levels; the file is damaged or not a libshard manifest, "
                            "re-run libshard pack");
}

Result<Manifest> ParseManifest(std::string_view text, const std::string& file) {
  // nlohmann::json parses (and destroys) nested values recursively: 200,000 nested '[' overflow
  // the stack, so the depth is bounded before parsing.
  LIBSHARD_RETURN_IF_ERROR(CheckJsonNesting(text, file));
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return Status::Corruption(file + ": not valid JSON; the manifest is damaged, re-run libshard pack");
  Status st;
  Manifest m;
  ObjectReader top(j, "manifest", &st);
  if (st.ok()) {
    if (top.Str("format") != "libshard" && st.ok())
      return Status::Corruption(file + ": \"format\" is not \"libshard\"");
    // "version" is the version of the index the manifest names (FORMAT.md §2.2).
    const json* index_version = top.Get("version");
    if (index_version &&
        !(index_version->is_number_unsigned() && index_version->get<uint64_t>() >= 1 &&
          index_version->get<uint64_t>() <= kIndexVersion))
      return Status::Unsupported(
          file + ": index version " +
          index_version->dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 64) +
          " (\"version\") is not supported (this libshard reads index versions 1 to 3); "
          "upgrade libshard");
    m.index_version = index_version ? static_cast<uint32_t>(index_version->get<uint64_t>()) : 1;
  }
  top.Only({"format", "version", "schema", "index", "shards", "totals", "provenance"});
  if (const json* schema = top.Get("schema")) {
    ObjectReader sr(*schema, "schema", &st);
    sr.Only({"fields", "length_field"});
    if (const json* fields = sr.Array("fields")) {
      if (fields->size() > kMaxFields) sr.Fail("schema.fields has too many entries");
      for (size_t k = 0; st.ok() && k < fields->size(); ++k) {
        ObjectReader fr((*fields)[k], "schema.fields[" + std::to_string(k) + "]", &st);
        fr.Only({"name", "dtype", "rank", "seq_dim"});
        Field f;
        f.name = fr.Str("name");
        std::string dtype = fr.Str("dtype");
        uint64_t rank = fr.U64("rank");
        int64_t seq_dim = fr.I64("seq_dim");
        if (!st.ok()) break;
        auto dt = DTypeFromName(dtype);
        if (!dt || DTypeName(*dt) != dtype) fr.Fail("schema.fields[" + std::to_string(k) + "].dtype '" + dtype + "' is unknown");
        if (rank > kMaxRank || seq_dim < -1 || seq_dim > static_cast<int64_t>(kMaxRank))
          fr.Fail("schema.fields[" + std::to_string(k) + "] rank or seq_dim out of range");
        if (!st.ok()) break;
        f.dtype = *dt;
        f.rank = static_cast<uint32_t>(rank);
        f.seq_dim = static_cast<int32_t>(seq_dim);
        m.schema.fields.push_back(std::move(f));
      }
    }
    if (const json* lf = sr.Get("length_field")) {
      if (lf->is_null()) {
        m.schema.length_field = -1;
      } else if (lf->is_string()) {
        auto idx = m.schema.Find(lf->get<std::string>());
        if (!idx) sr.Fail("schema.length_field names no field");
        else m.schema.length_field = static_cast<int32_t>(*idx);
      } else {
        sr.Fail("schema.length_field is not a string or null");
      }
    }
    if (st.ok()) {
      Status vs = m.schema.Validate();
      if (!vs.ok()) st = Status::Corruption(vs.message());
    }
  }
  if (const json* index = top.Get("index")) {
    ObjectReader ir(*index, "index", &st);
    ir.Only({"file", "size", "xxh3"});
    m.index_file = ir.Str("file");
    m.index_size = ir.U64("size");
    std::string hex = ir.Str("xxh3");
    if (st.ok() && !IsPlainFileName(m.index_file)) ir.Fail("index.file is not a plain file name");
    if (st.ok()) {
      if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
        ir.Fail("index.xxh3 is not 16 lower-case hex digits");
      else
        m.index_xxh3 = std::stoull(hex, nullptr, 16);
    }
  }
  if (const json* shards = top.Array("shards")) {
    if (shards->size() > kMaxShards) top.Fail("manifest.shards has too many entries");
    for (size_t k = 0; st.ok() && k < shards->size(); ++k) {
      ObjectReader sr((*shards)[k], "shards[" + std::to_string(k) + "]", &st);
      sr.Only({"file", "size", "samples"});
      ManifestShard s;
      s.file = sr.Str("file");
      s.size = sr.U64("size");
      s.samples = sr.U64("samples");
      if (st.ok() && !IsPlainFileName(s.file))
        sr.Fail("shards[" + std::to_string(k) + "].file is not a plain file name");
      m.shards.push_back(std::move(s));
    }
  }
  if (const json* totals = top.Get("totals")) {
    ObjectReader tr(*totals, "totals", &st);
    tr.Only({"samples", "raw_bytes", "stored_bytes"});
    m.total_samples = tr.U64("samples");
    m.total_raw_bytes = tr.U64("raw_bytes");
    m.total_stored_bytes = tr.U64("stored_bytes");
  }
  if (const json* prov = top.Get("provenance")) {
    // Informational; unknown members are allowed here.
    ObjectReader pr(*prov, "provenance", &st);
    m.source_root = pr.Str("source_root");
    m.sources = pr.U64("sources");
    m.created_by = pr.Str("created_by");
    m.created_at = pr.Str("created_at");
    // Optional (FORMAT.md §2.2): string or integer values.
    if (auto it = prov->find("attributes"); st.ok() && it != prov->end()) {
      if (!it->is_object()) {
        st = Status::Corruption("provenance.attributes is not an object");
      } else {
        for (auto a = it->begin(); a != it->end() && st.ok(); ++a) {
          if (a->is_string()) m.attributes[a.key()] = a->get<std::string>();
          else if (a->is_number_integer() && (a->is_number_unsigned()
                       ? a->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX) : true))
            m.attributes[a.key()] = a->get<int64_t>();
          else
            st = Status::Corruption("provenance.attributes." + a.key() +
                                    " is neither a string nor an integer");
        }
      }
    }
    // Optional (FORMAT.md §2.2): the identity's digest, which must be that of the schema and the
    // attributes read above. A version this reader does not know is left unchecked (the
    // identity then counts as not recorded).
    if (auto it = prov->find("identity"); st.ok() && it != prov->end()) {
      ObjectReader ir(*it, "provenance.identity", &st);
      const uint64_t version = ir.U64("version");
      const std::string hex = ir.Str("xxh3");
      if (st.ok() && (hex.size() != 16 ||
                      hex.find_first_not_of("0123456789abcdef") != std::string::npos))
        ir.Fail("provenance.identity.xxh3 is not 16 lower-case hex digits");
      if (st.ok() && version == kIdentityVersion) {
        const std::string want = IdentityDigestText(IdentityDigest(m.schema, m.attributes));
        if (hex != want)
          st = Status::Corruption(
              "provenance.identity.xxh3 is " + hex + ", but the schema and attributes it records "
              "give " + want + " (FORMAT.md §2.2): the manifest was edited or damaged after it "
              "was written; restore it, or remove provenance.identity to open it as a dataset "
              "whose identity is not recorded");
        m.identity_recorded = st.ok();
      }
    }
  }
  if (!st.ok())
    return Status(st.code(), file + ": " + st.message() +
                                 "; the manifest is damaged, re-run libshard pack");
  return m;
}

std::string UtcTimestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace libshard::format
