// IndexReader: the index of an open dataset, whatever its version (FORMAT.md §3). Version 1 is
// read whole and checked at Open, as before. Version 2 reads its head and lengths at Open and each
// sample block with pread on first use, checked then and kept in memory (FORMAT.md §3.8.7, §8):
// the file is never mapped, so a file truncated or rewritten under an open dataset gives a
// Corruption for the samples of blocks not read yet, never a SIGBUS or other data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/index.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::internal {

class IndexReader {
 public:
  // Opens the index at `path`, whose size the manifest records as `expected_size`.
  static Result<std::unique_ptr<IndexReader>> Open(const std::string& path,
                                                   uint64_t expected_size);
  virtual ~IndexReader() = default;

  virtual uint32_t index_version() const = 0;
  virtual uint64_t sample_count() const = 0;
  virtual const Schema& schema() const = 0;
  virtual const std::vector<format::IndexShard>& shards() const = 0;
  virtual uint64_t checksum() const = 0;
  virtual uint64_t total_raw_bytes() const = 0;
  virtual bool has_shard_uids() const = 0;
  // Bytes of the index held in memory now (grows as version 2 blocks are loaded).
  virtual uint64_t resident_bytes() const = 0;

  // Preconditions below: i < sample_count(). Thread-safe.
  virtual uint64_t length(uint64_t i) const = 0;
  virtual void Lengths(std::vector<uint64_t>* out) const = 0;
  // Sample i's record (meta/source ranges 0) and dims; Corruption when its block is damaged, or
  // an I/O error reading it.
  virtual Status Lookup(uint64_t i, format::SampleRecord* record,
                        std::vector<uint64_t>* dims) const = 0;
  virtual Result<std::string> SourcePath(uint64_t i) const = 0;
  virtual Result<std::string> MetadataBytes(uint64_t i) const = 0;
  // Per field (FORMAT.md §3.8.3): its codec; all raw for version 1.
  virtual const std::vector<format::FieldCodec>& codecs() const = 0;
  // Per field, the size of sample i's stored region for a field whose codec is not raw, 0 for a
  // raw field (§3.8.4); the regions' offsets follow from format::ComputeStoredLayout.
  virtual Status FieldStoredSizes(uint64_t i, std::vector<uint64_t>* sizes) const = 0;
  // Whether every sample has field checksums (FORMAT.md §3.9), and sample i's.
  virtual bool has_field_checksums() const = 0;
  // Precondition: has_field_checksums().
  virtual Status FieldChecksums(uint64_t i, std::vector<uint64_t>* sums) const = 0;
  // Everything about sample i, as a writer holds it (append, merge, upgrade), but its block
  // table (BlockTableBytes).
  virtual Result<format::IndexSample> Entry(uint64_t i) const = 0;
  // Whether every sample has a block table (FORMAT.md §3.10: version 4).
  virtual bool has_block_tables() const { return false; }
  // Sample i's block table, read with pread when asked (never kept) and checked: its checksum,
  // and its words against the sample's dims and codecs (§3.10.3); a table without blocks when
  // the sample has none. Precondition: has_block_tables().
  virtual Result<format::BlockTable> BlockTable(uint64_t i) const {
    return Status::Unsupported("the index has no block tables");
  }
  // The same table's bytes as stored, after its checksum is checked ("" for none).
  virtual Result<std::string> BlockTableBytes(uint64_t i) const {
    return Status::Unsupported("the index has no block tables");
  }
};

}  // namespace libshard::internal
