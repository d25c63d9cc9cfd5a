// Which front end a library call serves, so that an error's advice names what that caller types:
// `libshard pack --resume` to the CLI, libshard.Writer / resume=True to Python, Writer::Resume to
// C++. Set in WriterOptions::caller and DatasetOptions::caller by the front ends; C++ callers
// leave the default.
#pragma once

#include <cstdint>
#include <string_view>

namespace libshard {

enum class Caller : uint8_t {
  kCpp = 0,  // a C++ program using the library directly
  kPython,   // the Python package (libshard.Writer, libshard.pack, libshard.open)
  kCli,      // the `libshard` command
};

// How `caller` continues an interrupted write of a dataset (a journal and no manifest), as the
// end of "continue it with ...".
constexpr std::string_view ResumeAdvice(Caller caller) {
  switch (caller) {
    case Caller::kPython:
      return "libshard.Writer on the same directory (it resumes by itself), or "
             "libshard.pack(..., resume=True)";
    case Caller::kCli:
      return "`libshard pack --resume`";
    case Caller::kCpp:
      break;
  }
  return "Writer::Resume";
}

}  // namespace libshard
