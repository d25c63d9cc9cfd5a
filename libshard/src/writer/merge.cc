// MergeDatasets (FORMAT.md §7).
#include "libshard/merge.h"

#include "io/filesystem.h"
#include "format/journal.h"
#include "format/manifest.h"
#include "format/shard_format.h"
#include "libshard/dataset.h"
#include "libshard/dataset_lock.h"
#include "writer/commit.h"

namespace libshard {

Status MergeDatasets(const std::string& out_dir, const std::vector<std::string>& parts,
                     bool link) {
  if (parts.empty()) return Status::InvalidArgument("merge: no parts given");
  std::vector<std::shared_ptr<Dataset>> datasets;
  uint64_t total_shards = 0, total_samples = 0;
  for (const std::string& part : parts) {
    auto ds = Dataset::Open(part);
    if (!ds.ok()) return ds.status().WithContext("merge: part " + part);
    if (!datasets.empty() && !((*ds)->schema() == datasets.front()->schema()))
      return Status::InvalidArgument("merge: part " + part + " has a different schema than " +
                                     parts.front() + "; only parts of one pack can be merged");
    total_shards += (*ds)->shards().size();
    total_samples += (*ds)->size();
    datasets.push_back(std::move(*ds));
  }
  if (total_shards > kMaxShards || total_samples > kMaxSamples)
    return Status::ResourceExhausted("merge: the merged dataset would exceed the format limits");

  // Held until the merged dataset is committed: one writer at a time per directory.
  auto lock = DatasetLock::Acquire(out_dir, /*create_directory=*/true);
  if (!lock.ok()) return lock.status().WithContext("merge");
  if (internal::PathExists(internal::JoinPath(out_dir, format::kManifestName)) ||
      internal::PathExists(internal::JoinPath(out_dir, format::kJournalName)))
    return Status::AlreadyExists("merge: " + out_dir +
                                 " already holds a dataset or an interrupted write; choose an "
                                 "empty directory");

  std::vector<format::IndexShard> shards;
  std::vector<format::IndexSample> samples;
  samples.reserve(total_samples);
  for (size_t p = 0; p < datasets.size(); ++p) {
    const Dataset& ds = *datasets[p];
    const uint32_t base = static_cast<uint32_t>(shards.size());
    for (const ShardInfo& s : ds.shards()) {
      // The linked file keeps its header, so the shard keeps its uid (FORMAT.md §4.1, §7).
      format::IndexShard shard{format::ShardFileName(static_cast<uint32_t>(shards.size())), s.size,
                               s.samples, s.uid};
      const std::string target = internal::JoinPath(out_dir, shard.name);
      LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(target));  // leftover of an interrupted merge
      LIBSHARD_RETURN_IF_ERROR(internal::LinkOrCopyFile(s.path, target, link, true));
      shards.push_back(std::move(shard));
    }
    for (uint64_t i = 0; i < ds.size(); ++i) {
      LIBSHARD_ASSIGN_OR_RETURN(format::IndexSample s, internal::SampleEntryFromDataset(ds, i));
      s.record.shard += base;
      samples.push_back(std::move(s));
    }
  }
  LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(out_dir));

  format::Manifest first;
  {
    const std::string mp = internal::JoinPath(datasets.front()->path(), format::kManifestName);
    LIBSHARD_ASSIGN_OR_RETURN(std::string text, internal::ReadWholeFile(mp, 256u << 20));
    LIBSHARD_ASSIGN_OR_RETURN(first, format::ParseManifest(text, mp));
  }
  internal::CommitRequest req;
  req.dir = out_dir;
  req.schema = datasets.front()->schema();
  req.shards = std::move(shards);
  req.samples = &samples;
  req.source_root = first.source_root;
  req.created_by = "libshard merge of " + std::to_string(parts.size()) + " parts";
  LIBSHARD_ASSIGN_OR_RETURN(WriteSummary summary, internal::CommitDataset(req));
  (void)summary;
  return Status::OK();
}

}  // namespace libshard
