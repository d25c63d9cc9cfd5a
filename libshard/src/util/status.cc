#include "libshard/status.h"

#include <cstring>

namespace libshard {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "Invalid argument";
    case StatusCode::kNotFound: return "Not found";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kUnsupported: return "Unsupported";
    case StatusCode::kResourceExhausted: return "Resource exhausted";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kInternal: return "Internal error";
    case StatusCode::kAlreadyExists: return "Already exists";
  }
  return "Unknown";
}

Status Status::FromErrno(int errno_value, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  char buf[256];
  // GNU strerror_r returns a char* that may or may not point into buf.
  msg += strerror_r(errno_value, buf, sizeof buf);
  StatusCode code = (errno_value == ENOENT) ? StatusCode::kNotFound : StatusCode::kIoError;
  return Status(code, std::move(msg), errno_value);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m), errno_);
}

}  // namespace libshard
