// The `libshard` command-line tool (cli/run.h). Exit codes: 0 ok, 1 failure, 2 usage (README.md
// documents them; scripts rely on 2 meaning "fix the command line", 1 "the data or the system
// failed").
#include "cli/run.h"

#include <cstdio>
#include <exception>
#include <iostream>
#include <vector>

#include "cli/command.h"
#include "libshard/version.h"

namespace libshard::cli {

int Fail(std::string_view command, const Status& status) {
  std::fprintf(stderr, "libshard %.*s: error: %s\n", static_cast<int>(command.size()),
               command.data(), status.ToString().c_str());
  return kExitFailure;
}

int UsageError(std::string_view command, std::string_view message) {
  std::fprintf(stderr, "libshard %.*s: usage error: %.*s\nRun 'libshard %.*s --help' for usage.\n",
               static_cast<int>(command.size()), command.data(), static_cast<int>(message.size()),
               message.data(), static_cast<int>(command.size()), command.data());
  return kExitUsage;
}

namespace {

int RunCommand(int argc, const char* const* argv) {
  CLI::App app{"libshard: pack per-sample tensor dumps (.pt, .pt.gz, .safetensors) into large "
               "4 KiB-aligned shards, inspect, verify and unpack them."};
  app.name("libshard");
  app.require_subcommand(1, 1);
  app.set_version_flag("--version", "libshard " LIBSHARD_VERSION_STRING);
  std::vector<Command> commands = {AddPackCommand(app),   AddInfoCommand(app),
                                   AddVerifyCommand(app), AddUnpackCommand(app),
                                   AddMergeCommand(app),  AddBenchCommand(app),
                                   AddUpgradeCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  try {
    for (const Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libshard: error: %s\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}

}  // namespace

int Run(int argc, const char* const* argv) {
  const int code = RunCommand(argc, argv);
  // Embedded in Python (libshard._core.cli_main) the process goes on after this returns: flush
  // what the command printed so it comes before anything the caller writes next.
  std::cout.flush();
  std::fflush(stdout);
  return code;
}

}  // namespace libshard::cli
