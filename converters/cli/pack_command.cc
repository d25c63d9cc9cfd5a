// `libshard pack SRC -o OUT`: see converters/pack/pack.h.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "cli/progress_printer.h"
#include "pack/option_parsing.h"
#include "pack/pack.h"

namespace libshard::cli {
namespace {

// The flags generated from the pack option table (PackOptionTable, pack/option_parsing.h): every
// row with a CLI alias is a flag named by its aliases, its help the row's doc and default. The
// values are kept as given, by row name, and set through the table when the command runs.
struct PackArgs {
  std::map<std::string, std::string, std::less<>> values;               // a value (text)
  std::map<std::string, std::vector<std::string>, std::less<>> lists;   // repeatable (globs)
  std::map<std::string, bool, std::less<>> switches;                    // kBool rows
  // The rows converted by the front end itself (no setter in the table).
  std::vector<std::string> attrs;
  std::string progress = "auto";
  // Not pack options: how this command reports.
  double progress_interval = -1;
  bool quiet = false;
};

// Rows whose default is true and that the CLI turns off with a flag of its own.
constexpr std::pair<std::string_view, std::string_view> kNegations[] = {
    {"hash_sources", "--no-hash"}, {"verify_crc", "--no-crc"}, {"fsync", "--no-fsync"}};
// kNames rows given on the CLI as one comma-separated word ("a,b,c") instead of repeated.
constexpr std::string_view kCommaLists[] = {"fields"};
// Rows the CLI requires.
constexpr std::string_view kRequired[] = {"out"};

template <size_t N>
bool In(const std::string_view (&set)[N], std::string_view name) {
  for (std::string_view s : set)
    if (s == name) return true;
  return false;
}

std::string_view NegationOf(std::string_view name) {
  for (const auto& [row, flag] : kNegations)
    if (row == name) return flag;
  return {};
}

// The row's doc without its "(CLI: ...)" note, which is for the other front ends.
std::string Doc(std::string_view doc) { return std::string(doc.substr(0, doc.find(" (CLI:"))); }

// The help of a row's flag: its doc, then its choices and its default ("4GiB"; for an automatic
// setting what automatic means, and that 0 asks for it).
std::string Help(const OptionSpec<convert::PackOptions>& s) {
  std::string help = Doc(s.doc);
  std::string_view d = s.default_value;
  if (d.size() >= 2 && d.front() == '\'' && d.back() == '\'') d = d.substr(1, d.size() - 2);
  std::string notes;
  if (s.type == OptionType::kChoice && !s.choices.empty()) {
    notes = "one of:";
    for (std::string_view c : s.choices) notes += " " + std::string(c);
  }
  const auto note = [&notes](std::string text) {
    notes += (notes.empty() ? "" : "; ") + std::move(text);
  };
  if (!s.unset.empty()) {
    const bool zero = s.type == OptionType::kCount || s.type == OptionType::kBytes;
    note(std::string(zero ? "default or 0: " : "default: ") + std::string(s.unset));
  } else if (!d.empty() && d != "None" && d != "False" && d != "True" &&
             s.type != OptionType::kBool) {
    note("default: " + std::string(d));
  }
  if (!notes.empty()) help += " (" + notes + ")";
  return help;
}

// CLI11's name for a row's flag: its aliases that are flags ("-o,--output") or a positional's
// metavar ("SRC"); "" when the row has neither (other aliases are keywords, "window_bytes").
std::string FlagNames(const OptionSpec<convert::PackOptions>& s) {
  std::string names;
  for (std::string_view a : s.aliases) {
    const bool flag = a.starts_with("-");
    const bool metavar = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return c >= 'A' && c <= 'Z';
    });
    if (!flag && !metavar) continue;
    if (!names.empty()) names += ",";
    names += a;
  }
  return names;
}

void PrintSummary(const convert::PackSummary& s) {
  using convert::FormatBytes;
  std::printf("packed %llu samples into %s", static_cast<unsigned long long>(s.samples_added),
              s.output.c_str());
  if (s.already_present) {
    std::printf(" (%llu already there)", static_cast<unsigned long long>(s.already_present));
  }
  std::printf("\n");
  if (!s.skipped.empty()) {
    std::printf("  skipped  %zu sources, listed with reasons in %s\n", s.skipped.size(),
                s.skipped_report.c_str());
  }
  const double ratio = s.bytes_in ? static_cast<double>(s.bytes_out) / static_cast<double>(s.bytes_in) : 0;
  const bool cache = s.source_format != convert::SourceFormat::kFiles &&
                     s.source_format != convert::SourceFormat::kAuto;
  std::printf("  in       %s from %llu %s\n", FormatBytes(s.bytes_in).c_str(),
              static_cast<unsigned long long>(s.samples_added),
              cache ? ("samples of a " + std::string(convert::SourceFormatName(s.source_format)) +
                       " cache").c_str()
                    : "sources");
  std::printf("  out      %s (payload %s), ratio out/in %.3f\n", FormatBytes(s.bytes_out).c_str(),
              FormatBytes(s.raw_bytes).c_str(), ratio);
  std::printf("  dataset  %llu samples in %llu shards, %s\n",
              static_cast<unsigned long long>(s.dataset.samples),
              static_cast<unsigned long long>(s.dataset.shards),
              FormatBytes(s.dataset.stored_bytes).c_str());
  std::printf("  time     %s (%.2f GB/s)  peak RSS %s\n", convert::FormatDuration(s.seconds).c_str(),
              s.seconds > 0 ? static_cast<double>(s.bytes_in) / s.seconds / 1e9 : 0.0,
              FormatBytes(s.peak_rss_bytes).c_str());
  if (!s.omitted_attributes.empty()) {
    std::string keys;
    for (const std::string& k : s.omitted_attributes) keys += (keys.empty() ? "" : ", ") + k;
    std::printf("  note     the cache manifest's %s %s too large for a dataset attribute and not "
                "recorded; keep the cache's manifest beside the dataset\n",
                keys.c_str(), s.omitted_attributes.size() == 1 ? "is" : "are");
  }
}

int RunPack(const PackArgs& a) {
  constexpr std::string_view kCmd = "pack";
  convert::PackOptions o;
  o.spelling = convert::OptionSpelling::kCli;
  // Every value is read by the pack option table, the one that reads libshard.pack()'s keywords;
  // errors name the flag as given ("--part").
  const OptionTable<convert::PackOptions>& table = convert::PackOptionTable();
  for (const auto& s : table.specs()) {
    if (!s.set) continue;  // attrs, progress: below
    const std::string flag = convert::PackOptionName(s.name, convert::OptionSpelling::kCli);
    Status st;
    if (auto it = a.switches.find(s.name); it != a.switches.end()) {
      if (it->second) {
        st = NegationOf(s.name).empty() ? table.Set(o, flag, OptionValue::Bool(true))
                                        : table.Set(o, s.name, OptionValue::Bool(false));
      }
    } else if (auto it = a.lists.find(s.name); it != a.lists.end()) {
      if (!it->second.empty()) st = table.Set(o, flag, OptionValue::TextList(it->second));
    } else if (auto it = a.values.find(s.name); it != a.values.end()) {
      const std::string& text = it->second;
      if (In(kCommaLists, s.name)) {
        st = table.Set(o, flag, OptionValue::TextList(convert::SplitList(text)));
      } else if (!text.empty()) {
        // 0 asks for the automatic value of a count that has one ("--threads 0": one per CPU).
        const bool automatic = s.type == OptionType::kCount && !s.unset.empty() && text == "0";
        st = automatic ? table.Set(o, flag, OptionValue::None())
                       : table.SetFromText(o, flag, text);
      }
    }
    if (!st.ok()) return UsageError(kCmd, st.message());
  }
  for (const std::string& attr : a.attrs) {
    Status st = convert::ParseAttribute(attr, &o.attributes);
    if (!st.ok()) return UsageError(kCmd, st.message());
  }
  ProgressPrinter::Mode mode;
  if (a.quiet || a.progress == "none") {
    mode = ProgressPrinter::Mode::kNone;
  } else if (a.progress == "bar") {
    mode = ProgressPrinter::Mode::kBar;
  } else if (a.progress == "lines") {
    mode = ProgressPrinter::Mode::kLines;
  } else if (a.progress == "auto") {
    mode = ProgressPrinter::AutoMode(stderr);
  } else {
    return UsageError(kCmd, "--progress must be auto, bar, lines or none");
  }
  const double interval = a.progress_interval >= 0 ? a.progress_interval
                                                   : (mode == ProgressPrinter::Mode::kBar ? 0.2 : 10.0);
  if (Status st = convert::ValidatePackOptions(o, convert::OptionSpelling::kCli); !st.ok())
    return UsageError(kCmd, st.message());

  ProgressPrinter printer(stderr, mode, interval);
  o.progress = [&printer](const convert::PackProgress& p) { printer.Update(p); };
  auto summary = convert::Pack(o);
  printer.EndLine();
  if (!summary.ok()) return Fail(kCmd, summary.status());
  if (summary->nothing_to_resume) {
    if (!a.quiet)
      std::printf("nothing to resume: %s is complete with all %llu sources (%llu samples)\n",
                  summary->output.c_str(),
                  static_cast<unsigned long long>(summary->already_present),
                  static_cast<unsigned long long>(summary->dataset.samples));
    return kExitOk;
  }
  if (!a.quiet) PrintSummary(*summary);
  return kExitOk;
}

}  // namespace

Command AddPackCommand(CLI::App& app) {
  auto args = std::make_shared<PackArgs>();
  CLI::App* c = app.add_subcommand(
      "pack",
      "Convert a directory tree (or list) of per-sample .pt / .pt.gz / .ckpt / .safetensors files "
      "into a dataset. Sample order: natural-sorted relative paths (data_2 before data_10).");
  for (const auto& s : convert::PackOptionTable().specs()) {
    const std::string name(s.name);
    const std::string names = FlagNames(s);
    if (s.name == "attrs") {
      c->add_option(names, args->attrs, Help(s) + ": KEY=VALUE (repeatable)")
          ->allow_extra_args(false)
          ->take_all();
    } else if (s.name == "progress") {
      c->add_option(names, args->progress,
                    "Report progress on stderr: auto (bar on a terminal, else lines), bar, lines "
                    "or none")
          ->capture_default_str();
    } else if (s.type == OptionType::kBool) {
      const std::string_view negation = NegationOf(s.name);
      if (!names.empty()) {
        c->add_flag(names, args->switches[name], Help(s));
      } else if (!negation.empty()) {
        c->add_flag(std::string(negation), args->switches[name], "Do not " + Doc(s.doc));
      }
    } else if (names.empty()) {
      continue;  // not on the command line
    } else if (s.type == OptionType::kNames && !In(kCommaLists, s.name)) {
      c->add_option(names, args->lists[name], Help(s) + " (repeatable)");
    } else {
      CLI::Option* opt = c->add_option(names, args->values[name],
                                       In(kCommaLists, s.name) ? Help(s) + ": a,b,c" : Help(s));
      if (In(kRequired, s.name)) opt->required();
    }
  }
  c->add_option("--progress-interval", args->progress_interval,
                "Seconds between progress updates (default 0.2 for the bar, 10 for lines)");
  c->add_flag("-q,--quiet", args->quiet, "No progress and no summary");
  return {c, [args] { return RunPack(*args); }};
}

}  // namespace libshard::cli
