// Checks of whole objects before they enter the node-local cache, and when a cached copy is
// suspected (docs/CACHE.md §7): the bytes checked against the dataset's own references (the
// manifest's sizes and index checksum, the index's checksums). Bytes only: no system calls.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "libshard/status.h"

namespace libshard::remote {

// The index file whole (FORMAT.md §3): version 1 parsed and checked whole (§3.6, §3.7); versions
// 2 and 3 their head, lengths and every block (§3.8); its size `expected_size` and its checksum
// `expected_xxh3` as manifest.json records them. Corruption naming `where` otherwise.
Status CheckIndexBytes(std::span<const std::byte> bytes, uint64_t expected_size,
                       uint64_t expected_xxh3, const std::string& where);

// A message about a cached copy, without the advice meant for a local dataset ("re-run libshard
// pack"): the bucket's copy may well be sound.
std::string WithoutLocalAdvice(std::string message);

}  // namespace libshard::remote
