// The encoder of index version 1 (FORMAT.md §3.1-§3.6), frozen as it was when the library last
// wrote that version. Tests only: libshard reads version 1 (format/legacy/) but never writes it;
// the suites use this to build hostile version-1 inputs for the reader and version-1 copies of
// their datasets (tests/data/golden_v1* are the frozen files written by the library itself).
#pragma once

#include <string>
#include <vector>

#include "format/index_common.h"
#include "libshard/schema.h"

namespace libshard::testing {

// A complete version-1 index. Shard sample counts are recomputed from the records; the shard
// uids are recorded (flag kIndexFlagShardUids) when any shard has a non-zero uid.
std::string EncodeIndexV1(const Schema& schema, const std::vector<format::IndexShard>& shards,
                          const std::vector<format::IndexSample>& samples);

}  // namespace libshard::testing
