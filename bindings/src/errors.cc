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
  const std::string& message = status.message();
  switch (status.code()) {
    case StatusCode::kNotFound:
      if (status.sys_errno() != 0) {
        PyObject* args = Py_BuildValue("(is)", status.sys_errno(), message.c_str());
        PyErr_SetObject(PyExc_FileNotFoundError, args);
        Py_XDECREF(args);
      } else {
        PyErr_SetString(PyExc_FileNotFoundError, message.c_str());
      }
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      PyErr_SetString(PyExc_ValueError, message.c_str());
      break;
    case StatusCode::kIoError:
      if (status.sys_errno() != 0) {
        // OSError(errno, msg) also selects the matching subclass (PermissionError, ...).
        PyObject* args = Py_BuildValue("(is)", status.sys_errno(), message.c_str());
        PyErr_SetObject(PyExc_OSError, args);
        Py_XDECREF(args);
      } else {
        PyErr_SetString(PyExc_OSError, message.c_str());
      }
      break;
    case StatusCode::kCorruption:
      PyErr_SetString(g_corruption_error != nullptr ? g_corruption_error : PyExc_RuntimeError,
                      message.c_str());
      break;
    default:
      PyErr_SetString(PyExc_RuntimeError, status.ToString().c_str());
      break;
  }
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
