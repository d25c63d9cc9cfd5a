// Reading keyword options from Python (the Loader's and pack's): each bad option raises
// libshard.InvalidArgumentError (a ValueError) that names it and says what it must be.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.h"
#include "libshard/option_table.h"
#include "libshard/writer_config.h"

namespace libshard::python {

namespace py = pybind11;

class OptionReader {
 public:
  // `what` prefixes every message: "Loader option", "pack option".
  explicit OptionReader(const char* what) : what_(what) {}

  [[noreturn]] void Bad(const std::string& key, const std::string& why) const {
    ThrowStatus(Status::InvalidArgument(std::string(what_) + " '" + key + "': " + why));
  }

  template <typename T>
  T Get(const std::string& key, const py::handle& value) const {
    try {
      return value.cast<T>();
    } catch (const py::cast_error&) {
      Bad(key, "has the wrong type (" +
                   std::string(py::str(py::type::of(value).attr("__name__"))) + ")");
    }
  }

  uint64_t Unsigned(const std::string& key, const py::handle& value) const {
    if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value)) {
      Bad(key, "must be a non-negative integer");
    }
    py::int_ i = py::reinterpret_borrow<py::int_>(value);
    if (i < py::int_(0)) Bad(key, "must be a non-negative integer, got " + std::string(py::str(i)));
    try {
      return i.cast<uint64_t>();
    } catch (const py::cast_error&) {
      Bad(key, "is too large");
    }
  }

  uint32_t U32(const std::string& key, const py::handle& value) const {
    const uint64_t v = Unsigned(key, value);
    if (v > UINT32_MAX) Bad(key, "is too large");
    return static_cast<uint32_t>(v);
  }

  double Double(const std::string& key, const py::handle& value) const {
    if (!py::isinstance<py::int_>(value) && !py::isinstance<py::float_>(value)) {
      Bad(key, "must be a number");
    }
    return value.cast<double>();
  }

 private:
  const char* what_;
};

// A Python value as an option table takes it (libshard/option_table.h): None, bool, int (any
// size: the sign kept, a magnitude past 64 bits is an error), float, str, a list or tuple of
// str, a dict {str: number}. Other types raise InvalidArgumentError naming `key`.
inline OptionValue ToOptionValue(std::string_view what, const std::string& key,
                                 const py::handle& v) {
  const auto bad = [&](const std::string& why) {
    ThrowStatus(Status::InvalidArgument(std::string(what) + " '" + key + "' " + why));
  };
  const auto type_name = [](const py::handle& h) {
    return std::string(py::str(py::type::of(h).attr("__name__")));
  };
  if (v.is_none()) return OptionValue::None();
  if (py::isinstance<py::bool_>(v)) return OptionValue::Bool(v.cast<bool>());
  if (PyLong_Check(v.ptr()) || (PyIndex_Check(v.ptr()) && !PyFloat_Check(v.ptr()))) {
    py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();
    const bool negative = i < py::int_(0);
    py::int_ magnitude = negative ? py::int_(-i) : i;
    const unsigned long long u = PyLong_AsUnsignedLongLong(magnitude.ptr());
    if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      bad("= " + std::string(py::str(i)) + " is too large");
    }
    return OptionValue::Integer(u, negative);
  }
  if (py::isinstance<py::float_>(v)) return OptionValue::Number(v.cast<double>());
  if (py::isinstance<py::str>(v)) return OptionValue::Text(v.cast<std::string>());
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::vector<std::string> names;
    for (const py::handle& e : py::reinterpret_borrow<py::iterable>(v)) {
      if (!py::isinstance<py::str>(e)) bad("must be a list of names (str), got a " + type_name(e));
      names.push_back(e.cast<std::string>());
    }
    return OptionValue::TextList(std::move(names));
  }
  if (py::isinstance<py::dict>(v)) {
    std::vector<std::pair<std::string, double>> numbers;
    for (const auto& [name, value] : py::reinterpret_borrow<py::dict>(v)) {
      if (!py::isinstance<py::str>(name)) bad("keys must be field names (str)");
      const std::string field = py::str(name);
      if (py::isinstance<py::bool_>(value) ||
          !(py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)))
        bad("['" + field + "'] must be a number, got a " + type_name(value));
      numbers.emplace_back(field, value.cast<double>());
    }
    return OptionValue::NumberMap(std::move(numbers));
  }
  bad("has the wrong type (" + type_name(v) + ")");
  return OptionValue::None();  // not reached: bad() throws
}

// The rows of an option table as Python dicts (for the stubs generator and the docs).
template <typename Options>
py::list OptionTableToPython(const OptionTable<Options>& table) {
  static constexpr const char* kTypes[] = {"bool",  "count", "bytes",      "number",
                                           "choice", "names", "number_map", "state",
                                           "group"};
  py::list rows;
  for (const OptionSpec<Options>& s : table.specs()) {
    py::dict row;
    row["name"] = std::string(s.name);
    row["member"] = std::string(s.member);
    row["type"] = kTypes[static_cast<int>(s.type)];
    row["py_type"] = std::string(s.py_type);
    row["default"] = std::string(s.default_value);
    row["min"] = s.min;
    row["max"] = s.max;
    row["unset"] = std::string(s.unset);
    py::list choices, aliases;
    for (std::string_view c : s.choices) choices.append(std::string(c));
    for (std::string_view a : s.aliases) aliases.append(std::string(a));
    row["choices"] = choices;
    row["aliases"] = aliases;
    row["group"] = std::string(s.group);
    row["doc"] = std::string(s.doc);
    rows.append(std::move(row));
  }
  return rows;
}

// OptionTableToPython with each row's command-line spelling (CommandLineSpellingOf,
// libshard/writer_config.h): "flags", "negation", "help". The writer's and pack's tables, whose
// rows `libshard pack` and `python -m libshard.capture` make their flags from.
template <typename Options>
py::list CommandLineTableToPython(const OptionTable<Options>& table) {
  py::list rows = OptionTableToPython(table);
  size_t i = 0;
  for (const OptionSpec<Options>& s : table.specs()) {
    const CommandLineSpelling cl = CommandLineSpellingOf(s);
    py::dict row = rows[i++].template cast<py::dict>();
    py::list flags;
    for (const std::string& f : cl.flags) flags.append(f);
    row["flags"] = flags;
    row["negation"] = cl.negation;
    row["help"] = cl.help;
  }
  return rows;
}

}  // namespace libshard::python
