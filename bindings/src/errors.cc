// Mapping of libshard Status codes to Python exceptions (see bindings.h).
//
// One class per StatusCode, all deriving from libshard.Error and, where Python users expect one,
// from the matching built-in, so `except ValueError` and `except libshard.Error` both work:
//   InvalidArgument   -> InvalidArgumentError(Error, ValueError)
//   Unsupported       -> UnsupportedError(Error, ValueError)
//   NotFound          -> NotFoundError(Error, FileNotFoundError)
//   IoError           -> IoError(Error, OSError)             raised as cls(errno, message)
//   Corruption        -> CorruptionError(Error)
//   ResourceExhausted -> ResourceExhaustedError(Error, MemoryError)
//   AlreadyExists     -> AlreadyExistsError(Error, FileExistsError)
//   Aborted           -> AbortedError(Error)
//   Internal          -> InternalError(Error, RuntimeError)
#include <Python.h>

#include <array>
#include <cerrno>
#include <string>

#include "bindings.h"

namespace libshard::python {
namespace {

// The classes, indexed by StatusCode; created once at module import and kept for the process
// lifetime (module-level exception types are never freed).
constexpr size_t kNumCodes = static_cast<size_t>(StatusCode::kAlreadyExists) + 1;
PyObject* g_error = nullptr;
std::array<PyObject*, kNumCodes> g_classes{};

// IoError subclasses that also derive from the OSError subclass Python picks for an errno
// (PermissionError for EACCES, ...), so `except PermissionError` keeps working; made on first use.
struct ErrnoClass {
  int err;
  PyObject* builtin;
  const char* name;
  PyObject* cls = nullptr;
};
std::array<ErrnoClass, 11>& ErrnoClasses() {
  static std::array<ErrnoClass, 11> classes = {{
      {EACCES, PyExc_PermissionError, "libshard.IoError.PermissionError"},
      {EPERM, PyExc_PermissionError, "libshard.IoError.PermissionError"},
      {ENOENT, PyExc_FileNotFoundError, "libshard.IoError.FileNotFoundError"},
      {EEXIST, PyExc_FileExistsError, "libshard.IoError.FileExistsError"},
      {EISDIR, PyExc_IsADirectoryError, "libshard.IoError.IsADirectoryError"},
      {ENOTDIR, PyExc_NotADirectoryError, "libshard.IoError.NotADirectoryError"},
      {EINTR, PyExc_InterruptedError, "libshard.IoError.InterruptedError"},
      {ETIMEDOUT, PyExc_TimeoutError, "libshard.IoError.TimeoutError"},
      {EAGAIN, PyExc_BlockingIOError, "libshard.IoError.BlockingIOError"},
      {EPIPE, PyExc_BrokenPipeError, "libshard.IoError.BrokenPipeError"},
      {ECONNRESET, PyExc_ConnectionResetError, "libshard.IoError.ConnectionResetError"},
  }};
  return classes;
}

// The class to raise for an IoError with errno `err`: IoError itself, or its subclass that also
// derives from the built-in Python maps `err` to.
PyObject* IoErrorClassFor(PyObject* io_error, int err) {
  for (ErrnoClass& e : ErrnoClasses()) {
    if (e.err != err) continue;
    if (e.cls == nullptr) {
      for (ErrnoClass& same : ErrnoClasses())  // EACCES and EPERM share one class
        if (same.builtin == e.builtin && same.cls != nullptr) e.cls = same.cls;
    }
    if (e.cls == nullptr) {
      PyObject* bases = PyTuple_Pack(2, io_error, e.builtin);
      if (bases == nullptr) return io_error;
      e.cls = PyErr_NewException(e.name, bases, nullptr);
      Py_DECREF(bases);
      if (e.cls == nullptr) {
        PyErr_Clear();
        return io_error;
      }
    }
    return e.cls;
  }
  return io_error;
}

struct ClassSpec {
  StatusCode code;
  const char* name;      // attribute name in the module
  PyObject* builtin;     // second base, or nullptr for Error alone
  const char* doc;
};

}  // namespace

void ThrowStatus(const Status& status) {
  // Messages quote names and source paths, which are raw bytes (FORMAT.md §1): undecodable bytes
  // are shown as \xNN escapes rather than turning the error into a UnicodeDecodeError. The class
  // names the code, so the message is the status message alone.
  const std::string& text = status.message();
  PyObject* message =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (message == nullptr) throw py::error_already_set();
  const auto index = static_cast<size_t>(status.code());
  PyObject* type = index < kNumCodes ? g_classes[index] : nullptr;
  if (type == nullptr) type = g_classes[static_cast<size_t>(StatusCode::kInternal)];
  if (type == nullptr) type = PyExc_RuntimeError;  // before RegisterErrors ran
  // OSError-derived classes take (errno, message) so .errno and .strerror are set.
  const bool with_errno = status.sys_errno() != 0 && PyType_Check(type) &&
                          PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type),
                                           reinterpret_cast<PyTypeObject*>(PyExc_OSError));
  if (with_errno) {
    if (status.code() == StatusCode::kIoError) type = IoErrorClassFor(type, status.sys_errno());
    PyObject* args = Py_BuildValue("(iO)", status.sys_errno(), message);
    PyErr_SetObject(type, args);
    Py_XDECREF(args);
  } else {
    PyErr_SetObject(type, message);
  }
  Py_DECREF(message);
  throw py::error_already_set();
}

void RegisterErrors(py::module_& m) {
  g_error = PyErr_NewExceptionWithDoc(
      "libshard.Error",
      "Base class of every exception libshard raises. Each subclass also derives from the "
      "built-in Python users expect (ValueError, FileNotFoundError, OSError, MemoryError, ...).",
      PyExc_Exception, nullptr);
  if (g_error == nullptr) throw py::error_already_set();
  m.add_object("Error", py::handle(g_error));

  const ClassSpec specs[] = {
      {StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError,
       "An argument or option is wrong; the message names it and the accepted values."},
      {StatusCode::kNotFound, "NotFoundError", PyExc_FileNotFoundError,
       "A file or dataset does not exist; the message names the path."},
      {StatusCode::kCorruption, "CorruptionError", nullptr,
       "Bytes of a packed dataset or a source file violate the format or fail their checksum. "
       "The message names the file, the sample and the byte offset; re-pack the dataset or "
       "restore the named file."},
      {StatusCode::kIoError, "IoError", PyExc_OSError,
       "A system call failed; .errno and .strerror hold the errno, the message names the file."},
      {StatusCode::kUnsupported, "UnsupportedError", PyExc_ValueError,
       "Well-formed input that this version of libshard refuses (a newer format version, a "
       "construct it does not read)."},
      {StatusCode::kResourceExhausted, "ResourceExhaustedError", PyExc_MemoryError,
       "A budget or limit was exceeded (the memory budget, a size limit); the message names the "
       "limit and how to raise it."},
      {StatusCode::kAborted, "AbortedError", nullptr,
       "The operation was stopped (the loader was closed or the job cancelled)."},
      {StatusCode::kInternal, "InternalError", PyExc_RuntimeError,
       "A bug in libshard; please report it with the message."},
      {StatusCode::kAlreadyExists, "AlreadyExistsError", PyExc_FileExistsError,
       "Refusing to overwrite, or a dataset that another writer holds."},
  };
  for (const ClassSpec& spec : specs) {
    const std::string qualified = std::string("libshard.") + spec.name;
    PyObject* bases = spec.builtin != nullptr ? PyTuple_Pack(2, g_error, spec.builtin)
                                              : PyTuple_Pack(1, g_error);
    if (bases == nullptr) throw py::error_already_set();
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), spec.doc, bases, nullptr);
    Py_DECREF(bases);
    if (cls == nullptr) throw py::error_already_set();
    g_classes[static_cast<size_t>(spec.code)] = cls;
    m.add_object(spec.name, py::handle(cls));
  }

  // For tests of the mapping itself: raises the exception for (code, message, errno).
  m.def(
      "_raise_status",
      [](int code, const std::string& message, int sys_errno) {
        ThrowStatus(Status(static_cast<StatusCode>(code), message, sys_errno));
      },
      py::arg("code"), py::arg("message"), py::arg("errno") = 0);
}

}  // namespace libshard::python
