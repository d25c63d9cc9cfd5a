// `libshard info DIR [--json] [--batches SPEC] [--nodes N]`: schema, counts, sizes, length
// histogram, provenance summary; with --batches, what the loader's batching makes of the dataset
// (padding, largest batch), planned from the index lengths alone; with --nodes, what each node
// reads (and caches) under the node-local order (docs/ORDER.md §5).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cache_options.h"
#include "cli/command.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard_support/text.h"
#include "libshard_support/units.h"
#include "pack/option_parsing.h"

namespace libshard::cli {
namespace {

struct InfoArgs {
  std::string dir;
  bool json = false;
  std::string batches;  // --batches SPEC
  CacheArgs cache;      // --cache, --cache-size
  uint32_t nodes = 0;   // --nodes N
  uint64_t seed = 0;    // --seed S (of --nodes)
  std::string block = "4MiB";  // --block-size (of --nodes)
};

// One row of --batches: a label (the Python Loader settings that give it) and the options.
struct BatchingRow {
  std::string label;
  LoaderOptions options;
};

// The keys --batches takes: the loader options that shape an epoch's batches, read through the
// loader's option table (LoaderOptionTable) with its spellings ("budget" for token_budget).
constexpr std::string_view kBatchesKeys[] = {
    "max_tokens", "batch_size", "token_budget", "bucket_window", "collate", "oversized",
    "world_size", "max_len",    "seed",         "epoch",         "shuffle", "order",
    "drop_last"};

// SPEC: comma-separated key=value with max_tokens or batch_size, and optionally token_budget
// (budget=sum|padded), bucket_window, collate, world_size, max_len, seed, epoch, shuffle (0|1),
// order, oversized, drop_last. Without a budget and a bucket_window the three settings users
// choose between are compared.
Result<std::vector<BatchingRow>> ParseBatchesSpec(std::string_view spec) {
  const OptionTable<LoaderOptions>& table = LoaderOptionTable();
  LoaderOptions base;
  bool budget_given = false;
  bool window_given = false;
  for (std::string_view rest = spec; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view item = TrimBlanks(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return Status::InvalidArgument("--batches: '" + std::string(item) +
                                     "' is not key=value (e.g. max_tokens=8192)");
    const std::string_view key = TrimBlanks(item.substr(0, eq));
    const std::string_view value = TrimBlanks(item.substr(eq + 1));
    const OptionSpec<LoaderOptions>* row = table.Find(key);
    const bool planning =
        row != nullptr && std::find(std::begin(kBatchesKeys), std::end(kBatchesKeys),
                                    row->name) != std::end(kBatchesKeys);
    if (!planning) {
      std::string keys;
      for (std::string_view k : kBatchesKeys) keys += (keys.empty() ? "" : ", ") + std::string(k);
      return Status::InvalidArgument("--batches: unknown key '" + std::string(key) + "'; use " +
                                     keys + " (budget for token_budget)");
    }
    LIBSHARD_RETURN_IF_ERROR(table.SetFromText(base, key, value).WithContext("--batches"));
    budget_given |= row->name == "token_budget";
    window_given |= row->name == "bucket_window";
  }
  if (base.max_tokens == 0 && base.batch_size <= 1)
    return Status::InvalidArgument("--batches needs max_tokens=N or batch_size=N (> 1)");
  if (budget_given || window_given) return std::vector<BatchingRow>{{"as given", base}};
  std::vector<BatchingRow> rows;
  if (base.max_tokens > 0) {
    BatchingRow sum{"collate=\"pack\" (summed budget)", base};
    sum.options.token_budget = TokenBudget::kSum;
    sum.options.bucket_window = 0;
    rows.push_back(sum);
  }
  BatchingRow padded{"collate=\"pad\", bucket_window=None", base};
  padded.options.token_budget = TokenBudget::kPadded;
  padded.options.bucket_window = 0;
  rows.push_back(padded);
  BatchingRow bucketed{"collate=\"pad\" (bucket_window 4096)", base};
  bucketed.options.token_budget = TokenBudget::kPadded;
  bucketed.options.bucket_window = kAutoBucketWindowSize;
  rows.push_back(bucketed);
  return rows;
}

Result<nlohmann::json> DescribeBatches(const Dataset& ds, std::string_view spec) {
  LIBSHARD_ASSIGN_OR_RETURN(const std::vector<BatchingRow> rows, ParseBatchesSpec(spec));
  auto out = nlohmann::json::array();
  for (const BatchingRow& row : rows) {
    Result<BatchingSummary> s = SummarizeBatching(ds, row.options);
    if (!s.ok()) return s.status().WithContext("--batches");
    // What the loader decides for the row's "auto" settings, as it reports them.
    LIBSHARD_ASSIGN_OR_RETURN(const LoaderOptions o, ResolveLoaderOptions(row.options));
    out.push_back({{"label", row.label},
                   {"max_tokens", o.max_tokens},
                   {"batch_size", o.batch_size},
                   {"budget", o.token_budget == TokenBudget::kPadded ? "padded" : "sum"},
                   {"bucket_window", o.bucket_window},
                   {"world_size", o.world_size},
                   {"max_len", o.max_len},
                   {"batches", s->batches},
                   {"steps_per_rank", s->steps_per_rank},
                   {"samples", s->samples},
                   {"tokens", s->tokens},
                   {"positions", s->positions},
                   {"padding_share", s->padding_share},
                   {"largest_positions", s->largest_positions},
                   {"largest_tokens", s->largest_tokens},
                   {"oversized_batches", s->oversized_batches}});
  }
  return out;
}

void PrintBatches(const nlohmann::json& rows) {
  if (rows.empty()) return;
  const auto& first = rows[0];
  std::printf("batches      %s, world_size %llu%s, epoch planned from the index lengths\n",
              first["max_tokens"].get<uint64_t>() > 0
                  ? ("max_tokens " + std::to_string(first["max_tokens"].get<uint64_t>())).c_str()
                  : ("batch_size " + std::to_string(first["batch_size"].get<uint64_t>())).c_str(),
              first["world_size"].get<unsigned long long>(),
              first["max_len"].get<uint64_t>() > 0
                  ? (", max_len " + std::to_string(first["max_len"].get<uint64_t>())).c_str()
                  : "");
  std::printf("  %-38s %9s %8s %9s %8s %14s %9s\n", "setting", "batches", "steps", "samples/b",
              "padding", "largest batch", "oversized");
  for (const auto& r : rows) {
    const uint64_t batches = r["batches"].get<uint64_t>();
    const bool padded = r["budget"].get<std::string>() == "padded";
    const bool tokens = r["max_tokens"].get<uint64_t>() > 0;
    const std::string label =
        r["label"].get<std::string>() != "as given" ? r["label"].get<std::string>()
        : tokens ? std::string("budget ") + r["budget"].get<std::string>() + ", bucket_window " +
                       std::to_string(r["bucket_window"].get<uint64_t>())
                 : "bucket_window " + std::to_string(r["bucket_window"].get<uint64_t>());
    // The largest batch as its budget counts it: packed tokens, or padded positions.
    const uint64_t largest = tokens && !padded ? r["largest_tokens"].get<uint64_t>()
                                               : r["largest_positions"].get<uint64_t>();
    std::printf("  %-38s %9llu %8llu %9.1f %7.1f%% %14llu %9llu\n", label.c_str(),
                static_cast<unsigned long long>(batches),
                r["steps_per_rank"].get<unsigned long long>(),
                batches ? static_cast<double>(r["samples"].get<uint64_t>()) / batches : 0.0,
                100.0 * r["padding_share"].get<double>(), static_cast<unsigned long long>(largest),
                r["oversized_batches"].get<unsigned long long>());
  }
  std::printf("  (padding: positions a padded batch wastes; largest batch: its tokens under a "
              "summed budget, samples x longest length under a padded one)\n");
}

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
  j["index_version"] = ds.index_version();
  j["field_checksums"] = ds.has_field_checksums();
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
    LIBSHARD_ASSIGN_OR_RETURN(SourceFileInfo p, ds.source(i));
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
  // What made the dataset (identity.h): its attributes and schema, hashed (FORMAT.md §2.2).
  const DatasetIdentity id = ds.identity();
  j["identity"] = {{"xxh3", id.digest_text()}, {"recorded", id.recorded}};
  return j;
}

void PrintText(const nlohmann::json& j) {
  using convert::FormatBytes;
  std::printf("dataset      %s\n", j["path"].get<std::string>().c_str());
  std::printf("samples      %llu in %zu shards\n", j["samples"].get<unsigned long long>(), j["shards"].size());
  const unsigned index_version = j["index_version"].get<unsigned>();
  const bool field_sums = j.value("field_checksums", false);
  std::printf("index        version %u%s\n", index_version,
              index_version < 2 ? " (`libshard upgrade` rewrites it as version 4, which opens "
                                  "millions of samples at once and checks partial reads)"
              : !field_sums     ? " without field checksums (a verified read of some fields or "
                                  "a prefix reads whole samples; `libshard upgrade` adds them)"
                                : ", field checksums");
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
  if (j.contains("identity")) {
    const auto& id = j["identity"];
    std::printf("identity     xxh3 %s%s\n", id["xxh3"].get<std::string>().c_str(),
                id["recorded"].get<bool>()
                    ? " (attributes and schema; recorded, writes checked against it)"
                    : " (attributes and schema; not recorded: written before identities, its "
                      "writes were not checked)");
  }
  if (j.contains("attributes") && !j["attributes"].empty()) {
    std::printf("attributes\n");
    for (const auto& [key, value] : j["attributes"].items()) {
      const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      std::printf("  %-24s %s\n", key.c_str(), text.c_str());
    }
  }
}

// --nodes: each node's share under the node-local order.
Result<nlohmann::json> DescribeNodes(const Dataset& ds, const InfoArgs& a) {
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t block, ParseByteSize(a.block));
  LoaderOptions options;
  options.order = Order::Shuffled(a.seed);
  LIBSHARD_ASSIGN_OR_RETURN(const std::vector<NodeShare> shares,
                            SummarizeNodeShares(ds, options, a.nodes, block));
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodeShare& n : shares)
    nodes.push_back({{"samples", n.samples},
                     {"stored_bytes", n.stored_bytes},
                     {"cached_bytes", n.cached_bytes}});
  return nlohmann::json{{"nodes", a.nodes}, {"seed", a.seed}, {"cache_block_bytes", block},
                        {"shares", std::move(nodes)}};
}

void PrintNodes(const nlohmann::json& n) {
  using convert::FormatBytes;
  std::printf("nodes        %llu, seed %llu: what each node reads every epoch with "
              "locality='node' (docs/ORDER.md §5)\n",
              n["nodes"].get<unsigned long long>(), n["seed"].get<unsigned long long>());
  std::printf("  %-6s %9s %12s %14s\n", "node", "samples", "stored",
              ("cached (" + FormatBytes(n["cache_block_bytes"].get<uint64_t>()) + " blocks)")
                  .c_str());
  uint64_t largest = 0;
  size_t k = 0;
  for (const auto& s : n["shares"]) {
    const uint64_t cached = s["cached_bytes"].get<uint64_t>();
    largest = std::max(largest, cached);
    std::printf("  %-6zu %9llu %12s %14s\n", k++, s["samples"].get<unsigned long long>(),
                FormatBytes(s["stored_bytes"].get<uint64_t>()).c_str(),
                FormatBytes(cached).c_str());
  }
  std::printf("  a node's cache_size of at least %s (plus the read-ahead) holds its share, so "
              "each epoch after the first reads it from the cache\n",
              FormatBytes(largest).c_str());
}

int RunInfo(const InfoArgs& a) {
  DatasetOptions opts;
  opts.verify_checksums = false;
  opts.caller = Caller::kCli;
  if (Status st = ApplyCacheOptions(a.cache, &opts); !st.ok()) return UsageError("info", st.message());
  auto ds = Dataset::Open(a.dir, opts);
  if (!ds.ok()) return Fail("info", ds.status());
  auto j = Describe(**ds);
  if (!j.ok()) return Fail("info", j.status());
  if (!a.batches.empty()) {
    Result<nlohmann::json> batches = DescribeBatches(**ds, a.batches);
    if (!batches.ok()) return Fail("info", batches.status());
    (*j)["batches"] = *std::move(batches);
  }
  if (a.nodes > 0) {
    Result<nlohmann::json> nodes = DescribeNodes(**ds, a);
    if (!nodes.ok()) return Fail("info", nodes.status().WithContext("--nodes"));
    (*j)["nodes"] = *std::move(nodes);
  }
  if (a.json) {
    // Names, sources and provenance are raw bytes (FORMAT.md §1), not always UTF-8: invalid
    // sequences are replaced (U+FFFD) rather than failing the whole output.
    std::printf("%s\n", j->dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    PrintText(*j);
    if (j->contains("batches")) PrintBatches((*j)["batches"]);
    if (j->contains("nodes")) PrintNodes((*j)["nodes"]);
  }
  return kExitOk;
}

}  // namespace

Command AddInfoCommand(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* c = app.add_subcommand("info", "Describe a dataset: schema, counts, sizes, lengths, provenance");
  c->add_option("DIR", args->dir,
                 "Dataset directory or object-store URL (s3://BUCKET/PREFIX, gs://BUCKET/PREFIX)")
      ->required();
  c->add_flag("--json", args->json, "Machine-readable output");
  c->add_option("--batches", args->batches,
                "Plan an epoch's batches from the index and report padding and the largest "
                "batch: max_tokens=N or batch_size=N, optionally budget=sum|padded, "
                "bucket_window=M, world_size=W, max_len=L, seed=S (without budget and "
                "bucket_window the usual settings are compared)")
      ->type_name("SPEC");
  AddCacheOptions(c, &args->cache);
  c->add_option("--nodes", args->nodes,
                "Report what each of N nodes reads every epoch with the node-local order "
                "(locality='node'): samples, stored bytes and the cache blocks it holds")
      ->type_name("N")
      ->check(CLI::Range(1u, 1u << 20));
  c->add_option("--seed", args->seed, "The loader's seed, for --nodes (default 0)");
  c->add_option("--block-size", args->block,
                "The cache's block size, for --nodes (default 4MiB, as the cache's)")
      ->type_name("BYTES");
  return {c, [args] { return RunInfo(*args); }};
}

}  // namespace libshard::cli
