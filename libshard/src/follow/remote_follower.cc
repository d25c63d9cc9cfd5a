#include "follow/remote_follower.h"

namespace libshard::follow {
namespace {

class RemoteFollower final : public DatasetFollower {
 public:
  RemoteFollower(std::string url, DatasetOptions options)
      : url_(std::move(url)), options_(std::move(options)) {}

  Status Poll() override {
    if (dataset_) return Status::OK();
    Result<std::shared_ptr<Dataset>> opened = Dataset::Open(url_, options_);
    if (opened.ok()) {
      dataset_ = std::move(opened).value();
      return Status::OK();
    }
    // No manifest yet: the write is in progress (or has not started).
    if (opened.status().code() == StatusCode::kNotFound) return Status::OK();
    return opened.status();
  }
  FollowProgress progress() const override {
    FollowProgress p;
    p.samples = dataset_ ? dataset_->size() : 0;
    p.complete = dataset_ != nullptr;
    p.writers = dataset_ ? 1 : 0;
    if (!dataset_)
      p.waiting_for = url_ + ": its manifest.json (an s3:// write is seen whole, once its writer "
                             "closes it)";
    return p;
  }
  Result<std::shared_ptr<Dataset>> Snapshot() override {
    if (!dataset_) return Status::NotFound(url_ + ": no manifest.json yet");
    return dataset_;
  }
  const std::string& path() const override { return url_; }

 private:
  std::string url_;
  DatasetOptions options_;
  std::shared_ptr<Dataset> dataset_;
};

}  // namespace

Result<std::unique_ptr<DatasetFollower>> OpenRemoteFollower(const std::string& url,
                                                            const DatasetOptions& options) {
  auto f = std::make_unique<RemoteFollower>(url, options);
  LIBSHARD_RETURN_IF_ERROR(f->Poll());
  return std::unique_ptr<DatasetFollower>(std::move(f));
}

}  // namespace libshard::follow
