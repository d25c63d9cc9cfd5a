// The samples a follower has read of a write in progress (FORMAT.md §6.1), in arrival order:
// ArrivalStore keeps them compactly as they arrive, ArrivalIndex is an immutable view of the
// first N of them that a Dataset reads as its index (dataset/index_reader.h), so that a snapshot
// of a write in progress is read, checked and decoded by the same code as any dataset.
//
// Thread-safety: Append on one thread; views (ArrivalIndex) from any threads at the same time,
// since a view reads only samples appended before it was made and chunks never move.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataset/index_reader.h"
#include "format/block_table.h"
#include "format/index.h"
#include "format/journal.h"

namespace libshard::follow {

// A run of kChunkSamples arrivals, allocated whole when its first sample arrives.
struct ArrivalChunk {
  static constexpr uint64_t kChunkSamples = 4096;
  explicit ArrivalChunk(uint64_t stride)
      : words(new uint64_t[kChunkSamples * stride]()), strings(3 * kChunkSamples) {}
  std::unique_ptr<uint64_t[]> words;  // per sample: `stride` words (ArrivalStore)
  // Per sample: metadata bytes, source path, block table (FORMAT.md §3.10.2, as the journal
  // records it: "" for none or without block tables).
  std::vector<std::string> strings;
};

using ArrivalChunks = std::vector<std::shared_ptr<const ArrivalChunk>>;

class ArrivalStore {
 public:
  explicit ArrivalStore(format::JournalHeader header);

  // Appends `s` (checked by the caller), stored under file `file` of the follower's table.
  void Append(const format::IndexSample& s, uint32_t file);
  uint64_t size() const { return size_; }
  uint64_t total_raw_bytes() const { return raw_bytes_; }
  const format::JournalHeader& header() const { return header_; }
  // The chunks now (shared with the views made from them).
  ArrivalChunks chunks() const;
  // Sample i < size() of these chunks as a writer holds it (shard = the follower's file id).
  static format::IndexSample Entry(const format::JournalHeader& header, const ArrivalChunks& chunks,
                                   uint64_t i);

 private:
  format::JournalHeader header_;
  uint64_t stride_ = 0;
  std::vector<std::shared_ptr<ArrivalChunk>> chunks_;
  uint64_t size_ = 0;
  uint64_t raw_bytes_ = 0;
};

// The first `count` arrivals as an index (dataset/index_reader.h): a Dataset over it reads the
// follower's files `shards` (names as they are now, sizes, sample counts, uids).
class ArrivalIndex final : public internal::IndexReader {
 public:
  ArrivalIndex(const ArrivalStore& store, uint64_t count, std::vector<format::IndexShard> shards,
               uint64_t total_raw_bytes);

  // Version 4 when the journal records block tables (FORMAT.md §6: header flag bit 1): a
  // row-range read of a sample being written then reads only its rows, checked (§3.10).
  uint32_t index_version() const override {
    return has_block_tables() ? format::kIndexVersion4 : format::kIndexVersion3;
  }
  uint64_t sample_count() const override { return count_; }
  const Schema& schema() const override { return header_.schema; }
  const std::vector<format::IndexShard>& shards() const override { return shards_; }
  uint64_t checksum() const override { return 0; }
  uint64_t total_raw_bytes() const override { return raw_bytes_; }
  bool has_shard_uids() const override { return false; }  // checked by the follower
  uint64_t resident_bytes() const override;
  uint64_t length(uint64_t i) const override;
  void Lengths(std::vector<uint64_t>* out) const override;
  Status Lookup(uint64_t i, format::SampleRecord* record,
                std::vector<uint64_t>* dims) const override;
  Result<std::string> SourcePath(uint64_t i) const override;
  Result<std::string> MetadataBytes(uint64_t i) const override;
  Result<format::IndexSample> Entry(uint64_t i) const override {
    return ArrivalStore::Entry(header_, chunks_, i);
  }
  const std::vector<format::FieldCodec>& codecs() const override { return codecs_; }
  Status FieldStoredSizes(uint64_t i, std::vector<uint64_t>* sizes) const override;
  bool has_field_checksums() const override { return header_.field_checksums; }
  Status FieldChecksums(uint64_t i, std::vector<uint64_t>* sums) const override;
  bool has_block_tables() const override {
    return header_.field_checksums && header_.block_tables;
  }
  Result<format::BlockTable> BlockTable(uint64_t i) const override;
  Result<std::string> BlockTableBytes(uint64_t i) const override;

 private:
  const format::JournalHeader header_;
  const ArrivalChunks chunks_;
  const uint64_t count_;
  const std::vector<format::IndexShard> shards_;
  const uint64_t raw_bytes_;
  std::vector<format::FieldCodec> codecs_;
};

}  // namespace libshard::follow
