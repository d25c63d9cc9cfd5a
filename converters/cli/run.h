// The `libshard` command line as a function, shared by the standalone executable (main.cc) and the
// Python package's `libshard` console script (libshard._core.cli_main, bindings/src/cli.cc), so a
// wheel carries one native module and both commands behave the same.
#pragma once

namespace libshard::cli {

// Parses argv (argv[0] is the program name and is ignored) and runs the chosen subcommand.
// Returns the exit code: 0 ok, 1 failure, 2 usage. Writes to the C stdout/stderr and flushes
// stdout before returning. Signals are left as the caller set them.
int Run(int argc, const char* const* argv);

}  // namespace libshard::cli
