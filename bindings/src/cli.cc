// libshard._core.cli_main: the `libshard` command line (converters/cli, libshard::cli::Run) inside
// the extension, so the wheel's `libshard` console script (python/_libshard_cli.py) needs no second native
// executable and behaves as the CMake build's one: same parser, output (the C stdout and stderr of
// the process) and exit codes. The console script, not this function, restores the default
// SIGINT/SIGPIPE dispositions the executable has; cli_main leaves the caller's signals alone.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"

#if defined(LIBSHARD_PY_HAVE_CLI)
#include "cli/run.h"
#endif

namespace libshard::python {

void RegisterCli(py::module_& m) {
#if defined(LIBSHARD_PY_HAVE_CLI)
  m.attr("HAVE_CLI") = true;
  m.def(
      "cli_main",
      [](const std::vector<py::object>& argv) {
        // Arguments as the bytes the OS gave (os.fsencode undoes sys.argv's surrogateescape), so
        // file names that are not UTF-8 reach the command unchanged.
        const py::object fsencode = py::module_::import("os").attr("fsencode");
        std::vector<std::string> args;
        args.reserve(argv.size() + 1);
        if (argv.empty()) args.emplace_back("libshard");
        for (const py::object& a : argv) args.push_back(fsencode(a).cast<std::string>());
        std::vector<const char*> ptrs;
        ptrs.reserve(args.size() + 1);
        for (const std::string& a : args) ptrs.push_back(a.c_str());
        ptrs.push_back(nullptr);
        py::gil_scoped_release release;
        return cli::Run(static_cast<int>(args.size()), ptrs.data());
      },
      py::arg("argv"),
      "Runs the `libshard` command line with argv (argv[0] is the program name) and returns its "
      "exit code: 0 ok, 1 failure, 2 usage. Prints to the process's stdout and stderr.");
#else
  m.attr("HAVE_CLI") = false;
  m.def("cli_main", [](const py::object&) -> int {
    ThrowStatus(Status::Unsupported(
        "this build of libshard has no command line (LIBSHARD_BUILD_TOOLS=OFF)"));
  });
#endif
}

}  // namespace libshard::python
