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
// row with a CLI alias is a flag (CommandLineSpellingOf, libshard/writer_config.h: its flags, the
// --no-X of a row that is on by default, its help), the writer configuration's rows spelled as
// `python -m libshard.capture` spells them. The values are kept as given, by row name, and set
// through the table when the command runs.
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

// CLI11's name for a row's flag: its flags ("-o,--output"; CommandLineSpellingOf, which
// python -m libshard.capture reads too), or a positional's metavar ("SRC"); "" when the row has
// neither (a row whose flag turns it off: CommandLineSpelling::negation).
std::string FlagNames(const OptionSpec<convert::PackOptions>& s) {
  std::string names;
  for (const std::string& f : CommandLineSpellingOf(s).flags)
    names += (names.empty() ? "" : ",") + f;
  if (!names.empty()) return names;
  for (std::string_view a : s.aliases)
    if (!a.empty() && std::all_of(a.begin(), a.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
      return std::string(a);
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
  for (const std::string& aside : s.set_aside)
    std::printf("  set aside %s: what OUT held of another identity (kept, not reused)\n",
                aside.c_str());
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
        st = CommandLineSpellingOf(s).negation.empty()
                 ? table.Set(o, flag, OptionValue::Bool(true))
                 : table.Set(o, s.name, OptionValue::Bool(false));
      }
    } else if (auto it = a.lists.find(s.name); it != a.lists.end()) {
      if (!it->second.empty()) st = table.Set(o, flag, OptionValue::TextList(it->second));
    } else if (auto it = a.values.find(s.name); it != a.values.end()) {
      const std::string& text = it->second;
      if (In(kCommaLists, s.name)) {
        st = table.Set(o, flag, OptionValue::TextList(convert::SplitList(text)));
      } else if (!text.empty()) {
        st = table.SetFromText(o, flag, text);  // "--threads 0": the row's automatic value
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
    const CommandLineSpelling cl = CommandLineSpellingOf(s);
    if (s.name == "attrs") {
      c->add_option(names, args->attrs, cl.help + ": KEY=VALUE (repeatable)")
          ->allow_extra_args(false)
          ->take_all();
    } else if (s.name == "progress") {
      c->add_option(names, args->progress,
                    "Report progress on stderr: auto (bar on a terminal, else lines), bar, lines "
                    "or none")
          ->capture_default_str();
    } else if (s.type == OptionType::kBool) {
      if (!cl.negation.empty()) {
        c->add_flag(cl.negation, args->switches[name], cl.help);
      } else if (!names.empty()) {
        c->add_flag(names, args->switches[name], cl.help);
      }
    } else if (names.empty()) {
      continue;  // not on the command line
    } else if (s.type == OptionType::kNames && !In(kCommaLists, s.name)) {
      c->add_option(names, args->lists[name], cl.help + " (repeatable)");
    } else {
      CLI::Option* opt = c->add_option(names, args->values[name],
                                       In(kCommaLists, s.name) ? cl.help + ": a,b,c" : cl.help);
      if (In(kRequired, s.name)) opt->required();
    }
  }
  c->add_option("--progress-interval", args->progress_interval,
                "Seconds between progress updates (default 0.2 for the bar, 10 for lines)");
  c->add_flag("-q,--quiet", args->quiet, "No progress and no summary");
  return {c, [args] { return RunPack(*args); }};
}

}  // namespace libshard::cli
