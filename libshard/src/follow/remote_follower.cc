// The follower of an object store's dataset (remote_follower.h).
#include "follow/remote_follower.h"

#include "format/manifest.h"

namespace libshard::follow {
namespace {

class RemoteFollower final : public DatasetFollower {
 public:
  RemoteFollower(std::shared_ptr<objstore::ObjectStore> store,
                 std::function<Result<std::shared_ptr<Dataset>>()> open)
      : store_(std::move(store)), open_(std::move(open)), url_(store_->url().ToString()) {}

  Status Poll() override {
    if (dataset_) return Status::OK();
    // No manifest yet: the write is in progress (or has not started).
    Result<objstore::ObjectInfo> manifest = store_->Head(format::kManifestName);
    if (!manifest.ok())
      return manifest.status().code() == StatusCode::kNotFound ? Status::OK() : manifest.status();
    Result<std::shared_ptr<Dataset>> opened = open_();
    if (opened.ok()) {
      dataset_ = std::move(opened).value();
      return Status::OK();
    }
    // Gone again between the two requests (a write replaced it): ask again next time.
    if (opened.status().code() == StatusCode::kNotFound) return Status::OK();
    return opened.status();
  }
  FollowProgress progress() const override {
    FollowProgress p;
    p.samples = dataset_ ? dataset_->size() : 0;
    p.complete = dataset_ != nullptr;
    p.writers = dataset_ ? 1 : 0;
    if (!dataset_)
      p.waiting_for = url_ + ": its manifest.json (a write to " + store_->url().scheme +
                      ":// is seen whole, once its writer closes it)";
    return p;
  }
  Result<std::shared_ptr<Dataset>> Snapshot() override {
    if (!dataset_) return Status::NotFound(url_ + ": no manifest.json yet");
    return dataset_;
  }
  const std::string& path() const override { return url_; }

 private:
  std::shared_ptr<objstore::ObjectStore> store_;
  std::function<Result<std::shared_ptr<Dataset>>()> open_;
  std::string url_;
  std::shared_ptr<Dataset> dataset_;
};

}  // namespace

Result<std::unique_ptr<DatasetFollower>> OpenRemoteFollower(
    std::shared_ptr<objstore::ObjectStore> store,
    std::function<Result<std::shared_ptr<Dataset>>()> open) {
  auto f = std::make_unique<RemoteFollower>(std::move(store), std::move(open));
  LIBSHARD_RETURN_IF_ERROR(f->Poll());
  return std::unique_ptr<DatasetFollower>(std::move(f));
}

}  // namespace libshard::follow
