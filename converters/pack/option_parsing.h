// Parsers for the values of `libshard` command-line options. Shared by the CLI and the Python
// binding so both accept the same spellings. All return InvalidArgument with a message that
// quotes the value and shows an accepted form.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/option_table.h"
#include "libshard/status.h"
#include "libshard_support/units.h"
#include "libshard/writer.h"
#include "pack/pack.h"

namespace libshard::convert {

// Byte sizes ("4GiB", "512M", "64MB"): the library's one parser (libshard_support/units.h).
using ::libshard::ParseByteSize;

// "512.0 MiB", "4.00 GiB", "123 B": human-readable binary units.
std::string FormatBytes(uint64_t bytes);
// "1h02m03s", "4m05s", "12.3s".
std::string FormatDuration(double seconds);

// --compress and --store-dtype: the library's parsers (libshard/writer.h), shared with the
// Python Writer.
using ::libshard::CompressionSpec;
using ::libshard::ParseCompression;
using ::libshard::ParseStoreDType;

struct PartSpec {
  uint32_t index = 0;  // 0-based
  uint32_t count = 1;
};
// "KEY=VALUE" of `--attr` into `attributes`: VALUE is an integer when it is one in decimal
// ("4096", "-1"), else a string; an empty KEY or no '=' is InvalidArgument.
Status ParseAttribute(std::string_view text, Attributes* attributes);

// "I/N" with 0 <= I < N (0-based, like SLURM_ARRAY_TASK_ID or a torchrun rank), or "auto":
// PartFromEnvironment(). Errors name the setting as `option` (the caller's spelling: "part" for
// libshard.pack()'s keyword, "--part" for the CLI flag).
Result<PartSpec> ParsePart(std::string_view text, std::string_view option = "part");
// I/N from the variables a launcher sets, as libshard.Writer reads them: RANK/WORLD_SIZE
// (torchrun); a Slurm job array (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of
// SLURM_ARRAY_TASK_COUNT, times SLURM_NTASKS tasks each, SLURM_PROCID within one);
// SLURM_PROCID/SLURM_NTASKS. InvalidArgument when none is set or a value is not an integer.
Result<PartSpec> PartFromEnvironment(std::string_view option = "part");

// The contiguous slice [begin, end) of `total` items that part `index` of `count` converts:
// begin = floor(total*index/count). The parts tile [0, total) in order, so merging parts 0..N-1
// in order reproduces the single-process order; sizes differ by at most one.
struct PartRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
PartRange PartSlice(uint64_t total, uint32_t index, uint32_t count);

// Sample selections for `libshard unpack --samples`: a comma-separated list of "N" (one sample),
// "A:B" (half-open, like Python), "A:" (to the end), ":B", "A-B" (inclusive). Indices must be
// < `size`; the result is in the order given, duplicates removed keeping the first occurrence.
Result<std::vector<uint64_t>> ParseSampleRange(std::string_view text, uint64_t size);

// The pack option `on_error` / `--on-error`: "raise" (the canonical name, shared with the Loader
// and parsed by libshard::ParseOnError) or "skip"; "fail" is accepted as an alias of "raise" for
// existing scripts. Anything else is InvalidArgument listing the accepted names.
Result<OnError> ParsePackOnError(std::string_view text);

// The pack option table (libshard/option_table.h): one row per setting of PackOptions, named as
// libshard.pack()'s keywords, with the `libshard pack` flags as aliases. The Python bindings read
// their dict through it, `_core.pyi` is generated from it; `attrs` and `progress` are converted
// by each front end.
const OptionTable<PackOptions>& PackOptionTable();
// A setting as messages name it: "'append'" (kApi) or "--append" (kCli; a positional: "SRC").
std::string PackOptionName(std::string_view name, OptionSpelling spelling);

// "a,b,,c" -> {"a","b","c"} (empty items dropped, surrounding spaces trimmed).
std::vector<std::string> SplitList(std::string_view text, char sep = ',');

}  // namespace libshard::convert
