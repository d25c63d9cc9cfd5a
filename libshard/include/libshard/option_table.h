// Option tables: one row per setting of an options struct (LoaderOptions, ...) with its name, the
// member it sets, its type, default, bounds, other spellings and one line of doc. Every front end
// reads its settings through the table (the Python bindings a dict, the CLI key=value text), the
// library checks a struct set directly in C++ against the same bounds, and the Python stubs are
// generated from it (scripts/gen_core_pyi.py), so a setting is declared once.
//
// Errors name the option as the caller spelled it, in one style:
//   "<what> '<spelling>' <problem>; use <accepted> (<doc>)", e.g.
//   "Loader option 'queue_depth' = 5000 is out of range; use 1..4096 (reads in flight)".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libshard/status.h"

namespace libshard {

struct OptionEntry;

// A value as a front end hands it over (a Python object, a word of CLI text).
struct OptionValue {
  enum class Kind : uint8_t {
    kNone, kBool, kInteger, kNumber, kText, kTextList, kNumberMap,
    kGroup,  // named values of an option group (the loader's "order": a Python dict)
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  bool negative = false;  // kInteger: the sign; the magnitude is `integer`
  uint64_t integer = 0;
  double number = 0;
  std::string text;
  std::vector<std::string> texts;                         // kTextList
  std::vector<std::pair<std::string, double>> numbers;    // kNumberMap
  std::vector<OptionEntry> entries;                       // kGroup, in the order given

  static OptionValue None();
  static OptionValue Bool(bool b);
  static OptionValue Integer(uint64_t magnitude, bool negative = false);
  static OptionValue Number(double d);
  static OptionValue Text(std::string s);
  static OptionValue TextList(std::vector<std::string> list);
  static OptionValue NumberMap(std::vector<std::pair<std::string, double>> map);
  static OptionValue Group(std::vector<OptionEntry> entries);

  // For errors: "'deep' (text)", "-1", "True", "None".
  std::string Describe() const;
};

// One named value: an option as given, or a setting of a group.
struct OptionEntry {
  std::string name;
  OptionValue value;
};

// Defined once OptionEntry is complete (OptionValue holds a vector of them).
inline OptionValue OptionValue::None() { return {}; }

// How a row's value is given. The Python type of each is OptionSpec::py_type.
enum class OptionType : uint8_t {
  kBool,       // True/False, or 1/0 (CLI: 1/0/true/false)
  kCount,      // an unsigned integer within [min, max]; None (when `unset` says what it means)
  kBytes,      // a byte count: an integer or a size string ("2GiB", units.h)
  kNumber,     // a finite number >= 0 (durations) or any finite number (padding values)
  kChoice,     // one of `choices`
  kNames,      // a list of names (fields)
  kNumberMap,  // {name: number} (padding_values)
  kState,      // a structured value the front end hands over as text (a loader state)
  kGroup,      // an option group (OptionValue::kGroup), or its short form (the loader's "order")
};

template <typename Options>
struct OptionSpec {
  std::string_view name;            // the C++ member's and the Python keyword's spelling
  std::string_view member;          // the member(s) of Options it sets
  OptionType type = OptionType::kCount;
  std::string_view py_type;         // its Python type, for the stubs and the docs
  std::string_view default_value;   // as a Python literal: "64", "True", "'auto'", "None"
  uint64_t min = 0;                 // kCount, kBytes: the accepted range
  uint64_t max = UINT64_MAX;
  // kCount, kBytes: what None (and 0 from C++) means, e.g. "single samples"; empty when None is
  // not accepted. Such a setting's 0 is "unset", so min may be above 0.
  std::string_view unset;
  std::vector<std::string_view> choices;  // kChoice: the accepted names; kCount: words it takes
  std::vector<std::string_view> aliases;  // other spellings users have (CLI keys)
  // The option group the row belongs to ("order"), when the row is a group or one of its flat
  // spellings; empty for the others.
  std::string_view group;
  std::string_view doc;             // one line
  // Sets the option. `spelled` is the caller's spelling (named in errors).
  std::function<Status(Options&, const OptionValue&, std::string_view spelled)> set;
  // kCount / kBytes: the member's value, to check a struct set in C++ against [min, max].
  std::function<uint64_t(const Options&)> get;
};

// The shared part of the tables: error wording and text parsing, independent of the struct.
namespace option_table {

// "<what> '<spelled>' <problem>" as InvalidArgument.
Status Bad(std::string_view what, std::string_view spelled, std::string_view problem);
// The accepted values of a count/bytes row, for messages: "1..4096", "1..4096 or None (...)".
std::string Accepted(uint64_t min, uint64_t max, std::string_view unset);
// A count from `value`: kInteger within [min, max], None as 0 when `unset` is not empty.
Status ToCount(std::string_view what, std::string_view spelled, const OptionValue& value,
               uint64_t min, uint64_t max, std::string_view unset, std::string_view doc,
               uint64_t* out);
// A byte count: an integer or a size string, within [min, max].
Status ToBytes(std::string_view what, std::string_view spelled, const OptionValue& value,
               uint64_t min, uint64_t max, std::string_view doc, uint64_t* out);
Status ToBool(std::string_view what, std::string_view spelled, const OptionValue& value,
              bool* out);
// A finite number; >= 0 when `non_negative`.
Status ToNumber(std::string_view what, std::string_view spelled, const OptionValue& value,
                bool non_negative, std::string_view doc, double* out);
Status ToText(std::string_view what, std::string_view spelled, const OptionValue& value,
              std::string* out);
// CLI text as the value of a row of type `type` ("64" an integer, "1"/"true" a bool, ...).
OptionValue FromText(OptionType type, std::string_view text);

}  // namespace option_table

template <typename Options>
class OptionTable {
 public:
  OptionTable(std::string_view what, std::vector<OptionSpec<Options>> specs)
      : what_(what), specs_(std::move(specs)) {}

  std::string_view what() const { return what_; }  // "Loader option"
  const std::vector<OptionSpec<Options>>& specs() const { return specs_; }

  // The row whose name or alias is `spelling`; null when none.
  const OptionSpec<Options>* Find(std::string_view spelling) const {
    for (const auto& s : specs_) {
      if (s.name == spelling) return &s;
      for (std::string_view a : s.aliases)
        if (a == spelling) return &s;
    }
    return nullptr;
  }

  // Sets option `spelling` of `options` from `value`; InvalidArgument naming the spelling for an
  // unknown option or a bad value.
  Status Set(Options& options, std::string_view spelling, const OptionValue& value) const {
    const OptionSpec<Options>* spec = Find(spelling);
    if (spec == nullptr) return option_table::Bad(what_, spelling, "is not a known option");
    if (!spec->set) return option_table::Bad(what_, spelling, "cannot be set here");
    return spec->set(options, value, spelling);
  }
  // The same from CLI text, converted as the row's type says.
  Status SetFromText(Options& options, std::string_view spelling, std::string_view text) const {
    const OptionSpec<Options>* spec = Find(spelling);
    if (spec == nullptr) return option_table::Bad(what_, spelling, "is not a known option");
    return Set(options, spelling, option_table::FromText(spec->type, text));
  }

  // Checks every count/bytes member of `options` against its row's bounds (0 passes where the
  // row has an `unset` meaning).
  Status CheckBounds(const Options& options) const {
    for (const auto& s : specs_) {
      if (!s.get) continue;
      const uint64_t v = s.get(options);
      if (v == 0 && !s.unset.empty()) continue;
      if (v < s.min || v > s.max)
        return option_table::Bad(what_, s.name,
                                 "= " + std::to_string(v) + " is out of range; use " +
                                     option_table::Accepted(s.min, s.max, s.unset) + " (" +
                                     std::string(s.doc) + ")");
    }
    return Status::OK();
  }

 private:
  std::string_view what_;
  std::vector<OptionSpec<Options>> specs_;
};

}  // namespace libshard
