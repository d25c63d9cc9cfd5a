// `libshard merge OUT PART_DIR...`: joins datasets (e.g. `pack --part I/N` outputs) in order.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "libshard/dataset.h"
#include "libshard/merge.h"

namespace libshard::cli {
namespace {

struct MergeArgs {
  std::string output;
  std::vector<std::string> parts;
  bool copy = false;
  bool by_key = false;
  bool allow_identity_change = false;
  bool quiet = false;
};

int RunMerge(const MergeArgs& a) {
  if (a.parts.empty()) return UsageError("merge", "give at least one PART_DIR");
  MergeOptions options;
  options.link = !a.copy;
  options.by_key = a.by_key;
  options.allow_identity_change = a.allow_identity_change;
  options.caller = Caller::kCli;
  Status st = MergeDatasets(a.output, a.parts, options);
  if (!st.ok()) return Fail("merge", st);
  if (!a.quiet) {
    auto ds = Dataset::Open(a.output);
    if (!ds.ok()) return Fail("merge", ds.status().WithContext("reopening the merged dataset"));
    std::printf("merged %zu parts into %s: %llu samples, %zu shards, identity xxh3 %s\n",
                a.parts.size(), a.output.c_str(), static_cast<unsigned long long>((*ds)->size()),
                (*ds)->shards().size(), (*ds)->identity().digest_text().c_str());
  }
  return kExitOk;
}

}  // namespace

Command AddMergeCommand(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* c = app.add_subcommand(
      "merge", "Join datasets into one, in the order given, hard-linking shard files (no data copy)");
  c->add_option("OUT", args->output, "New dataset directory")->required();
  c->add_option("PART_DIR", args->parts, "Datasets to join, in order")->required();
  c->add_flag("--copy", args->copy, "Copy shard files instead of hard-linking them");
  c->add_flag("--by-key", args->by_key,
              "Order the samples by key (source path, byte-wise) instead of part order, as a "
              "libshard.Writer of several ranks does; a key found twice is an error");
  c->add_flag("--allow-identity-change", args->allow_identity_change,
              "Merge parts of different identities (other attributes) deliberately; the merged "
              "dataset records only the attributes they share");
  c->add_flag("-q,--quiet", args->quiet, "No summary");
  return {c, [args] { return RunMerge(*args); }};
}

}  // namespace libshard::cli
