// The schema of a dataset: its named fields, each with a dtype and a rank. Every sample has every
// field; shapes are stored per sample (docs/FORMAT.md §3.3), so sequence lengths may vary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/dtype.h"
#include "libshard/status.h"

namespace libshard {

struct Field {
  std::string name;    // UTF-8, 1..kMaxNameBytes bytes; nested sources are flattened ("hs.0")
  DType dtype = DType::kUInt8;
  uint32_t rank = 0;   // 0 for a scalar tensor; at most kMaxRank
  // The dimension that holds the sequence (token) axis, or -1. Used for the sample's length
  // (when this field is the schema's length field) and for Loader `max_len` truncation.
  int32_t seq_dim = -1;

  bool operator==(const Field&) const = default;
};

struct Schema {
  std::vector<Field> fields;
  // Index into `fields` of the field whose shape[seq_dim] is the sample's length (the token
  // count used by token-budget batching), or -1 when samples have no length.
  int32_t length_field = -1;

  // Index of the field named `name`, or nullopt.
  std::optional<size_t> Find(std::string_view name) const;
  // Checks names (non-empty, unique, within limits), dtypes, ranks, seq_dim and length_field.
  Status Validate() const;
  // Sum of the fields' ranks: how many dims one sample stores in the index.
  uint64_t DimsPerSample() const;

  bool operator==(const Schema&) const = default;
};

// Limits every writer enforces and every reader checks before allocating (docs/FORMAT.md §5).
inline constexpr uint32_t kMaxFields = 4096;
inline constexpr uint32_t kMaxRank = 16;
inline constexpr uint32_t kMaxNameBytes = 1024;
inline constexpr uint64_t kMaxSamples = uint64_t{1} << 40;
inline constexpr uint32_t kMaxShards = 1u << 20;
inline constexpr uint64_t kMaxSampleBytes = uint64_t{1} << 40;  // 1 TiB per sample
inline constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 20;  // 1 MiB per sample
inline constexpr uint64_t kMaxSourcePathBytes = 4096;
inline constexpr uint64_t kSampleAlignment = 4096;  // every sample starts on this boundary
inline constexpr uint64_t kTensorAlignment = 64;    // every tensor within a sample

}  // namespace libshard
