// Subcommands of the `libshard` tool. Each Add*Command registers its CLI11 subcommand on `app`
// and returns the function that runs it once parsing succeeded (returning the exit code).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string_view>

#include "libshard/status.h"

namespace libshard::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddPackCommand(CLI::App& app);
Command AddInfoCommand(CLI::App& app);
Command AddVerifyCommand(CLI::App& app);
Command AddUnpackCommand(CLI::App& app);
Command AddMergeCommand(CLI::App& app);
Command AddBenchCommand(CLI::App& app);
Command AddUpgradeCommand(CLI::App& app);

// Prints "libshard <command>: error: <status>" on stderr and returns kExitFailure.
int Fail(std::string_view command, const Status& status);
// Prints "libshard <command>: usage error: <message>" plus a --help hint; returns kExitUsage.
int UsageError(std::string_view command, std::string_view message);

}  // namespace libshard::cli
