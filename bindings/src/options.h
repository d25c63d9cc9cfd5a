// Reading keyword options from Python (the Loader's and pack's): each bad option raises
// libshard.InvalidArgumentError (a ValueError) that names it and says what it must be.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.h"

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

}  // namespace libshard::python
