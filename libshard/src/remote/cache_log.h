// Warnings of the node-local cache: a damaged cached copy that a fresh download healed is not an
// error, but the user hears of it (a disk that damages files, or a network that damages
// transfers, is worth knowing of). One line each, "libshard: warning: ...", on stderr unless a
// test installed a sink.
#pragma once

#include <functional>
#include <string>

namespace libshard::remote {

void CacheWarning(const std::string& message);

using CacheWarningSink = std::function<void(const std::string& line)>;
// Installs `sink` (empty: stderr again) and returns the previous one. Thread-safe.
CacheWarningSink SetCacheWarningSink(CacheWarningSink sink);

}  // namespace libshard::remote
