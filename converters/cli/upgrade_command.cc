// `libshard upgrade DIR`: rewrites a dataset's index as index version 2 (FORMAT.md §3.8.8).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "libshard/upgrade.h"

namespace libshard::cli {
namespace {

struct UpgradeArgs {
  std::string dir;
  bool quiet = false;
};

int RunUpgrade(const UpgradeArgs& a) {
  Result<bool> upgraded = UpgradeIndex(a.dir);
  if (!upgraded.ok()) return Fail("upgrade", upgraded.status());
  if (!a.quiet)
    std::printf(*upgraded ? "%s: index rewritten as version 2 (shards untouched)\n"
                          : "%s: index is already version 2; nothing to do\n",
                a.dir.c_str());
  return kExitOk;
}

}  // namespace

Command AddUpgradeCommand(CLI::App& app) {
  auto args = std::make_shared<UpgradeArgs>();
  CLI::App* c = app.add_subcommand(
      "upgrade", "Rewrite a dataset's index in the compact index format (version 2); shards are "
                 "not touched");
  c->add_option("DIR", args->dir, "Dataset directory")->required();
  c->add_flag("-q,--quiet", args->quiet, "No summary");
  return {c, [args] { return RunUpgrade(*args); }};
}

}  // namespace libshard::cli
