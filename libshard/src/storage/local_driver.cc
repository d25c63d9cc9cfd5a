// The local-directory driver (storage_driver.h): the dataset is the directory; a write writes it
// in place and has nothing to publish; a follower reads the writer's journal
// (follow/local_follower.h).
#include <memory>
#include <string>

#include "follow/local_follower.h"
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
  LocalDriver(std::string path, DatasetOptions options) : options_(std::move(options)) {
    info_.driver = "local";
    info_.location = path;
    info_.work_dir = std::move(path);
    info_.staged = false;
    info_.local_files = true;
  }
  const StorageInfo& info() const override { return info_; }
  Result<std::shared_ptr<Dataset>> Open(LocalOpen open_local) const override {
    return open_local(info_.location, options_);
  }
  Result<std::unique_ptr<DatasetFollower>> Follow(LocalOpen) const override {
    return follow::OpenLocalFollower(info_.location, options_);
  }
  Result<std::unique_ptr<WriteTarget>> BeginWrite(WriteKind, Caller) const override {
    return std::unique_ptr<WriteTarget>(std::make_unique<LocalTarget>(info_.location));
  }

 private:
  DatasetOptions options_;
  StorageInfo info_;
};

}  // namespace

Result<std::unique_ptr<StorageDriver>> OpenLocalDriver(std::string_view path,
                                                       const DatasetOptions& options) {
  return std::unique_ptr<StorageDriver>(
      std::make_unique<LocalDriver>(std::string(path), options));
}

}  // namespace libshard::storage
