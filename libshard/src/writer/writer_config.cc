// The writer configuration's rules (libshard/writer_config.h): its checks, its automatic values,
// how messages and command lines spell its settings. The rows themselves are in
// writer_option_table.cc.
#include "libshard/writer_config.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "libshard/parallel_writer.h"
#include "libshard/writer.h"

namespace libshard {
namespace {

// The table's bounds of each count/bytes row of `rows` (0 passes where the row has an `unset`
// meaning), named as `spell` says.
template <typename Part>
Status CheckBounds(const std::vector<OptionSpec<Part>>& rows, const Part& part,
                   const OptionSpeller& spell) {
  for (const OptionSpec<Part>& s : rows) {
    if (!s.get) continue;
    const uint64_t v = s.get(part);
    if (v == 0 && !s.unset.empty()) continue;
    if (v < s.min || v > s.max)
      return Status::InvalidArgument(spell(s.name) + " = " + std::to_string(v) +
                                     " is out of range; use " +
                                     option_table::Accepted(s.min, s.max, s.unset) + " (" +
                                     std::string(s.doc) + ")");
  }
  return Status::OK();
}

// The rows of each part, for their bounds (their error word is unused here).
const std::vector<OptionSpec<LayoutOptions>>& LayoutRows() {
  static const auto rows = LayoutOptionRows("Writer option");
  return rows;
}
const std::vector<OptionSpec<ParallelismOptions>>& ParallelismRows() {
  static const auto rows = ParallelismOptionRows("Writer option");
  return rows;
}

// The row's doc without its "(CLI: ...)" note, which is for the other front ends.
std::string_view Doc(std::string_view doc) { return doc.substr(0, doc.find(" (CLI:")); }

}  // namespace

// ---- automatic values -------------------------------------------------------------------------

unsigned AutomaticThreads(unsigned threads, WriteDriver driver) {
  if (threads != 0) return threads;
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  // Beside a generator (which feeds GPUs) the writer takes a few cores; pack owns the machine.
  return driver == WriteDriver::kGenerator ? std::min(cpus, 4u) : cpus;
}

uint64_t AutomaticInFlightBytes(uint64_t in_flight_bytes, unsigned threads,
                                uint64_t largest_sample) {
  if (in_flight_bytes != 0) return in_flight_bytes;
  if (largest_sample == 0) return uint64_t{1} << 30;
  // Every thread one sample in hand and one queued, whatever the sizes.
  const uint64_t per_thread = 2 * uint64_t{std::max(1u, threads)};
  return std::max<uint64_t>(uint64_t{64} << 20, per_thread * largest_sample);
}

// ---- checks -----------------------------------------------------------------------------------

Status ValidateEncoding(const EncodingOptions& e, const OptionSpeller& spell) {
  if (e.compression != Compression::kNone && e.compression != Compression::kZstd)
    return Status::InvalidArgument(spell("compress") + ": the compression is not a known value");
  if (e.field_codecs != FieldCodecPolicy::kNone && e.field_codecs != FieldCodecPolicy::kAuto &&
      e.field_codecs != FieldCodecPolicy::kPlanes && e.field_codecs != FieldCodecPolicy::kPlanes2)
    return Status::InvalidArgument(spell("compress") + ": the field codec policy is not a known "
                                   "value");
  if (e.zstd_level < kMinZstdLevel || e.zstd_level > kMaxZstdLevel)
    return Status::InvalidArgument(spell("compress") + ": zstd level " +
                                   std::to_string(e.zstd_level) + " is outside " +
                                   std::to_string(kMinZstdLevel) + ".." +
                                   std::to_string(kMaxZstdLevel));
  if ((e.field_codecs != FieldCodecPolicy::kNone || e.store_fp8) &&
      e.compression != Compression::kNone)
    return Status::InvalidArgument(
        "whole-sample zstd (" + spell("compress") + " zstd) and field codecs (" +
        spell("compress") + " auto/planes/planes2, " + spell("store_dtype") +
        " float8_e4m3fn) exclude each other (exclusive forms of a stored sample, FORMAT.md "
        "§3.8.6); choose one");
  return Status::OK();
}

Status ValidateLayout(const LayoutOptions& l, const OptionSpeller& spell) {
  LIBSHARD_RETURN_IF_ERROR(CheckBounds(LayoutRows(), l, spell));
  if (!(l.commit_interval_seconds >= 0) || l.commit_interval_seconds > 1e9)
    return Status::InvalidArgument(spell("commit_interval") + " must be a number of seconds in "
                                   "0..1e9 (0: journal only every journal_every bytes)");
  return Status::OK();
}

Status ValidateParallelism(const ParallelismOptions& p, const OptionSpeller& spell) {
  return CheckBounds(ParallelismRows(), p, spell);
}

Status ValidateProvenance(const ProvenanceOptions& p, const OptionSpeller& spell) {
  return ValidateAttributes(p.attributes).WithContext(spell("attrs"));
}

Status ValidateWriterConfig(const WriterConfig& c, const OptionSpeller& spell) {
  LIBSHARD_RETURN_IF_ERROR(ValidateEncoding(c, spell));
  LIBSHARD_RETURN_IF_ERROR(ValidateLayout(c, spell));
  LIBSHARD_RETURN_IF_ERROR(ValidateParallelism(c, spell));
  return ValidateProvenance(c, spell);
}

// ---- spellings --------------------------------------------------------------------------------

std::string SpellWriterOption(std::string_view row, Caller caller) {
  const OptionSpec<WriterConfig>* s = WriterOptionTable().Find(row);
  if (s == nullptr) return "'" + std::string(row) + "'";
  switch (caller) {
    case Caller::kCli: {
      const CommandLineSpelling cl = CommandLineSpellingOf(*s);
      if (!cl.flags.empty()) return cl.flags.front();
      if (!cl.negation.empty()) return cl.negation;
      break;
    }
    case Caller::kCpp: {  // "WriterConfig::compression/zstd_level/field_codecs"
      std::string members;
      for (std::string_view m = s->member; !m.empty();) {
        const size_t comma = m.find(',');
        members += (members.empty() ? "" : "/") + std::string(m.substr(0, comma));
        m = comma == std::string_view::npos ? std::string_view() : m.substr(comma + 1);
        while (m.starts_with(' ')) m.remove_prefix(1);
      }
      return "WriterConfig::" + members;
    }
    case Caller::kPython:
      break;
  }
  return "'" + std::string(s->name) + "'";
}

CommandLineSpelling CommandLineSpellingOf(OptionType type, std::string_view default_value,
                                          const std::vector<std::string_view>& aliases,
                                          std::string_view unset,
                                          const std::vector<std::string_view>& choices,
                                          std::string_view doc) {
  CommandLineSpelling out;
  for (std::string_view a : aliases)
    if (a.starts_with("-")) out.flags.emplace_back(a);
  if (type == OptionType::kBool && default_value == "True" && !out.flags.empty()) {
    std::string_view name = out.flags.front();
    while (name.starts_with("-")) name.remove_prefix(1);
    out.negation = "--no-" + std::string(name);
    out.flags.clear();
    out.help = "Do not " + std::string(Doc(doc));
    return out;
  }
  out.help = std::string(Doc(doc));
  std::string_view d = default_value;
  if (d.size() >= 2 && d.front() == '\'' && d.back() == '\'') d = d.substr(1, d.size() - 2);
  std::string notes;
  if (type == OptionType::kChoice && !choices.empty()) {
    notes = "one of:";
    for (std::string_view c : choices) notes += " " + std::string(c);
  }
  const auto note = [&notes](std::string text) {
    notes += (notes.empty() ? "" : "; ") + std::move(text);
  };
  const bool counted = type == OptionType::kCount || type == OptionType::kBytes;
  if (!unset.empty() && d == "None") {
    note(std::string(counted ? "default or 0: " : "default: ") + std::string(unset));
  } else if (d == "None" && type == OptionType::kChoice &&
             std::find(choices.begin(), choices.end(), "none") != choices.end()) {
    note("default: none");
  } else if (!d.empty() && d != "None" && d != "False" && d != "True" &&
             type != OptionType::kBool) {
    note("default: " + std::string(d));
  }
  if (!notes.empty()) out.help += " (" + notes + ")";
  return out;
}

// ---- the structs that take parts --------------------------------------------------------------

WriterOptions WriterOptions::From(const WriterConfig& config) {
  WriterOptions w;
  static_cast<EncodingOptions&>(w) = config;
  static_cast<LayoutOptions&>(w) = config;
  static_cast<ProvenanceOptions&>(w) = config;
  return w;
}

ParallelWriterOptions ParallelWriterOptions::From(const WriterConfig& config) {
  ParallelWriterOptions p;
  static_cast<ParallelismOptions&>(p) = config;
  return p;
}

}  // namespace libshard
