// Status and Result<T>: how every fallible libshard call reports failure.
//
// The library never throws. A function that can fail returns `Status` (no value) or `Result<T>`
// (a value or a Status). Messages name what a user needs to act: the file, the sample and the
// offset where it applies, and what to do. Edges (the CLI, the Python bindings) turn a non-OK
// Status into an exit code or an exception.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace libshard {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller passed something wrong (options, index out of range)
  kNotFound = 2,         // a file or dataset does not exist
  kCorruption = 3,       // bytes on disk violate docs/FORMAT.md or fail a checksum
  kIoError = 4,          // a system call failed; sys_errno() holds the errno
  kUnsupported = 5,      // well-formed input that this version refuses (newer version, construct)
  kResourceExhausted = 6,// a budget or limit was exceeded (memory budget, size limits)
  kAborted = 7,          // the operation was stopped (Loader::Stop, cancelled job)
  kInternal = 8,         // a libshard bug
  kAlreadyExists = 9,    // refusing to overwrite
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, int sys_errno = 0)
      : code_(code), errno_(sys_errno), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m, int e = 0) { return {StatusCode::kNotFound, std::move(m), e}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status IoError(std::string m, int e = 0) { return {StatusCode::kIoError, std::move(m), e}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  // An I/O error from `errno_value`, with strerror appended to `what`.
  static Status FromErrno(int errno_value, std::string_view what);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  int sys_errno() const { return errno_; }
  const std::string& message() const { return message_; }
  // "Corruption: <message>"
  std::string ToString() const;

  // Returns a copy whose message is `context + ": " + message()`. No-op on OK.
  Status WithContext(std::string_view context) const;

  // Explicitly discards a status (e.g. in destructors after a best-effort cleanup).
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  int errno_ = 0;
  std::string message_;
};

// A value of type T, or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK status");
  }
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status>>>
  Result(U&& value) : v_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace libshard

#define LIBSHARD_CONCAT_IMPL(a, b) a##b
#define LIBSHARD_CONCAT(a, b) LIBSHARD_CONCAT_IMPL(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define LIBSHARD_RETURN_IF_ERROR(expr)                     \
  do {                                                     \
    ::libshard::Status _libshard_st = (expr);              \
    if (!_libshard_st.ok()) return _libshard_st;           \
  } while (0)

// `LIBSHARD_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a Result or returns its Status.
#define LIBSHARD_ASSIGN_OR_RETURN(lhs, rexpr)                                       \
  auto LIBSHARD_CONCAT(_libshard_r_, __LINE__) = (rexpr);                           \
  if (!LIBSHARD_CONCAT(_libshard_r_, __LINE__).ok())                                \
    return LIBSHARD_CONCAT(_libshard_r_, __LINE__).status();                        \
  lhs = std::move(LIBSHARD_CONCAT(_libshard_r_, __LINE__)).value()
