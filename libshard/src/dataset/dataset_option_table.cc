// DatasetOptionTable (libshard/dataset.h): the dataset settings front ends set by name, declared
// once (Python's cache= / cache_size=, the CLI's --cache / --cache-size).
#include <vector>

#include "libshard/dataset.h"
#include "libshard/option_rows.h"

namespace libshard {
namespace {

using Spec = OptionSpec<DatasetOptions>;
constexpr std::string_view kWhat = "Dataset option";

std::vector<Spec> MakeSpecs() {
  using namespace option_rows;
  std::vector<Spec> specs;
  specs.push_back(Text<DatasetOptions>(
      kWhat, "cache", "cache_dir", Member<&DatasetOptions::cache_dir>, "None",
      "object stores only (s3://, gs://): the node-local cache directory every process of the "
      "node shares; None: "
      "$LIBSHARD_CACHE_DIR, else $XDG_CACHE_HOME/libshard, else ~/.cache/libshard"));
  specs.push_back(OptionalBytes<DatasetOptions>(
      kWhat, "cache_size", "cache_size", Member<&DatasetOptions::cache_size>, 1, UINT64_MAX,
      "no bound but the free-space floor",
      "object stores only (s3://, gs://): bytes the whole cache directory may hold, every "
      "dataset under it together "
      "(docs/CACHE.md §4)"));
  return specs;
}

}  // namespace

const OptionTable<DatasetOptions>& DatasetOptionTable() {
  static const OptionTable<DatasetOptions>* const table =
      new OptionTable<DatasetOptions>(kWhat, MakeSpecs());
  return *table;
}

}  // namespace libshard
