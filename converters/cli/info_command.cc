// `libshard info DIR [--json]`: schema, counts, sizes, length histogram, provenance summary.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "libshard/dataset.h"
#include "pack/option_parsing.h"

namespace libshard::cli {
namespace {

struct InfoArgs {
  std::string dir;
  bool json = false;
};

// Power-of-two length buckets [lo, hi): 0, 1, 2-3, 4-7, ...
nlohmann::json LengthStats(const std::vector<uint64_t>& lengths) {
  nlohmann::json j;
  if (lengths.empty()) {
    j["min"] = j["max"] = j["total"] = 0;
    j["mean"] = 0.0;
    j["histogram"] = nlohmann::json::array();
    return j;
  }
  uint64_t lo = UINT64_MAX, hi = 0, total = 0;
  std::vector<uint64_t> buckets(65, 0);
  for (uint64_t l : lengths) {
    lo = std::min(lo, l);
    hi = std::max(hi, l);
    total += l;
    ++buckets[l == 0 ? 0 : 64 - __builtin_clzll(l)];
  }
  j["min"] = lo;
  j["max"] = hi;
  j["total"] = total;
  j["mean"] = static_cast<double>(total) / static_cast<double>(lengths.size());
  auto hist = nlohmann::json::array();
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (!buckets[b]) continue;
    const uint64_t b_lo = b == 0 ? 0 : uint64_t{1} << (b - 1);
    const uint64_t b_hi = b == 0 ? 1 : (b == 64 ? UINT64_MAX : uint64_t{1} << b);
    hist.push_back({{"lo", b_lo}, {"hi", b_hi}, {"count", buckets[b]}});
  }
  j["histogram"] = hist;
  return j;
}

Result<nlohmann::json> Describe(const Dataset& ds) {
  nlohmann::json j;
  j["path"] = ds.path();
  j["samples"] = ds.size();
  auto shards = nlohmann::json::array();
  for (const ShardInfo& s : ds.shards()) {
    shards.push_back({{"file", s.path}, {"size", s.size}, {"samples", s.samples}});
  }
  j["shards"] = shards;
  const Schema& schema = ds.schema();
  // Per field: its codec (FORMAT.md §4.3) and its raw and stored bytes over every sample
  // (stored: the field's regions; unknown for samples compressed whole, §4.2).
  const std::vector<uint8_t> codecs = ds.field_codecs();
  std::vector<uint64_t> raw_bytes(schema.fields.size(), 0), stored_bytes(schema.fields.size(), 0);
  bool whole_sample_zstd = false;
  for (uint64_t i = 0; i < ds.size(); ++i) {
    LIBSHARD_ASSIGN_OR_RETURN(SampleLocation loc, ds.Locate(i));
    whole_sample_zstd |= (loc.flags & kSampleFlagZstd) != 0;
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, ds.field_stored_sizes(i));
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      raw_bytes[f] += ds.tensor(i, f).nbytes;
      stored_bytes[f] += sizes[f];
    }
  }
  auto fields = nlohmann::json::array();
  for (size_t k = 0; k < schema.fields.size(); ++k) {
    const Field& f = schema.fields[k];
    fields.push_back({{"name", f.name}, {"dtype", std::string(DTypeName(f.dtype))}, {"rank", f.rank},
                      {"seq_dim", f.seq_dim},
                      {"codec", std::string(FieldCodecName(codecs.empty() ? 0 : codecs[k]))},
                      {"raw_bytes", raw_bytes[k]},
                      {"stored_bytes", whole_sample_zstd ? nlohmann::json(nullptr)
                                                         : nlohmann::json(stored_bytes[k])}});
  }
  j["schema"] = {{"fields", fields},
                 {"length_field", schema.length_field >= 0
                                      ? nlohmann::json(schema.fields[static_cast<size_t>(schema.length_field)].name)
                                      : nlohmann::json(nullptr)}};
  uint64_t source_bytes = 0, hashed = 0;
  std::string first, last;
  for (uint64_t i = 0; i < ds.size(); ++i) {
    LIBSHARD_ASSIGN_OR_RETURN(Provenance p, ds.source(i));
    source_bytes += p.size;
    hashed += p.content_hash != 0;
    if (i == 0) first = p.path;
    last = p.path;
  }
  j["totals"] = {{"samples", ds.size()},
                 {"shards", ds.shards().size()},
                 {"raw_bytes", ds.total_raw_bytes()},
                 {"stored_bytes", ds.total_stored_bytes()},
                 {"source_bytes", source_bytes}};
  j["lengths"] = LengthStats(ds.lengths());
  nlohmann::json prov = {{"first", first}, {"last", last}, {"hashed_sources", hashed}};
  // The manifest's provenance (source root, tool, time), as Dataset::Open read and checked it.
  const DatasetProvenance& made = ds.provenance();
  prov["source_root"] = made.source_root;
  prov["sources"] = made.sources;
  prov["created_by"] = made.created_by;
  prov["created_at"] = made.created_at;
  j["provenance"] = prov;
  // What produced the data (attributes.h): target model, layer ids, ...
  nlohmann::json attributes = nlohmann::json::object();
  for (const auto& [key, value] : made.attributes) {
    if (const int64_t* i = std::get_if<int64_t>(&value)) attributes[key] = *i;
    else attributes[key] = std::get<std::string>(value);
  }
  j["attributes"] = std::move(attributes);
  return j;
}

void PrintText(const nlohmann::json& j) {
  using convert::FormatBytes;
  std::printf("dataset      %s\n", j["path"].get<std::string>().c_str());
  std::printf("samples      %llu in %zu shards\n", j["samples"].get<unsigned long long>(), j["shards"].size());
  const auto& t = j["totals"];
  std::printf("bytes        %s stored, %s payload, %s of sources\n",
              FormatBytes(t["stored_bytes"].get<uint64_t>()).c_str(),
              FormatBytes(t["raw_bytes"].get<uint64_t>()).c_str(),
              FormatBytes(t["source_bytes"].get<uint64_t>()).c_str());
  std::printf("schema\n");
  for (const auto& f : j["schema"]["fields"]) {
    std::printf("  %-24s %-14s rank %u  seq_dim %d", f["name"].get<std::string>().c_str(),
                f["dtype"].get<std::string>().c_str(), f["rank"].get<unsigned>(), f["seq_dim"].get<int>());
    const uint64_t raw = f["raw_bytes"].get<uint64_t>();
    if (f["stored_bytes"].is_null()) {
      std::printf("  %-11s %s raw (samples compressed whole)\n", f["codec"].get<std::string>().c_str(),
                  FormatBytes(raw).c_str());
    } else {
      const uint64_t stored = f["stored_bytes"].get<uint64_t>();
      std::printf("  %-11s %s stored of %s raw (%.2fx)\n", f["codec"].get<std::string>().c_str(),
                  FormatBytes(stored).c_str(), FormatBytes(raw).c_str(),
                  stored ? static_cast<double>(raw) / static_cast<double>(stored) : 1.0);
    }
  }
  const auto& lf = j["schema"]["length_field"];
  std::printf("length field %s\n", lf.is_null() ? "(none)" : lf.get<std::string>().c_str());
  const auto& l = j["lengths"];
  if (!lf.is_null()) {
    std::printf("lengths      min %llu  max %llu  mean %.1f  total %llu tokens\n",
                l["min"].get<unsigned long long>(), l["max"].get<unsigned long long>(),
                l["mean"].get<double>(), l["total"].get<unsigned long long>());
    uint64_t peak = 1;
    for (const auto& b : l["histogram"]) peak = std::max(peak, b["count"].get<uint64_t>());
    for (const auto& b : l["histogram"]) {
      const uint64_t c = b["count"].get<uint64_t>();
      std::printf("  [%8llu, %8llu) %8llu %s\n", b["lo"].get<unsigned long long>(),
                  b["hi"].get<unsigned long long>(), static_cast<unsigned long long>(c),
                  std::string(static_cast<size_t>(40 * c / peak), '#').c_str());
    }
  }
  for (const auto& s : j["shards"]) {
    std::printf("shard        %s  %s  %llu samples\n", s["file"].get<std::string>().c_str(),
                FormatBytes(s["size"].get<uint64_t>()).c_str(), s["samples"].get<unsigned long long>());
  }
  const auto& p = j["provenance"];
  std::printf("provenance   first %s, last %s, %llu hashed\n", p["first"].get<std::string>().c_str(),
              p["last"].get<std::string>().c_str(), p["hashed_sources"].get<unsigned long long>());
  for (const char* k : {"source_root", "created_by", "created_at"}) {
    if (p.contains(k) && p[k].is_string()) std::printf("  %-11s %s\n", k, p[k].get<std::string>().c_str());
  }
  if (j.contains("attributes") && !j["attributes"].empty()) {
    std::printf("attributes\n");
    for (const auto& [key, value] : j["attributes"].items()) {
      const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      std::printf("  %-24s %s\n", key.c_str(), text.c_str());
    }
  }
}

int RunInfo(const InfoArgs& a) {
  DatasetOptions opts;
  opts.verify_checksums = false;
  auto ds = Dataset::Open(a.dir, opts);
  if (!ds.ok()) return Fail("info", ds.status());
  auto j = Describe(**ds);
  if (!j.ok()) return Fail("info", j.status());
  if (a.json) {
    // Names, sources and provenance are raw bytes (FORMAT.md §1), not always UTF-8: invalid
    // sequences are replaced (U+FFFD) rather than failing the whole output.
    std::printf("%s\n", j->dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    PrintText(*j);
  }
  return kExitOk;
}

}  // namespace

Command AddInfoCommand(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* c = app.add_subcommand("info", "Describe a dataset: schema, counts, sizes, lengths, provenance");
  c->add_option("DIR", args->dir, "Dataset directory")->required();
  c->add_flag("--json", args->json, "Machine-readable output");
  return {c, [args] { return RunInfo(*args); }};
}

}  // namespace libshard::cli
