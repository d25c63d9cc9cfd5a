// Row builders for option tables (option_table.h): each takes an accessor to the member it sets
// (a function, for a member of a nested struct, or Member<&Options::x> for a plain member). The
// Loader's, the Writer's and pack's tables use them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "libshard/option_table.h"
#include "libshard/status.h"

namespace libshard {

// Rows for tables whose members are reached through an accessor (a member of a nested struct):
// `ref` returns the member of an Options. Errors speak of `what` ("Writer option").
namespace option_rows {

template <typename Options, typename T>
using Ref = T& (*)(Options&);

// The accessor of a plain member: Member<&LoaderOptions::seed> is a Ref<LoaderOptions, uint64_t>.
template <auto kMember>
struct MemberOf;
template <typename Options, typename T, T Options::*kMember>
struct MemberOf<kMember> {
  static T& Get(Options& o) { return o.*kMember; }
};
template <auto kMember>
constexpr auto Member = &MemberOf<kMember>::Get;

template <typename Options, typename T>
OptionSpec<Options> Count(std::string_view what, std::string_view name, std::string_view member,
                          Ref<Options, T> ref, std::string_view default_value, uint64_t min,
                          uint64_t max, std::string_view unset, std::string_view doc) {
  OptionSpec<Options> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kCount;
  s.py_type = unset.empty() ? "int" : "Optional[int]";
  s.default_value = default_value;
  s.min = min;
  s.max = max;
  s.unset = unset;
  s.doc = doc;
  s.set = [what, ref, min, max, unset, doc](Options& o, const OptionValue& v,
                                            std::string_view spelled) -> Status {
    uint64_t x = 0;
    LIBSHARD_RETURN_IF_ERROR(option_table::ToCount(what, spelled, v, min, max, unset, doc, &x));
    ref(o) = static_cast<T>(x);
    return Status::OK();
  };
  s.get = [ref](const Options& o) {
    return static_cast<uint64_t>(ref(const_cast<Options&>(o)));
  };
  return s;
}

template <typename Options>
OptionSpec<Options> Bytes(std::string_view what, std::string_view name, std::string_view member,
                          Ref<Options, uint64_t> ref, std::string_view default_value,
                          uint64_t min, uint64_t max, std::string_view doc) {
  OptionSpec<Options> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kBytes;
  s.py_type = "Union[int, str]";
  s.default_value = default_value;
  s.min = min;
  s.max = max;
  s.doc = doc;
  s.set = [what, ref, min, max, doc](Options& o, const OptionValue& v,
                                     std::string_view spelled) -> Status {
    return option_table::ToBytes(what, spelled, v, min, max, doc, &ref(o));
  };
  s.get = [ref](const Options& o) { return ref(const_cast<Options&>(o)); };
  return s;
}

template <typename Options>
OptionSpec<Options> Bool(std::string_view what, std::string_view name, std::string_view member,
                         Ref<Options, bool> ref, std::string_view default_value,
                         std::string_view doc) {
  OptionSpec<Options> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kBool;
  s.py_type = "bool";
  s.default_value = default_value;
  s.doc = doc;
  s.set = [what, ref](Options& o, const OptionValue& v, std::string_view spelled) {
    return option_table::ToBool(what, spelled, v, &ref(o));
  };
  return s;
}

// A free-form string (a path, a note); None leaves it empty.
template <typename Options>
OptionSpec<Options> Text(std::string_view what, std::string_view name, std::string_view member,
                         Ref<Options, std::string> ref, std::string_view default_value,
                         std::string_view doc) {
  OptionSpec<Options> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kState;
  s.py_type = default_value == "None" ? "Optional[str]" : "str";
  s.default_value = default_value;
  s.doc = doc;
  s.set = [what, ref](Options& o, const OptionValue& v, std::string_view spelled) -> Status {
    if (v.kind == OptionValue::Kind::kNone) {
      ref(o).clear();
      return Status::OK();
    }
    return option_table::ToText(what, spelled, v, &ref(o));
  };
  return s;
}

// A list of names (globs, fields); None or an empty list: none.
template <typename Options>
OptionSpec<Options> Names(std::string_view what, std::string_view name, std::string_view member,
                          Ref<Options, std::vector<std::string>> ref, std::string_view doc) {
  OptionSpec<Options> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kNames;
  s.py_type = "Optional[List[str]]";
  s.default_value = "None";
  s.doc = doc;
  s.set = [what, ref](Options& o, const OptionValue& v, std::string_view spelled) -> Status {
    if (v.kind == OptionValue::Kind::kNone) {
      ref(o).clear();
    } else if (v.kind == OptionValue::Kind::kText) {
      ref(o) = {v.text};
    } else if (v.kind == OptionValue::Kind::kTextList) {
      ref(o) = v.texts;
    } else {
      return option_table::Bad(what, spelled, "must be a list of names (str), got " + v.Describe());
    }
    return Status::OK();
  };
  return s;
}

// A byte count that may be unset: None and 0 (an integer, or the text "0") mean `unset` (e.g.
// "no bound"); any other count, an integer or a size such as "2GiB", must lie within [min, max].
template <typename Options>
OptionSpec<Options> OptionalBytes(std::string_view what, std::string_view name,
                                  std::string_view member, Ref<Options, uint64_t> ref,
                                  uint64_t min, uint64_t max, std::string_view unset,
                                  std::string_view doc) {
  OptionSpec<Options> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kBytes;
  s.py_type = "Union[int, str, None]";
  s.default_value = "None";
  s.min = min;
  s.max = max;
  s.unset = unset;
  s.doc = doc;
  s.set = [what, ref, min, max, unset, doc](Options& o, const OptionValue& v,
                                            std::string_view spelled) -> Status {
    if (v.kind == OptionValue::Kind::kNone) {
      ref(o) = 0;
      return Status::OK();
    }
    // Digits as text are the integer they spell ("0" from Python as from the CLI).
    const OptionValue value =
        v.kind == OptionValue::Kind::kText ? option_table::FromText(OptionType::kBytes, v.text) : v;
    uint64_t bytes = 0;
    LIBSHARD_RETURN_IF_ERROR(
        option_table::ToBytes(what, spelled, value, 0, UINT64_MAX, doc, &bytes));
    if (bytes != 0 && (bytes < min || bytes > max))
      return option_table::Bad(what, spelled,
                               "= " + std::to_string(bytes) + " is out of range; use " +
                                   option_table::Accepted(min, max, unset) + " (" +
                                   std::string(doc) + ")");
    ref(o) = bytes;
    return Status::OK();
  };
  s.get = [ref](const Options& o) { return ref(const_cast<Options&>(o)); };
  return s;
}

// A real number; `non_negative` refuses one below 0.
template <typename Options>
OptionSpec<Options> Number(std::string_view what, std::string_view name, std::string_view member,
                           Ref<Options, double> ref, std::string_view default_value,
                           bool non_negative, std::string_view doc) {
  OptionSpec<Options> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kNumber;
  s.py_type = "float";
  s.default_value = default_value;
  s.doc = doc;
  s.set = [what, ref, non_negative, doc](Options& o, const OptionValue& v,
                                         std::string_view spelled) {
    return option_table::ToNumber(what, spelled, v, non_negative, doc, &ref(o));
  };
  return s;
}

// One of `choices`, parsed by the library's Parse* function; None gives `none` when set.
template <typename Options, typename E>
OptionSpec<Options> Choice(std::string_view what, std::string_view name, std::string_view member,
                           Ref<Options, E> ref, Result<E> (*parse)(std::string_view),
                           std::string_view default_value, std::vector<std::string_view> choices,
                           std::type_identity_t<std::optional<E>> none, std::string_view doc) {
  OptionSpec<Options> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kChoice;
  s.py_type = none ? "Optional[str]" : "str";
  s.default_value = default_value;
  s.choices = std::move(choices);
  s.doc = doc;
  s.set = [what, ref, parse, none, doc](Options& o, const OptionValue& v,
                                        std::string_view spelled) -> Status {
    if (v.kind == OptionValue::Kind::kNone && none) {
      ref(o) = *none;
      return Status::OK();
    }
    if (v.kind != OptionValue::Kind::kText)
      return option_table::Bad(what, spelled, "must be a string, got " + v.Describe() + " (" +
                                                  std::string(doc) + ")");
    Result<E> parsed = parse(v.text);
    if (!parsed.ok())
      return option_table::Bad(what, spelled, "= " + parsed.status().message() + " (" +
                                                  std::string(doc) + ")");
    ref(o) = *parsed;
    return Status::OK();
  };
  return s;
}

// A row of a table of `Part` as a row of a table of `Options`, a struct that derives from `Part`
// (a composed configuration: WriterConfig of EncodingOptions, ..., writer_config.h): the same
// name, spellings, bounds, default and doc; it sets and reads the Part inside the Options.
template <typename Options, typename Part>
OptionSpec<Options> Lift(const OptionSpec<Part>& row) {
  static_assert(std::is_base_of_v<Part, Options>, "Lift: Options must derive from Part");
  OptionSpec<Options> s;
  s.name = row.name;
  s.member = row.member;
  s.type = row.type;
  s.py_type = row.py_type;
  s.default_value = row.default_value;
  s.min = row.min;
  s.max = row.max;
  s.unset = row.unset;
  s.choices = row.choices;
  s.aliases = row.aliases;
  s.doc = row.doc;
  if (row.set)
    s.set = [set = row.set](Options& o, const OptionValue& v, std::string_view spelled) {
      return set(static_cast<Part&>(o), v, spelled);
    };
  if (row.get)
    s.get = [get = row.get](const Options& o) { return get(static_cast<const Part&>(o)); };
  return s;
}

}  // namespace option_rows

}  // namespace libshard
