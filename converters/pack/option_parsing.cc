#include "pack/option_parsing.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <unordered_set>

#include "libshard/loader.h"
#include "libshard_support/text.h"
#include "libshard/world.h"

namespace libshard::convert {
namespace {


Result<uint64_t> ParseU64(std::string_view s, std::string_view what) {
  uint64_t v = 0;
  s = TrimBlanks(s);
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
    return Status::InvalidArgument("invalid " + std::string(what) + " '" + std::string(s) +
                                   "': expected a non-negative integer");
  }
  return v;
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : (v < 100 ? "%.1f %s" : "%.0f %s"), v,
                kUnits[u]);
  return buf;
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  char buf[48];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  } else {
    const auto s = static_cast<uint64_t>(seconds + 0.5);
    if (s < 3600) {
      std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                    static_cast<unsigned long long>(s % 60));
    } else {
      std::snprintf(buf, sizeof buf, "%lluh%02llum%02llus",
                    static_cast<unsigned long long>(s / 3600),
                    static_cast<unsigned long long>(s / 60 % 60),
                    static_cast<unsigned long long>(s % 60));
    }
  }
  return buf;
}

Status ParseAttribute(std::string_view text, Attributes* attributes) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return Status::InvalidArgument("invalid --attr '" + std::string(text) +
                                   "': use KEY=VALUE, e.g. --attr target_model=meta-llama/"
                                   "Llama-3.1-8B-Instruct --attr hidden_size=4096");
  const std::string key(text.substr(0, eq));
  const std::string_view value = text.substr(eq + 1);
  int64_t n = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (!value.empty() && ec == std::errc() && ptr == end && (value[0] != '0' || value.size() == 1))
    (*attributes)[key] = n;
  else
    (*attributes)[key] = std::string(value);
  return ValidateAttributes(*attributes).WithContext("--attr");
}

namespace {

// An option and its value as the caller writes them: "--part auto" (a CLI flag) or
// "part='auto'" (a keyword).
std::string Spelled(std::string_view option, std::string_view value) {
  if (option.starts_with("-")) return std::string(option) + " " + std::string(value);
  return std::string(option) + "='" + std::string(value) + "'";
}

}  // namespace

// "auto": the library's rank resolver (libshard/world.h) over the process's environment;
// "auto" with no launcher variables set is a mistake to name, not part 0 of 1.
Result<PartSpec> PartFromEnvironment(std::string_view option) {
  Result<World> world = ResolveWorld(WorldRequest{std::nullopt, std::nullopt, ""},
                                     ProcessEnvironment());
  if (!world.ok()) return world.status().WithContext(Spelled(option, "auto"));
  if (world->source == "default")
    return Status::InvalidArgument(
        Spelled(option, "auto") + ": none of RANK/WORLD_SIZE (torchrun), SLURM_ARRAY_TASK_ID/"
        "SLURM_ARRAY_TASK_COUNT or SLURM_PROCID/SLURM_NTASKS is set; give " +
        Spelled(option, "I/N"));
  return PartSpec{world->rank, world->world_size};
}

Result<PartSpec> ParsePart(std::string_view text, std::string_view option) {
  if (text == "auto") return PartFromEnvironment(option);
  const auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("invalid " + Spelled(option, text) + ": " + std::string(why) +
                                   "; use I/N with 0 <= I < N, e.g. " + Spelled(option, "0/4") +
                                   " .. " + Spelled(option, "3/4"));
  };
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return bad("missing '/'");
  auto i = ParseU64(text.substr(0, slash), "part index");
  auto n = ParseU64(text.substr(slash + 1), "part count");
  if (!i.ok() || !n.ok()) return bad("not two integers");
  if (*n == 0 || *n > std::numeric_limits<uint32_t>::max()) return bad("N must be in 1..2^32-1");
  if (*i >= *n) return bad("I must be smaller than N (parts are numbered from 0)");
  return PartSpec{static_cast<uint32_t>(*i), static_cast<uint32_t>(*n)};
}

PartRange PartSlice(uint64_t total, uint32_t index, uint32_t count) {
  if (count == 0) return {0, total};
  const auto at = [&](uint64_t k) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(total) * k / count);
  };
  return {at(index), at(uint64_t{index} + 1)};
}

Result<std::vector<uint64_t>> ParseSampleRange(std::string_view text, uint64_t size) {
  std::vector<uint64_t> out;
  std::unordered_set<uint64_t> seen;
  const auto bad = [&](const std::string& item, std::string_view why) {
    return Status::InvalidArgument("invalid --samples item '" + item + "': " + std::string(why) +
                                   "; use N, A:B (half-open), A-B (inclusive), A:, :B, "
                                   "comma-separated; the dataset has " + std::to_string(size) +
                                   " samples");
  };
  const auto items = SplitList(text);
  if (items.empty()) return bad(std::string(text), "empty selection");
  for (const std::string& item : items) {
    uint64_t begin = 0, end = 0;
    const size_t colon = item.find(':');
    const size_t dash = item.find('-');
    if (colon != std::string::npos) {
      const std::string a = item.substr(0, colon), b = item.substr(colon + 1);
      if (!a.empty()) {
        auto v = ParseU64(a, "sample");
        if (!v.ok()) return bad(item, "not an integer");
        begin = *v;
      }
      end = size;
      if (!b.empty()) {
        auto v = ParseU64(b, "sample");
        if (!v.ok()) return bad(item, "not an integer");
        end = *v;
      }
      if (end > size) return bad(item, "end past the last sample");
    } else if (dash != std::string::npos) {
      auto a = ParseU64(item.substr(0, dash), "sample");
      auto b = ParseU64(item.substr(dash + 1), "sample");
      if (!a.ok() || !b.ok()) return bad(item, "not two integers");
      if (*b >= size) return bad(item, "index out of range");
      begin = *a;
      end = *b + 1;
    } else {
      auto v = ParseU64(item, "sample");
      if (!v.ok()) return bad(item, "not an integer");
      if (*v >= size) return bad(item, "index out of range");
      begin = *v;
      end = *v + 1;
    }
    if (begin > end) return bad(item, "start after end");
    for (uint64_t i = begin; i < end; ++i)
      if (seen.insert(i).second) out.push_back(i);
  }
  return out;
}

Result<OnError> ParsePackOnError(std::string_view text) {
  if (text == "fail") return OnError::kRaise;  // alias kept for scripts written before "raise"
  Result<libshard::OnError> parsed = libshard::ParseOnError(text);
  if (!parsed.ok()) {
    return Status::InvalidArgument("invalid on-error '" + std::string(text) +
                                   "': use raise (stop at the first bad source; 'fail' is an "
                                   "alias) or skip (leave it out and list it in skipped.txt)");
  }
  return *parsed;
}

std::vector<std::string> SplitList(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = TrimBlanks(text.substr(start, end - start));
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

}  // namespace libshard::convert
