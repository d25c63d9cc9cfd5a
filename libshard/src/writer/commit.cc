#include "writer/commit.h"

#include "dataset/dataset_access.h"
#include "io/filesystem.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index.h"
#include "format/manifest.h"
#include "format/metadata_codec.h"

namespace libshard::internal {

Result<WriteSummary> CommitDataset(const CommitRequest& req) {
  const std::vector<format::IndexSample>& samples = *req.samples;
  // New indexes are version 3 (FORMAT.md §3.9); nothing writes the older versions.
  const std::string index = format::EncodeIndex(req.schema, req.shards, samples, req.codecs);
  LIBSHARD_RETURN_IF_ERROR(WriteFileAtomically(req.dir, req.index_file, index, req.fsync));

  format::Manifest m;
  m.schema = req.schema;
  m.index_file = req.index_file;
  m.index_size = index.size();
  // The index checksum (FORMAT.md §3.8.2): header bytes 120..127, over the head.
  m.index_version = format::GetU32(format::AsBytes(index) + format::kHeaderVersion);
  m.index_xxh3 = format::GetU64(format::AsBytes(index) + format::kIndexChecksumOffset);
  std::vector<uint64_t> counts(req.shards.size(), 0);
  WriteSummary summary;
  for (const format::IndexSample& s : samples) {
    ++counts[s.record.shard];
    summary.raw_bytes += s.record.raw_size;
    if (!s.source_path.empty()) ++m.sources;
  }
  for (size_t k = 0; k < req.shards.size(); ++k) {
    m.shards.push_back({req.shards[k].name, req.shards[k].file_size, counts[k]});
    summary.stored_bytes += req.shards[k].file_size;
  }
  summary.samples = samples.size();
  summary.shards = req.shards.size();
  m.total_samples = summary.samples;
  m.total_raw_bytes = summary.raw_bytes;
  m.total_stored_bytes = summary.stored_bytes;
  m.source_root = req.source_root;
  m.created_by = req.created_by;
  m.attributes = req.attributes;
  m.created_at = format::UtcTimestamp();
  LIBSHARD_RETURN_IF_ERROR(
      WriteFileAtomically(req.dir, format::kManifestName, format::EncodeManifest(m), req.fsync));
  if (req.fsync) LIBSHARD_RETURN_IF_ERROR(SyncDirectory(req.dir));
  if (!req.old_index_file.empty() && req.old_index_file != req.index_file) {
    LIBSHARD_RETURN_IF_ERROR(RemoveFile(JoinPath(req.dir, req.old_index_file)));
    if (req.fsync) LIBSHARD_RETURN_IF_ERROR(SyncDirectory(req.dir));
  }
  return summary;
}

Result<format::IndexSample> SampleEntryFromDataset(const Dataset& ds, uint64_t i) {
  format::IndexSample s;
  const SampleLocation loc = ds.location(i);
  LIBSHARD_ASSIGN_OR_RETURN(SourceFileInfo src, ds.source(i));
  LIBSHARD_ASSIGN_OR_RETURN(Metadata meta, ds.metadata(i));
  s.record.offset = loc.offset;
  s.record.stored_size = loc.stored_size;
  s.record.raw_size = loc.raw_size;
  s.record.checksum = loc.checksum;
  s.record.shard = loc.shard;
  s.record.flags = loc.flags & (kSampleFlagZstd | kSampleFlagByteShuffle);  // stored bits only
  s.record.length = loc.length;
  s.record.source_bytes = src.size;
  s.record.source_mtime_ns = src.mtime_ns;
  s.record.source_hash = src.content_hash;
  s.source_path = std::move(src.path);
  LIBSHARD_RETURN_IF_ERROR(format::EncodeMetadata(meta, &s.metadata));
  for (size_t f = 0; f < ds.schema().fields.size(); ++f) {
    TensorLocation t = ds.tensor(i, f);
    s.tensor_offsets.push_back(t.offset);
    s.tensor_sizes.push_back(t.nbytes);
    s.dims.insert(s.dims.end(), t.shape.begin(), t.shape.end());
  }
  const std::vector<uint8_t> codecs = ds.field_codecs();
  if (!codecs.empty()) {
    LIBSHARD_ASSIGN_OR_RETURN(s.field_stored_sizes, ds.field_stored_sizes(i));
    for (size_t f = 0; f < codecs.size(); ++f)
      if (codecs[f] == 0) s.field_stored_sizes[f] = 0;
  }
  if (ds.has_field_checksums()) {
    LIBSHARD_ASSIGN_OR_RETURN(s.field_checksums, ds.field_checksums(i));
  }
  // FORMAT.md §3.10: carried over as stored, so that merge and append keep index version 4.
  LIBSHARD_ASSIGN_OR_RETURN(s.block_table, DatasetAccess::BlockTableBytes(ds, i));
  return s;
}

}  // namespace libshard::internal
