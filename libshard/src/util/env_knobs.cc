// The table of the library's environment variables (env_knobs.h).
#include "util/env_knobs.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "libshard/option_rows.h"

namespace libshard {
namespace {

using option_rows::Member;
constexpr std::string_view kWhat = "environment variable";
using O = EnvKnobs;

// A word among `choices` (empty: unset, the default).
OptionSpec<O> Word(std::string_view name, std::string_view member,
                   option_rows::Ref<O, std::string> ref, std::vector<std::string_view> choices,
                   std::string_view doc) {
  OptionSpec<O> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kChoice;
  s.py_type = "str";
  s.default_value = "unset";
  s.choices = choices;
  s.doc = doc;
  s.set = [ref, choices, doc](O& o, const OptionValue& v, std::string_view spelled) -> Status {
    if (v.kind == OptionValue::Kind::kText &&
        std::find(choices.begin(), choices.end(), v.text) != choices.end()) {
      ref(o) = v.text;
      return Status::OK();
    }
    std::string list;
    for (std::string_view c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
    return option_table::Bad(
        kWhat, spelled,
        "= " + v.Describe() + " is not one of " + list + " (" + std::string(doc) + ")");
  };
  return s;
}

// An endpoint: http:// or https:// then the host (empty: unset, the default). Its rows are named
// *_ENDPOINT (EnvKnobsMarkdown shows them as URLs).
OptionSpec<O> Url(std::string_view name, std::string_view member,
                  option_rows::Ref<O, std::string> ref, std::string_view default_value,
                  std::string_view doc) {
  OptionSpec<O> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kState;
  s.py_type = "str";
  s.default_value = default_value;
  s.doc = doc;
  s.set = [ref, doc](O& o, const OptionValue& v, std::string_view spelled) -> Status {
    if (v.kind == OptionValue::Kind::kText) {
      const std::string_view t = v.text;
      const size_t host = t.rfind("http://", 0) == 0 ? 7 : t.rfind("https://", 0) == 0 ? 8 : 0;
      if (host > 0 && t.size() > host && t[host] != '/') {
        ref(o) = v.text;
        return Status::OK();
      }
    }
    return option_table::Bad(kWhat, spelled,
                             "= " + v.Describe() + " is not an endpoint: write http://HOST[:PORT] "
                             "or https://HOST[:PORT] (" + std::string(doc) + ")");
  };
  return s;
}

bool IsUrlRow(const OptionSpec<O>& s) {
  return s.type == OptionType::kState && s.name.size() > 9 &&
         s.name.substr(s.name.size() - 9) == "_ENDPOINT";
}

OptionTable<O> MakeTable() {
  using namespace option_rows;
  std::vector<OptionSpec<O>> t;
  // The node-local cache of s3:// datasets (docs/CACHE.md, docs/guide/object-storage.md).
  t.push_back(Text<O>(kWhat, "LIBSHARD_CACHE_DIR", "cache_dir", Member<&O::cache_dir>,
                      "$XDG_CACHE_HOME/libshard or ~/.cache/libshard",
                      "the cache directory when cache= is not given"));
  t.push_back(Bytes<O>(kWhat, "LIBSHARD_CACHE_BLOCK_SIZE", "cache_block_size",
                       Member<&O::cache_block_size>, "4MiB", 4096, uint64_t{1} << 30,
                       "the cache's block: one range GET each (a multiple of 4096)"));
  t.push_back(Bytes<O>(kWhat, "LIBSHARD_CACHE_MIN_FREE", "cache_min_free",
                       Member<&O::cache_min_free>, "5% of the file system, at most 10GiB", 0,
                       EnvKnobs::kUnset - 1,
                       "bytes the cache's file system keeps free (the node's downloads in "
                       "flight counted)"));
  t.push_back(Count<O, uint64_t>(kWhat, "LIBSHARD_CACHE_MEASURE_SECONDS", "cache_measure_seconds",
                                 Member<&O::cache_measure_seconds>, "60", 0, 86400, "",
                                 "seconds between two walks that measure the cache's usage "
                                 "(0: before each download)"));
  // The S3 client.
  t.push_back(Count<O, uint64_t>(kWhat, "LIBSHARD_S3_CONNECTIONS", "s3_connections",
                                 Member<&O::s3_connections>, "8", 1, 256, "",
                                 "fetcher threads (connections) per process and dataset"));
  t.push_back(Count<O, uint64_t>(kWhat, "LIBSHARD_S3_MAX_ATTEMPTS", "s3_max_attempts",
                                 Member<&O::s3_max_attempts>, "8", 1, 100, "",
                                 "tries of a request (5xx, 429, resets, short bodies, stalls)"));
  t.push_back(Count<O, uint64_t>(kWhat, "LIBSHARD_S3_STALL_SECONDS", "s3_stall_seconds",
                                 Member<&O::s3_stall_seconds>, "30", 1, 3600, "",
                                 "a transfer with no byte for this long is retried"));
  t.push_back(Count<O, uint64_t>(kWhat, "LIBSHARD_S3_TIMEOUT_SECONDS", "s3_timeout_seconds",
                                 Member<&O::s3_timeout_seconds>, "300", 1, 86400, "",
                                 "the longest one request may take"));
  t.push_back(Count<O, uint64_t>(kWhat, "LIBSHARD_S3_BACKOFF_MS", "s3_backoff_ms",
                                 Member<&O::s3_backoff_ms>, "100", 1, 60000, "",
                                 "the first wait before a retry (doubling, at most 5 s)"));
  t.push_back(Word("LIBSHARD_S3_ADDRESSING", "s3_addressing", Member<&O::s3_addressing>,
                   {"auto", "path", "virtual"},
                   "path-style or virtual-host URLs (auto: path for a custom endpoint)"));
  // gs://: Cloud Storage through its S3-interoperable XML API, over the same client (the bounds
  // above are its too; the HMAC key is GS_ACCESS_KEY_ID / GS_SECRET_ACCESS_KEY).
  t.push_back(Url("LIBSHARD_GS_ENDPOINT", "gs_endpoint", Member<&O::gs_endpoint>,
                  "https://storage.googleapis.com",
                  "the endpoint of gs:// requests (an emulator, a private endpoint)"));
  t.push_back(Word("LIBSHARD_GS_ADDRESSING", "gs_addressing", Member<&O::gs_addressing>,
                   {"auto", "path", "virtual"},
                   "gs:// path-style or virtual-host URLs (auto: path-style)"));
  // Writing to s3://.
  t.push_back(Bytes<O>(kWhat, "LIBSHARD_S3_PART_SIZE", "s3_part_size", Member<&O::s3_part_size>,
                       "16MiB", 4096, uint64_t{5} << 30,
                       "multipart upload part size (S3 needs 5MiB or more)"));
  t.push_back(Count<O, uint64_t>(kWhat, "LIBSHARD_S3_UPLOAD_THREADS", "s3_upload_threads",
                                 Member<&O::s3_upload_threads>, "8", 1, 64, "",
                                 "parts uploaded at once"));
  t.push_back(Bool<O>(kWhat, "LIBSHARD_S3_CONTENT_MD5", "s3_content_md5",
                      Member<&O::s3_content_md5>, "1",
                      "send each part's Content-MD5 (0 saves the MD5's CPU)"));
  t.push_back(Text<O>(kWhat, "LIBSHARD_S3_STAGING", "s3_staging", Member<&O::s3_staging>,
                      "CACHE_ROOT/staging",
                      "the local staging directory of s3:// and gs:// writes"));
  // Reading.
  t.push_back(Word("LIBSHARD_ENGINE", "engine", Member<&O::engine>,
                   {"auto", "uring", "io_uring", "pread"},
                   "the loader's I/O engine when engine='auto'"));
  t.push_back(Word("LIBSHARD_IO_MODE", "io_mode", Member<&O::io_mode>,
                   {"auto", "direct", "buffered"},
                   "O_DIRECT or buffered reads when io_mode='auto'"));
  t.push_back(Word("LIBSHARD_IO_REFUSE_DIRECT", "io_refuse_direct", Member<&O::io_refuse_direct>,
                   {"open", "read"}, "behave as a file system that refuses O_DIRECT (tests)"));
  t.push_back(Number<O>(kWhat, "LIBSHARD_STATS", "stats_seconds", Member<&O::stats_seconds>,
                        "unset", true, "print the loader's stats every this many seconds"));
  // Kernels.
  t.push_back(Word("LIBSHARD_PLANES_KERNEL", "planes_kernel", Member<&O::planes_kernel>,
                   {"auto", "sse2", "avx2"},
                   "the byte-plane codec's kernel (auto: the CPU's best)"));
  t.push_back(Word("LIBSHARD_XXH3", "xxh3", Member<&O::xxh3>,
                   {"baseline", "scalar", "sse2", "avx2", "avx512", "neon", "vsx"},
                   "the xxh3 build (when the CPU has it; else the fastest)"));
  return OptionTable<O>(kWhat, std::move(t));
}

}  // namespace

const OptionTable<EnvKnobs>& EnvKnobTable() {
  static const OptionTable<EnvKnobs> table = MakeTable();
  return table;
}

Result<EnvKnobs> ReadEnvKnobs() {
  EnvKnobs k;
  for (const OptionSpec<EnvKnobs>& s : EnvKnobTable().specs()) {
    const std::string name(s.name);
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') continue;
    LIBSHARD_RETURN_IF_ERROR(EnvKnobTable().SetFromText(k, s.name, v));
  }
  if (k.cache_block_size % 4096 != 0)
    return option_table::Bad(
        kWhat, "LIBSHARD_CACHE_BLOCK_SIZE",
        "= " + std::to_string(k.cache_block_size) + " is not a multiple of 4096");
  return k;
}

EnvKnobs EnvKnobsOrDefaults() {
  // Variable by variable: a bad one takes its default (the entry points refused it already,
  // storage::OpenStorage), the others keep their values.
  EnvKnobs k;
  for (const OptionSpec<EnvKnobs>& s : EnvKnobTable().specs()) {
    const std::string name(s.name);
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') continue;
    EnvKnobs one = k;
    if (EnvKnobTable().SetFromText(one, s.name, v).ok()) k = std::move(one);
  }
  if (k.cache_block_size % 4096 != 0) k.cache_block_size = EnvKnobs{}.cache_block_size;
  return k;
}

std::string EnvKnobsMarkdown() {
  std::string out =
      "| variable | type | default | accepted | what it sets |\n|---|---|---|---|---|\n";
  for (const OptionSpec<EnvKnobs>& s : EnvKnobTable().specs()) {
    std::string type, accepted;
    switch (s.type) {
      case OptionType::kCount:
        type = "count";
        accepted = std::to_string(s.min) + ".." + std::to_string(s.max);
        break;
      case OptionType::kBytes:
        type = "bytes";
        accepted = std::to_string(s.min) + ".." +
                   (s.max == EnvKnobs::kUnset - 1 ? std::string("any") : std::to_string(s.max)) +
                   ", or a size (`10GiB`)";
        break;
      case OptionType::kBool:
        type = "boolean";
        accepted = "`0`, `1`";
        break;
      case OptionType::kNumber:
        type = "seconds";
        accepted = ">= 0";
        break;
      case OptionType::kChoice:
        type = "word";
        for (std::string_view c : s.choices)
          accepted += (accepted.empty() ? "`" : ", `") + std::string(c) + "`";
        break;
      default:
        if (IsUrlRow(s)) {
          type = "url";
          accepted = "`http://HOST[:PORT]`, `https://HOST[:PORT]`";
          break;
        }
        type = "path";
        accepted = "a directory";
    }
    out += "| `" + std::string(s.name) + "` | " + type + " | " + std::string(s.default_value) +
           " | " + accepted + " | " + std::string(s.doc) + " |\n";
  }
  return out;
}

}  // namespace libshard
