// Row builders for option tables (option_table.h) whose settings live in nested structs: each
// takes an accessor to the member it sets. The Writer's and pack's tables use them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/option_table.h"
#include "libshard/status.h"

namespace libshard {

// Rows for tables whose members are reached through an accessor (a member of a nested struct):
// `ref` returns the member of an Options. Errors speak of `what` ("Writer option").
namespace option_rows {

template <typename Options, typename T>
using Ref = T& (*)(Options&);

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

}  // namespace option_rows

}  // namespace libshard
