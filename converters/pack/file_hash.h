// xxh3-64 of a file's bytes: the provenance content hash (docs/FORMAT.md §3.4).
#pragma once

#include <cstdint>
#include <string>

#include "libshard/status.h"

namespace libshard::convert {

// Reads `path` sequentially in 4 MiB chunks, up to the size it has when opened. Errors name the
// file and the offset.
Result<uint64_t> HashFile(const std::string& path);

}  // namespace libshard::convert
