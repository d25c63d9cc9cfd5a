// `--cache DIR` and `--cache-size SIZE` of the commands that open a dataset (info, verify,
// bench): an s3:// dataset's node-local cache, read through the library's DatasetOptionTable, so
// they mean what Python's cache= / cache_size= mean.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "libshard/dataset.h"
#include "libshard/status.h"

namespace libshard::cli {

struct CacheArgs {
  std::string cache;       // "" when not given
  std::string cache_size;  // "" when not given
};

// Registers both options on `c`, stored in *args.
void AddCacheOptions(CLI::App* c, CacheArgs* args);
// Sets options->cache_dir and ->cache_size from what was given; InvalidArgument naming the flag
// for a bad size.
[[nodiscard]] Status ApplyCacheOptions(const CacheArgs& args, DatasetOptions* options);

}  // namespace libshard::cli
