// The driver table (storage_driver.h): a location's scheme chooses its driver, once.
#include "storage/storage_driver.h"

#include <iterator>
#include <string>

#include "storage/object_url.h"
#include "util/env_knobs.h"

namespace libshard::storage {
namespace {

struct DriverRow {
  std::string_view scheme;  // "s3" for s3://...
  Result<std::unique_ptr<StorageDriver>> (*open)(std::string_view location);
};

// One row per object store; a location without a scheme is a local directory.
constexpr DriverRow kDrivers[] = {
    {"s3", &OpenS3Driver},
};

}  // namespace

Result<std::unique_ptr<StorageDriver>> OpenStorage(std::string_view location) {
  if (location.empty()) return Status::InvalidArgument("empty dataset location");
  // Every entry point of the library that names a location (open, follow, write, pack, merge,
  // join, upgrade, lock) comes here first: a bad LIBSHARD_* variable is refused, naming it, by
  // all of them alike, whatever the location and whether or not that entry point reads it.
  LIBSHARD_RETURN_IF_ERROR(ReadEnvKnobs().status());
  const std::string_view scheme = UrlScheme(location);
  if (scheme.empty()) return OpenLocalDriver(location);
  for (const DriverRow& row : kDrivers)
    if (row.scheme == scheme) return row.open(location);
  std::string known;
  for (const DriverRow& row : kDrivers) known += ", " + std::string(row.scheme) + "://";
  return Status::Unsupported(std::string(location) + ": no storage driver for " +
                             std::string(scheme) + "://; a dataset lives in a local directory" +
                             known);
}

Status NeedsLocalFiles(const StorageDriver& driver, std::string_view rule, std::string_view how) {
  return Status::Unsupported(driver.location() + " is in " + driver.info().driver +
                             " storage; " + std::string(rule) + " (" + std::string(how) + ")");
}

}  // namespace libshard::storage

namespace libshard {

Result<StorageInfo> DescribeStorage(const std::string& location) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                            storage::OpenStorage(location));
  return driver->info();
}

}  // namespace libshard
