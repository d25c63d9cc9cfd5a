// Byte sizes as users write them: one parser for the CLI flags, the Python options and the
// environment, so every surface accepts the same spellings with the same meaning.
#pragma once

#include <cstdint>
#include <string_view>

#include "libshard/status.h"

namespace libshard {

// "4096", "512K", "512M", "4G", "4GiB", "4Gi", "1.5T", "64MB", "2gb": K/M/G/T, Ki/Mi/Gi/Ti and
// KiB/MiB/GiB/TiB are powers of 1024; KB/MB/GB/TB are powers of 1000; a bare number or "B" is
// bytes. Case-insensitive, spaces and tabs around the number and before the unit are allowed, a
// fraction is rounded down to whole bytes. The result must be >= 1 and fit in 64 bits; anything
// else is InvalidArgument quoting `text` and showing accepted forms.
Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace libshard
