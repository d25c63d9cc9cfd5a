// The local-directory driver (storage_driver.h): the dataset is the directory; a write writes it
// in place and has nothing to publish.
#include <memory>
#include <string>

#include "storage/storage_driver.h"

namespace libshard::storage {
namespace {

class LocalTarget final : public WriteTarget {
 public:
  explicit LocalTarget(std::string dir) : dir_(std::move(dir)) {}
  const std::string& local_dir() const override { return dir_; }
  Status ShardSealed(const std::string&, const std::string&) override { return Status::OK(); }
  Status error() const override { return Status::OK(); }
  bool committed_unpublished() const override { return false; }
  Status Publish() override { return Status::OK(); }
  void Release() override {}

 private:
  std::string dir_;
};

class LocalDriver final : public StorageDriver {
 public:
  explicit LocalDriver(std::string path) {
    info_.driver = "local";
    info_.location = path;
    info_.work_dir = std::move(path);
    info_.staged = false;
    info_.local_files = true;
  }
  const StorageInfo& info() const override { return info_; }
  Result<std::shared_ptr<Dataset>> Open(const DatasetOptions& options,
                                        LocalOpen open_local) const override {
    return open_local(info_.location, options);
  }
  Result<std::unique_ptr<WriteTarget>> BeginWrite(WriteKind, Caller) const override {
    return std::unique_ptr<WriteTarget>(std::make_unique<LocalTarget>(info_.location));
  }

 private:
  StorageInfo info_;
};

}  // namespace

Result<std::unique_ptr<StorageDriver>> OpenLocalDriver(std::string_view path) {
  return std::unique_ptr<StorageDriver>(std::make_unique<LocalDriver>(std::string(path)));
}

}  // namespace libshard::storage
