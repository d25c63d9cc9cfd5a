// `--cache` / `--cache-size` (cache_options.h).
#include "cli/cache_options.h"

#include "libshard/option_table.h"

namespace libshard::cli {

void AddCacheOptions(CLI::App* c, CacheArgs* args) {
  c->add_option("--cache", args->cache,
                "s3:// and gs:// datasets: the node-local cache directory (default "
                "$LIBSHARD_CACHE_DIR, else ~/.cache/libshard)");
  c->add_option("--cache-size", args->cache_size,
                "s3:// and gs:// datasets: bytes the whole cache directory may hold, e.g. 500GiB "
                "(default and 0: no bound but the free-space floor)");
}

Status ApplyCacheOptions(const CacheArgs& args, DatasetOptions* options) {
  const OptionTable<DatasetOptions>& table = DatasetOptionTable();
  if (!args.cache.empty())
    LIBSHARD_RETURN_IF_ERROR(table.Set(*options, "cache", OptionValue::Text(args.cache))
                                 .WithContext("--cache"));
  if (!args.cache_size.empty())
    LIBSHARD_RETURN_IF_ERROR(
        table.SetFromText(*options, "cache_size", args.cache_size).WithContext("--cache-size"));
  return Status::OK();
}

}  // namespace libshard::cli
