// The driver table (storage_driver.h): a location's scheme chooses its driver, once.
#include "storage/storage_driver.h"

#include <iterator>
#include <string>

#include "objstore/object_store.h"
#include "util/env_knobs.h"

namespace libshard::storage {

Result<std::unique_ptr<StorageDriver>> OpenStorage(std::string_view location,
                                                   const DatasetOptions& options) {
  if (location.empty()) return Status::InvalidArgument("empty dataset location");
  // Every entry point of the library that names a location (open, follow, write, pack, merge,
  // join, upgrade, lock) comes here first: a bad LIBSHARD_* variable is refused, naming it, by
  // all of them alike, whatever the location and whether or not that entry point reads it.
  LIBSHARD_RETURN_IF_ERROR(ReadEnvKnobs().status());
  // A location without a scheme is a local directory; a scheme is an object store's, any store
  // of the store table (objstore/store_table.cc).
  const std::string_view scheme = objstore::UrlScheme(location);
  if (scheme.empty()) return OpenLocalDriver(location, options);
  if (objstore::HasStore(scheme)) return OpenObjectDriver(location, options);
  return Status::Unsupported(std::string(location) + ": no storage driver for " +
                             std::string(scheme) + "://; a dataset lives in a local directory, " +
                             objstore::StoreSchemes());
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
