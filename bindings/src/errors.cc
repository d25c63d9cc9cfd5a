// Mapping of libshard Status codes to Python exceptions (see bindings.h).
#include <Python.h>

#include <string>

#include "bindings.h"

namespace libshard::python {
namespace {

// libshard.CorruptionError; created once at module import and kept for the process lifetime.
PyObject* g_corruption_error = nullptr;

}  // namespace

void ThrowStatus(const Status& status) {
  // Messages quote names and source paths, which are raw bytes (FORMAT.md §1): undecodable bytes
  // are shown as \xNN escapes rather than turning the error into a UnicodeDecodeError.
  const StatusCode code = status.code();
  const bool plain = code == StatusCode::kNotFound || code == StatusCode::kInvalidArgument ||
                     code == StatusCode::kUnsupported || code == StatusCode::kIoError ||
                     code == StatusCode::kCorruption;
  const std::string text = plain ? status.message() : status.ToString();
  PyObject* message =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (message == nullptr) throw py::error_already_set();
  // Raises `type(message)`, or `type(errno, message)` when the status carries an errno (OSError
  // then also selects the matching subclass: PermissionError, ...).
  auto raise = [&](PyObject* type, bool with_errno) {
    if (with_errno && status.sys_errno() != 0) {
      PyObject* args = Py_BuildValue("(iO)", status.sys_errno(), message);
      PyErr_SetObject(type, args);
      Py_XDECREF(args);
    } else {
      PyErr_SetObject(type, message);
    }
  };
  switch (status.code()) {
    case StatusCode::kNotFound:
      raise(PyExc_FileNotFoundError, true);
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      raise(PyExc_ValueError, false);
      break;
    case StatusCode::kIoError:
      raise(PyExc_OSError, true);
      break;
    case StatusCode::kCorruption:
      raise(g_corruption_error != nullptr ? g_corruption_error : PyExc_RuntimeError, false);
      break;
    default:
      raise(PyExc_RuntimeError, false);
      break;
  }
  Py_DECREF(message);
  throw py::error_already_set();
}

void RegisterErrors(py::module_& m) {
  g_corruption_error = PyErr_NewExceptionWithDoc(
      "libshard.CorruptionError",
      "Bytes of a packed dataset violate the format or fail their checksum. The message names the "
      "file, the sample and the byte offset; re-pack the dataset or restore the named file.",
      PyExc_Exception, nullptr);
  if (g_corruption_error == nullptr) throw py::error_already_set();
  m.add_object("CorruptionError", py::handle(g_corruption_error));

  // For tests of the mapping itself: raises the exception for (code, message, errno).
  m.def(
      "_raise_status",
      [](int code, const std::string& message, int sys_errno) {
        ThrowStatus(Status(static_cast<StatusCode>(code), message, sys_errno));
      },
      py::arg("code"), py::arg("message"), py::arg("errno") = 0);
}

}  // namespace libshard::python
