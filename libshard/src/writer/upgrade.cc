// UpgradeIndex (FORMAT.md §3.8.8).
#include "libshard/upgrade.h"

#include "dataset/dataset_access.h"
#include "format/index.h"
#include "format/manifest.h"
#include "io/filesystem.h"
#include "storage/storage_driver.h"
#include "libshard/dataset.h"
#include "libshard/dataset_lock.h"
#include "writer/commit.h"

namespace libshard {

Result<bool> UpgradeIndex(const std::string& dir, Caller caller) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                            storage::OpenStorage(dir));
  if (!driver->info().local_files)
    return storage::NeedsLocalFiles(*driver, "upgrade rewrites a local directory",
                                    "upgrade a local copy, then upload that");
  DatasetOptions open_options;
  open_options.caller = caller;
  if (!internal::PathExists(dir)) return Dataset::Open(dir, open_options).status();  // its message
  // Held until the new manifest is committed: one writer at a time per directory.
  auto lock = DatasetLock::Acquire(dir, /*create_directory=*/false, caller);
  if (!lock.ok()) return lock.status().WithContext("upgrade");
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<Dataset> ds, Dataset::Open(dir, open_options));
  const std::string mp = internal::JoinPath(dir, format::kManifestName);
  LIBSHARD_ASSIGN_OR_RETURN(std::string text, internal::ReadWholeFile(mp, 256u << 20));
  LIBSHARD_ASSIGN_OR_RETURN(format::Manifest manifest, format::ParseManifest(text, mp));
  // Current: version 4, with field checksums and row blocks (FORMAT.md §3.9, §3.10).
  if (manifest.index_version >= format::kIndexVersion && ds->has_field_checksums() &&
      ds->has_row_blocks())
    return false;

  std::vector<format::IndexShard> shards;
  for (const ShardInfo& s : ds->shards())
    shards.push_back(format::IndexShard{s.path.substr(s.path.find_last_of('/') + 1), s.size,
                                        s.samples, s.uid});
  std::vector<format::IndexSample> samples;
  samples.reserve(ds->size());
  for (uint64_t i = 0; i < ds->size(); ++i) {
    LIBSHARD_ASSIGN_OR_RETURN(format::IndexSample s, internal::SampleEntryFromDataset(*ds, i));
    // Read whole, its sample checksum checked, then its field checksums and row blocks computed
    // (FORMAT.md §3.9, §3.10.6).
    std::string table;
    LIBSHARD_RETURN_IF_ERROR(internal::DatasetAccess::ComputeChecks(*ds, i, &s.field_checksums,
                                                                    &table));
    s.block_table = std::move(table);
    samples.push_back(std::move(s));
  }
  internal::CommitRequest req;
  req.dir = dir;
  req.schema = ds->schema();
  req.shards = std::move(shards);
  req.samples = &samples;
  // The append protocol (§7): the other index name, then the manifest, then the old one goes.
  req.index_file = manifest.index_file == "index.lsi" ? "index.a.lsi" : "index.lsi";
  req.old_index_file = manifest.index_file;
  req.source_root = manifest.source_root;
  req.created_by = manifest.created_by;
  req.attributes = manifest.attributes;
  for (uint8_t c : ds->field_codecs()) req.codecs.push_back(format::FieldCodec{c, {}});
  ds.reset();
  LIBSHARD_ASSIGN_OR_RETURN(WriteSummary summary, internal::CommitDataset(req));
  (void)summary;
  return true;
}

}  // namespace libshard
