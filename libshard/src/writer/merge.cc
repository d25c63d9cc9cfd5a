// MergeDatasets (FORMAT.md §7).
#include "libshard/merge.h"

#include <algorithm>
#include <numeric>

#include "io/filesystem.h"
#include "format/journal.h"
#include "format/manifest.h"
#include "format/shard_format.h"
#include "libshard/dataset.h"
#include "libshard/dataset_lock.h"
#include "libshard/identity.h"
#include "storage/storage_driver.h"
#include "writer/commit.h"

namespace libshard {

Status MergeDatasets(const std::string& out_dir, const std::vector<std::string>& parts,
                     bool link) {
  MergeOptions options;
  options.link = link;
  return MergeDatasets(out_dir, parts, options);
}

namespace {

// Reorders `samples` (with `part_of[i]` the part of sample i) by source path, byte-wise; refuses
// an empty or repeated path.
Status OrderBySource(std::vector<format::IndexSample>* samples, const std::vector<size_t>& part_of,
                     const std::vector<std::string>& parts) {
  std::vector<size_t> order(samples->size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return (*samples)[a].source_path < (*samples)[b].source_path;
  });
  for (size_t k = 0; k < order.size(); ++k) {
    const format::IndexSample& s = (*samples)[order[k]];
    if (s.source_path.empty())
      return Status::InvalidArgument("merge: part " + parts[part_of[order[k]]] +
                                     " has a sample without a key (source path); it cannot be "
                                     "ordered by key");
    if (k > 0 && (*samples)[order[k - 1]].source_path == s.source_path)
      return Status::InvalidArgument(
          "merge: key '" + s.source_path + "' occurs in part " + parts[part_of[order[k - 1]]] +
          " and in part " + parts[part_of[order[k]]] + "; a key may occur once in a dataset");
  }
  std::vector<format::IndexSample> sorted;
  sorted.reserve(samples->size());
  for (size_t i : order) sorted.push_back(std::move((*samples)[i]));
  *samples = std::move(sorted);
  return Status::OK();
}

// The merge itself, into the local directory `out_dir` (the output's own, or its staging
// directory).
Status MergeLocal(const std::string& out_dir, const std::vector<std::string>& parts,
                  const MergeOptions& options) {
  const bool link = options.link;
  std::vector<std::shared_ptr<Dataset>> datasets;
  uint64_t total_shards = 0, total_samples = 0;
  for (const std::string& part : parts) {
    // A part's shards are linked or copied as files: a cached object-storage copy has holes.
    {
      LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                                storage::OpenStorage(part));
      if (!driver->info().local_files)
        return storage::NeedsLocalFiles(*driver, "merge reads local parts only",
                                        "it links or copies their shard files; download the "
                                        "part first")
            .WithContext("merge");
    }
    DatasetOptions open_options;
    open_options.caller = options.caller;
    auto ds = Dataset::Open(part, open_options);
    if (!ds.ok()) return ds.status().WithContext("merge: part " + part);
    if (!datasets.empty() && !((*ds)->schema() == datasets.front()->schema()))
      return Status::InvalidArgument(
          "merge: part " + part + " has a different schema than " + parts.front() + " (" +
          DescribeDifferences(IdentityDifferences(datasets.front()->schema(), {}, (*ds)->schema(),
                                                  {})) +
          "); only parts of one pack can be merged");
    total_shards += (*ds)->shards().size();
    total_samples += (*ds)->size();
    datasets.push_back(std::move(*ds));
  }
  // Parts of one dataset were made by one generator: their identities (identity.h: attributes
  // and schema, the schema checked above) agree, or the merge is told to combine them, and then
  // records what they share.
  Attributes attributes = datasets.front()->provenance().attributes;
  for (size_t p = 1; p < datasets.size(); ++p) {
    const Attributes& a = datasets.front()->provenance().attributes;
    const Attributes& b = datasets[p]->provenance().attributes;
    if (a == b) continue;
    if (options.allow_identity_change) {
      attributes = SharedAttributes(attributes, b);
      continue;
    }
    return Status::InvalidArgument(
        "merge: part " + parts[p] + " was made with other attributes (" +
        (b.empty() ? std::string("none") : AttributesText(b)) + ") than part " + parts.front() +
        " (" + (a.empty() ? std::string("none") : AttributesText(a)) +
        "): their identities differ (" + parts.front() + " -> " + parts[p] + ": " +
        DescribeDifferences(IdentityDifferences(datasets.front()->schema(), a,
                                                datasets[p]->schema(), b)) +
        "); parts of one dataset must come from one generator setup. Merge parts of one "
        "identity, or pass " +
        (options.caller == Caller::kCli      ? std::string("--allow-identity-change")
         : options.caller == Caller::kPython ? std::string("allow_identity_change=True")
                                             : std::string("MergeOptions::allow_identity_change")) +
        " to combine them deliberately (the merged dataset then records only the attributes they "
        "share)");
  }
  if (total_shards > kMaxShards || total_samples > kMaxSamples)
    return Status::ResourceExhausted("merge: the merged dataset would exceed the format limits");

  // Held until the merged dataset is committed: one writer at a time per directory.
  auto lock = DatasetLock::Acquire(out_dir, /*create_directory=*/true, options.caller);
  if (!lock.ok()) return lock.status().WithContext("merge");
  if (internal::PathExists(internal::JoinPath(out_dir, format::kManifestName)) ||
      internal::PathExists(internal::JoinPath(out_dir, format::kJournalName)))
    return Status::AlreadyExists("merge: " + out_dir +
                                 " already holds a dataset or an interrupted write; choose an "
                                 "empty directory");

  // Field codecs (FORMAT.md §4.3) are per field in the index: the parts must agree.
  const std::vector<uint8_t> codecs = datasets.front()->field_codecs();
  for (const std::shared_ptr<Dataset>& ds : datasets)
    if (ds->field_codecs() != codecs)
      return Status::InvalidArgument("merge: " + ds->path() + " stores its fields with other "
                                     "field codecs than " + datasets.front()->path() +
                                     "; write the parts with the same compression and store dtype "
                                     "(compress, store_dtype)");
  // The samples first (ordered and checked before any file is made), then the shard links.
  std::vector<format::IndexSample> samples;
  samples.reserve(total_samples);
  std::vector<size_t> part_of;  // only for by_key's messages
  const bool by_key = options.by_key || options.order_by_source;
  uint32_t base = 0;
  for (size_t p = 0; p < datasets.size(); ++p) {
    const Dataset& ds = *datasets[p];
    for (uint64_t i = 0; i < ds.size(); ++i) {
      LIBSHARD_ASSIGN_OR_RETURN(format::IndexSample s, internal::SampleEntryFromDataset(ds, i));
      s.record.shard += base;
      samples.push_back(std::move(s));
      if (by_key) part_of.push_back(p);
    }
    base += static_cast<uint32_t>(ds.shards().size());
  }
  if (by_key)
    LIBSHARD_RETURN_IF_ERROR(OrderBySource(&samples, part_of, parts));
  std::vector<format::IndexShard> shards;
  for (const std::shared_ptr<Dataset>& ds : datasets) {
    for (const ShardInfo& s : ds->shards()) {
      // The linked file keeps its header, so the shard keeps its uid (FORMAT.md §4.1, §7).
      format::IndexShard shard{format::ShardFileName(static_cast<uint32_t>(shards.size())), s.size,
                               s.samples, s.uid};
      const std::string target = internal::JoinPath(out_dir, shard.name);
      LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(target));  // leftover of an interrupted merge
      LIBSHARD_RETURN_IF_ERROR(internal::LinkOrCopyFile(s.path, target, link, true));
      shards.push_back(std::move(shard));
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
  req.attributes = std::move(attributes);
  for (uint8_t c : codecs) req.codecs.push_back(format::FieldCodec{c, {}});
  LIBSHARD_ASSIGN_OR_RETURN(WriteSummary summary, internal::CommitDataset(req));
  (void)summary;
  return Status::OK();
}

}  // namespace

// The output's storage driver says where the merge is written; an object store's target then
// publishes it (a merge stopped while publishing is finished by running it again).
Status MergeDatasets(const std::string& out_dir, const std::vector<std::string>& parts,
                     const MergeOptions& options) {
  if (parts.empty()) return Status::InvalidArgument("merge: no parts given");
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                            storage::OpenStorage(out_dir));
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::WriteTarget> target,
                            driver->BeginWrite(storage::WriteKind::kMerge, options.caller));
  if (!target->committed_unpublished()) {
    Status merged = MergeLocal(target->local_dir(), parts, options);
    if (!merged.ok() && driver->info().staged)
      return merged.WithContext(driver->location() + " (staging directory " +
                                target->local_dir() + ")");
    LIBSHARD_RETURN_IF_ERROR(merged);
  }
  LIBSHARD_RETURN_IF_ERROR(target->Publish().WithContext("merge"));
  target->Release();
  return Status::OK();
}

}  // namespace libshard
