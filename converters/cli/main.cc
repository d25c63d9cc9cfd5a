// The standalone `libshard` executable (the CMake build's; the Python package's console script
// calls the same libshard::cli::Run through libshard._core.cli_main).
#include "cli/run.h"

int main(int argc, char** argv) { return libshard::cli::Run(argc, argv); }
