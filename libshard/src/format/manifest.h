// manifest.json (FORMAT.md §2.2): encoding and strict parsing. Bytes only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/attributes.h"
#include "format/index_common.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::format {

inline constexpr char kManifestName[] = "manifest.json";

struct ManifestShard {
  std::string file;
  uint64_t size = 0;
  uint64_t samples = 0;
  bool operator==(const ManifestShard&) const = default;
};

struct Manifest {
  // The JSON's "version" (FORMAT.md §2.2): the version of the index it names, 1 to
  // kIndexVersion (a manifest has no version of its own).
  uint32_t index_version = kIndexVersion;
  Schema schema;
  std::string index_file = "index.lsi";
  uint64_t index_size = 0;
  uint64_t index_xxh3 = 0;
  std::vector<ManifestShard> shards;
  uint64_t total_samples = 0;
  uint64_t total_raw_bytes = 0;
  uint64_t total_stored_bytes = 0;
  std::string source_root;
  uint64_t sources = 0;
  std::string created_by;
  std::string created_at;
  Attributes attributes;  // provenance.attributes; omitted from the JSON when empty
  // Parsing: the manifest records provenance.identity (FORMAT.md §2.2) in the version this reader
  // knows, equal to the digest of `schema` and `attributes` (a different one is Corruption).
  // Encoding ignores it: EncodeManifest always records the identity of `schema` and `attributes`.
  bool identity_recorded = false;
};

// Pretty-printed JSON, with provenance.identity: the digest of the schema and the attributes
// (libshard/identity.h). Invalid UTF-8 in strings is replaced, never an error.
std::string EncodeManifest(const Manifest& manifest);
// Parses and checks the structure and types (not the agreement with the index). `file` names the
// manifest in messages. Unsupported for a "version" above kIndexVersion; Corruption for JSON nested
// deeper than kMaxJsonDepth (checked before parsing). Safe on any bytes (a fuzz target's entry point).
Result<Manifest> ParseManifest(std::string_view text, const std::string& file);

// The deepest nesting of arrays and objects any JSON libshard reads may have (a manifest needs 4).
inline constexpr uint32_t kMaxJsonDepth = 64;
// Corruption naming `file` when `text` nests arrays/objects deeper than kMaxJsonDepth; brackets
// inside strings do not count. Linear time, no allocation, no recursion.
[[nodiscard]] Status CheckJsonNesting(std::string_view text, const std::string& file);

// "2025-01-01T00:00:00Z" for now.
std::string UtcTimestamp();

}  // namespace libshard::format
