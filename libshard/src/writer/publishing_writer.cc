// A Writer over a storage driver's WriteTarget (publishing_writer.h).
#include "writer/publishing_writer.h"

#include <mutex>
#include <utility>

#include "io/filesystem.h"
#include "writer/identity_check.h"
#include "writer/writer_impl.h"

namespace libshard::writer_internal {
namespace {

// Also what makes every Writer safe to share between threads (writer.h): the appends, the
// checkpoints and Finish of the local writer and the publication take turns on one mutex;
// Encode (const, the costly part) runs outside it.
class PublishingWriter final : public Writer {
 public:
  PublishingWriter(std::shared_ptr<storage::WriteTarget> target, std::unique_ptr<Writer> inner,
                   std::vector<std::string> set_aside)
      : target_(std::move(target)), inner_(std::move(inner)), set_aside_(std::move(set_aside)) {}

  Result<EncodedSample> Encode(const SampleInput& sample) const override {
    return inner_->Encode(sample);
  }
  Status AppendEncoded(EncodedSample sample) override {
    std::lock_guard lock(mu_);
    // A failed upload stops the write at once, not only at Finish.
    LIBSHARD_RETURN_IF_ERROR(target_->error());
    return inner_->AppendEncoded(std::move(sample));
  }
  Status Append(const SampleInput& sample) override {
    LIBSHARD_ASSIGN_OR_RETURN(EncodedSample e, Encode(sample));
    return AppendEncoded(std::move(e));
  }
  Result<WriteSummary> Finish() override {
    std::lock_guard lock(mu_);
    LIBSHARD_ASSIGN_OR_RETURN(WriteSummary summary, inner_->Finish());
    LIBSHARD_RETURN_IF_ERROR(target_->Publish());
    target_->Release();
    return summary;
  }
  Status Checkpoint() override {
    std::lock_guard lock(mu_);
    return inner_->Checkpoint();
  }
  Result<double> CheckpointIfDue() override {
    std::lock_guard lock(mu_);
    return inner_->CheckpointIfDue();
  }
  const Schema& schema() const override { return inner_->schema(); }
  uint64_t samples_written() const override {
    std::lock_guard lock(mu_);
    return inner_->samples_written();
  }
  const std::vector<SourceFileInfo>& existing_sources() const override {
    return inner_->existing_sources();
  }
  std::vector<std::string> set_aside() const override {
    return set_aside_.empty() ? inner_->set_aside() : set_aside_;
  }

 private:
  std::shared_ptr<storage::WriteTarget> target_;  // before inner_: outlives its hook
  std::unique_ptr<Writer> inner_;                 // writes target_->local_dir()
  std::vector<std::string> set_aside_;            // a staging directory's write set aside
  // Recursive: on_shard_sealed runs inside an append and may ask samples_written().
  mutable std::recursive_mutex mu_;
};

}  // namespace

Result<std::unique_ptr<Writer>> OpenThroughStorage(const std::string& location,
                                                   storage::WriteKind kind,
                                                   const WriterOptions& options,
                                                   const OpenLocalWriter& open) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                            storage::OpenStorage(location));
  // A staged write's identity is checked on its staging directory before its uploads are
  // resumed (identity_check.h): a write of another identity set aside there is never continued,
  // neither its samples nor its uploads, and this one starts afresh (a new write of its schema).
  std::vector<std::string> set_aside;
  OpenLocalWriter chosen = open;
  const std::string& work_dir = driver->info().work_dir;
  if (kind == storage::WriteKind::kResume && driver->info().staged &&
      internal::PathExists(work_dir)) {
    LockPtr lock = options.lock;
    if (!lock) {
      LIBSHARD_ASSIGN_OR_RETURN(lock, DatasetLock::Acquire(work_dir, /*create_directory=*/false,
                                                           options.caller));
    }
    Result<Continuation> found = CheckContinuationLocked(work_dir, options);
    if (!found.ok())
      return found.status().WithContext(driver->location() + " (staging directory " + work_dir +
                                        ")");
    if (!found->set_aside.empty()) {
      set_aside.push_back(found->set_aside);
      kind = storage::WriteKind::kCreate;
      chosen = [schema = found->schema](const std::string& local, const WriterOptions& o) {
        return WriterImpl::Create(local, schema, o);
      };
    }
  }
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::WriteTarget> made,
                            driver->BeginWrite(kind, options.caller));
  std::shared_ptr<storage::WriteTarget> target = std::move(made);
  if (target->committed_unpublished()) LIBSHARD_RETURN_IF_ERROR(target->Publish());
  // Each sealed shard goes to the target (an object store uploads it while the next is written),
  // then to the caller's own hook.
  WriterOptions o = options;
  o.on_shard_sealed = [target, user = options.on_shard_sealed](
                          const std::string& name, const std::string& path) -> Status {
    LIBSHARD_RETURN_IF_ERROR(target->ShardSealed(name, path));
    return user ? user(name, path) : Status::OK();
  };
  Result<std::unique_ptr<Writer>> inner = chosen(target->local_dir(), o);
  if (!inner.ok()) {
    if (!driver->info().staged) return inner.status();
    return inner.status().WithContext(driver->location() + " (staging directory " +
                                      target->local_dir() + ")");
  }
  return std::unique_ptr<Writer>(
      std::make_unique<PublishingWriter>(std::move(target), std::move(*inner),
                                         std::move(set_aside)));
}

}  // namespace libshard::writer_internal
