// The store table (object_store.h): a URL's scheme chooses its store, once.
#include <string>

#include "objstore/object_store.h"

namespace libshard::objstore {
namespace {

struct StoreRow {
  std::string_view scheme;  // "s3" for s3://...
  Result<std::shared_ptr<ObjectStore>> (*open)(std::string_view url);
};

// One row per store.
constexpr StoreRow kStores[] = {
    {"s3", &OpenS3Store},
    {"gs", &OpenGcsStore},
    {"memory", &OpenMemoryStore},
};

}  // namespace

bool HasStore(std::string_view scheme) {
  for (const StoreRow& row : kStores)
    if (row.scheme == scheme) return true;
  return false;
}

std::string StoreSchemes() {
  std::string out;
  for (const StoreRow& row : kStores)
    out += (out.empty() ? "" : ", ") + std::string(row.scheme) + "://";
  return out;
}

Result<std::shared_ptr<ObjectStore>> OpenStore(std::string_view url) {
  const std::string_view scheme = UrlScheme(url);
  for (const StoreRow& row : kStores)
    if (row.scheme == scheme) return row.open(url);
  return Status::Unsupported(std::string(url) + ": no object store for " + std::string(scheme) +
                             "://; the stores are " + StoreSchemes());
}

}  // namespace libshard::objstore
