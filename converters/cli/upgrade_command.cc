// `libshard upgrade DIR`: rewrites a dataset's index as the current version, 3 with field
// checksums (FORMAT.md §3.9, §3.8.8).
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
  Result<bool> upgraded = UpgradeIndex(a.dir, Caller::kCli);
  if (!upgraded.ok()) return Fail("upgrade", upgraded.status());
  if (!a.quiet)
    std::printf(*upgraded ? "%s: every sample checked; index rewritten as version 4 with field "
                            "checksums and row blocks (shards untouched)\n"
                          : "%s: index is already version 4 with field checksums and row blocks; "
                            "nothing to do\n",
                a.dir.c_str());
  return kExitOk;
}

}  // namespace

Command AddUpgradeCommand(CLI::App& app) {
  auto args = std::make_shared<UpgradeArgs>();
  CLI::App* c = app.add_subcommand(
      "upgrade", "Rewrite a dataset's index in the current format (version 4: compact, with a "
                 "checksum per field and per row block so partial reads and row ranges are "
                 "checked); reads and checks every sample, never touches the shards");
  c->add_option("DIR", args->dir, "Dataset directory")->required();
  c->add_flag("-q,--quiet", args->quiet, "No summary");
  return {c, [args] { return RunUpgrade(*args); }};
}

}  // namespace libshard::cli
