// ParseByteSize (see libshard_support/units.h).
#include "libshard_support/units.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "libshard_support/text.h"

namespace libshard {

Result<uint64_t> ParseByteSize(std::string_view text) {
  const std::string t = AsciiLower(TrimBlanks(text));
  const auto bad = [&] {
    return Status::InvalidArgument("invalid size '" + std::string(text) +
                                   "': use bytes or a unit, e.g. 4096, 512M, 4GiB, 1.5G, 100MB");
  };
  size_t num_end = 0;
  while (num_end < t.size() && ((t[num_end] >= '0' && t[num_end] <= '9') || t[num_end] == '.'))
    ++num_end;
  if (num_end == 0) return bad();
  const std::string num = t.substr(0, num_end);
  std::string unit = t.substr(num_end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double mult = 0;
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1.0},           {"b", 1.0},
      {"k", 0x1p10},       {"kib", 0x1p10},    {"ki", 0x1p10},   {"kb", 1e3},
      {"m", 0x1p20},       {"mib", 0x1p20},    {"mi", 0x1p20},   {"mb", 1e6},
      {"g", 0x1p30},       {"gib", 0x1p30},    {"gi", 0x1p30},   {"gb", 1e9},
      {"t", 0x1p40},       {"tib", 0x1p40},    {"ti", 0x1p40},   {"tb", 1e12},
  };
  for (const auto& [name, m] : kUnits)
    if (unit == name) mult = m;
  if (mult == 0) return bad();
  uint64_t value = 0;
  if (num.find('.') == std::string::npos) {
    uint64_t n = 0;
    const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), n);
    if (ec != std::errc() || ptr != num.data() + num.size()) return bad();
    const auto m = static_cast<uint64_t>(mult);
    if (n != 0 && m > std::numeric_limits<uint64_t>::max() / n) return bad();
    value = n * m;
  } else {
    char* end = nullptr;
    const double d = std::strtod(num.c_str(), &end);
    if (end != num.c_str() + num.size() || !std::isfinite(d)) return bad();
    const double v = std::floor(d * mult);
    if (!(v < 0x1p64)) return bad();
    value = static_cast<uint64_t>(v);
  }
  if (value == 0) {
    return Status::InvalidArgument("invalid size '" + std::string(text) +
                                   "': must be at least 1 byte");
  }
  return value;
}

}  // namespace libshard
