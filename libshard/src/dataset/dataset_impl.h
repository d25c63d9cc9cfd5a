// DatasetImpl: a dataset directory on a local file system (FORMAT.md §2.2, §3.7, §4), the
// Dataset that Dataset::Open returns for a path (and, over the node-local cache's copy, inside an
// s3:// dataset). Private to dataset/: dataset_open.cc opens and checks it, sample_read.cc reads
// and checks samples (sample and field checksums), sample_decode.cc decodes their stored bytes
// and makes Samples of them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dataset/index_reader.h"
#include "dataset/slice_plan.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "io/file.h"
#include "libshard/dataset.h"

namespace libshard::internal {

inline constexpr const char* kRepack = "; the dataset is damaged, re-run libshard pack";

class DatasetImpl final : public Dataset {
 public:
  static Result<std::shared_ptr<Dataset>> Open(const std::string& dir,
                                               const DatasetOptions& options);
  // A dataset whose index is not a file of `dir`: the samples a follower of a write in progress
  // has read (FORMAT.md §6.1, follow/). `shards` and `files` (one open file each) and every
  // sample of `index` were checked by the caller; `index_name` names the index in messages.
  static std::shared_ptr<Dataset> FromIndex(std::string dir, std::string index_name,
                                            std::unique_ptr<IndexReader> index,
                                            std::vector<ShardInfo> shards,
                                            std::vector<io::File> files,
                                            const DatasetOptions& options);

  const std::string& path() const override { return dir_; }
  uint64_t size() const override { return index_->sample_count(); }
  const Schema& schema() const override { return index_->schema(); }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  uint64_t total_stored_bytes() const override { return stored_bytes_; }
  uint64_t total_raw_bytes() const override { return index_->total_raw_bytes(); }
  const DatasetProvenance& provenance() const override { return provenance_; }
  std::vector<uint8_t> field_codecs() const override { return codecs_; }
  uint32_t index_version() const override { return index_->index_version(); }
  Result<std::vector<uint64_t>> field_stored_sizes(uint64_t i) const override {
    format::SampleRecord r;
    std::vector<uint64_t> dims;
    LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
    format::PayloadLayout layout;
    LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));
    if (codecs_.empty()) return layout.sizes;
    std::vector<uint64_t> sizes;
    LIBSHARD_RETURN_IF_ERROR(index_->FieldStoredSizes(i, &sizes));
    for (size_t f = 0; f < sizes.size(); ++f)
      if (codecs_[f] == 0) sizes[f] = layout.sizes[f];
    return sizes;
  }

  // A version 2 index reads a sample's block on first use (FORMAT.md §3.8.7); when that fails
  // (a damaged block, an index changed since Open) these infallible accessors return empty values
  // and every fallible call for the sample (Locate, Read, Verify, Decode, MakeSample, source,
  // metadata) returns the error; the loader uses Locate and reports it for that sample.
  SampleLocation location(uint64_t i) const override {
    format::SampleRecord r;
    if (!index_->Lookup(i, &r, nullptr).ok()) return SampleLocation{};
    return SampleLocation{r.shard, Flags(r), r.offset, r.stored_size, r.raw_size, r.checksum,
                          r.length};
  }
  Result<SampleLocation> Locate(uint64_t i) const override {
    format::SampleRecord r;
    LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r));
    return SampleLocation{r.shard, Flags(r), r.offset, r.stored_size, r.raw_size, r.checksum,
                          r.length};
  }
  TensorLocation tensor(uint64_t i, size_t f) const override {
    format::SampleRecord r;
    std::vector<uint64_t> dims;
    format::PayloadLayout layout;
    if (!index_->Lookup(i, &r, &dims).ok() || !format::ComputeLayout(schema(), dims, &layout).ok())
      return TensorLocation{};
    return TensorLocation{layout.offsets[f], layout.sizes[f], FieldShape(dims, f)};
  }
  uint64_t length(uint64_t i) const override { return index_->length(i); }
  std::vector<uint64_t> lengths() const override {
    std::vector<uint64_t> out;
    index_->Lengths(&out);
    return out;
  }
  Result<SourceFileInfo> source(uint64_t i) const override {
    LIBSHARD_RETURN_IF_ERROR(CheckIndex(i));
    format::SampleRecord r;
    LIBSHARD_RETURN_IF_ERROR(index_->Lookup(i, &r, nullptr));
    LIBSHARD_ASSIGN_OR_RETURN(std::string path, index_->SourcePath(i));
    return SourceFileInfo{std::move(path), r.source_bytes, r.source_mtime_ns, r.source_hash};
  }
  Result<Metadata> metadata(uint64_t i) const override {
    LIBSHARD_RETURN_IF_ERROR(CheckIndex(i));
    LIBSHARD_ASSIGN_OR_RETURN(std::string bytes, index_->MetadataBytes(i));
    Metadata m;
    Status st = format::DecodeMetadata(
        {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, &m);
    if (!st.ok()) return st.WithContext(index_path_ + ": sample " + std::to_string(i));
    return m;
  }

  using Dataset::Read;  // Read(i, request) too (row_range_read.cc)
  Result<Sample> Read(uint64_t i) const override;
  Status Verify(uint64_t i) const override;
  bool has_row_blocks() const override { return index_->has_block_tables(); }
  // How the row-range notes (SayOnce) name this dataset and say how to add row blocks: by
  // default its directory and `libshard upgrade DIR`; an s3:// dataset's cached copy (remote/)
  // is named by its URL and upgraded at its source. Set before the dataset is shared.
  void SetNotes(std::string name, std::string upgrade_advice) {
    notes_name_ = std::move(name);
    upgrade_advice_ = std::move(upgrade_advice);
  }
  Result<std::shared_ptr<const SlicePlan>> PlanSlice(uint64_t i, std::span<const size_t> fields,
                                                     RowRange rows, bool verify) const override;
  Result<Sample> FinishSlice(const SlicePlan& plan, std::span<std::byte* const> extents,
                             std::byte* decoded,
                             std::shared_ptr<const void> memory) const override;
  Result<std::optional<std::string>> BlockTableBytes(uint64_t i) const override {
    if (!index_->has_block_tables()) return std::optional<std::string>();
    LIBSHARD_RETURN_IF_ERROR(CheckIndex(i));
    Result<std::string> bytes = index_->BlockTableBytes(i);
    if (!bytes.ok()) return bytes.status().WithContext(dir_);
    return std::optional<std::string>(std::move(bytes).value());
  }
  Status ComputeChecks(uint64_t i, std::vector<uint64_t>* field_checksums,
                       std::string* block_table) const override;
  Status ReadStoredRange(uint64_t i, uint64_t offset, uint64_t size,
                         std::byte* dst) const override;
  bool checks_reads() const override { return options_.verify_checksums; }
  bool has_field_checksums() const override { return index_->has_field_checksums(); }
  Result<std::vector<uint64_t>> field_checksums(uint64_t i) const override {
    LIBSHARD_RETURN_IF_ERROR(CheckIndex(i));
    if (!has_field_checksums()) return Dataset::field_checksums(i);
    std::vector<uint64_t> sums;
    Status st = index_->FieldChecksums(i, &sums);
    if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
    return sums;
  }
  Status VerifyFields(uint64_t i, const std::byte* base, uint64_t base_offset, uint64_t base_size,
                      std::span<const size_t> fields) const override;
  Status FieldRegions(uint64_t i, std::vector<uint64_t>* offsets,
                      std::vector<uint64_t>* sizes) const override;
  Result<std::vector<uint64_t>> ComputeFieldChecksums(uint64_t i) const override;
  Status Decode(uint64_t i, std::span<const std::byte> stored,
                std::span<std::byte> raw) const override {
    return DecodeSelected(i, stored, raw, {}, 0);
  }
  Status DecodeSelected(uint64_t i, std::span<const std::byte> stored, std::span<std::byte> raw,
                        std::span<const size_t> fields, uint64_t max_len) const override;
  Result<Sample> MakeSample(uint64_t i, const std::byte* base, uint64_t base_offset,
                            uint64_t base_size, std::shared_ptr<const void> memory,
                            std::span<const size_t> fields) const override;

 private:
  Status CheckIndex(uint64_t i) const {
    if (i >= size())
      return Status::InvalidArgument(dir_ + ": sample " + std::to_string(i) +
                                     " out of range (dataset has " + std::to_string(size()) +
                                     " samples)");
    return Status::OK();
  }
  // "<dir>/shard-00000.lss: sample 3 at offset 8192"
  std::string Where(uint64_t i, const format::SampleRecord& r) const {
    return shards_[r.shard].path + ": sample " + std::to_string(i) + " at offset " +
           std::to_string(r.offset);
  }
  // The dims of field f within a sample's dims.
  Shape FieldShape(const std::vector<uint64_t>& dims, size_t f) const {
    return Shape(dims.begin() + field_dim_start_[f],
                 dims.begin() + field_dim_start_[f] + schema().fields[f].rank);
  }
  // Sample i's record (and dims), checking i.
  Status Lookup(uint64_t i, format::SampleRecord* r, std::vector<uint64_t>* dims = nullptr) const {
    LIBSHARD_RETURN_IF_ERROR(CheckIndex(i));
    Status st = index_->Lookup(i, r, dims);
    return st.ok() ? st : st.WithContext("sample " + std::to_string(i));
  }
  // The flags a SampleLocation reports: the record's, and kSampleFlagFieldCodecs when fields are
  // stored under codecs (every sample then has the stored layout of §3.8.4).
  uint32_t Flags(const format::SampleRecord& r) const {
    return r.flags | (codecs_.empty() ? 0u : kSampleFlagFieldCodecs);
  }
  // Decodes the stored layout of a sample with field codecs (FORMAT.md §3.8.4, §4.3).
  // Only `fields` (all when empty) and, with max_len > 0, only their prefix where it is a prefix
  // of rows (DecodeSelected).
  Status DecodeFields(uint64_t i, const format::SampleRecord& r,
                      const std::vector<uint64_t>& dims, std::span<const std::byte> stored,
                      std::span<std::byte> raw, std::span<const size_t> fields,
                      uint64_t max_len) const;
  // Reads sample i's stored bytes into an owned aligned buffer.
  Result<std::shared_ptr<std::byte[]>> ReadStored(uint64_t i, const format::SampleRecord& r) const;
  Status CheckChecksum(uint64_t i, const format::SampleRecord& r, const std::byte* stored) const;
  // Regions of sample i (record r, dims) within its stored bytes, or its tensors' places in the
  // raw payload for a whole-sample zstd sample (FieldRegions).
  Status Regions(uint64_t i, const format::SampleRecord& r, const std::vector<uint64_t>& dims,
                 std::vector<uint64_t>* offsets, std::vector<uint64_t>* sizes) const;
  // Writes "libshard: DIR: text" on stderr the first time it is called with `said` (a row range
  // read in a way the caller may not expect: whole samples, whole fields).
  void SayOnce(std::atomic<bool>* said, const std::string& text) const;
  // The stored bytes of sample i (record r) as read, checked against its block table: every
  // field's blocks recomputed and compared with the index's (FORMAT.md §3.10; Verify).
  Status CheckBlockTable(uint64_t i, const format::SampleRecord& r,
                         const std::vector<uint64_t>& dims, const std::byte* stored) const;
  // Checks the field checksums of `fields` (all when empty) over `bytes`, the sample's stored
  // bytes (or decoded payload for zstd) starting at byte `base_offset` of them (FORMAT.md §3.9).
  Status CheckFieldChecksums(uint64_t i, const format::SampleRecord& r,
                             const std::vector<uint64_t>& offsets,
                             const std::vector<uint64_t>& sizes, const std::byte* bytes,
                             uint64_t base_offset, uint64_t base_size,
                             std::span<const size_t> fields) const;

  std::string dir_;
  std::string index_path_;
  DatasetOptions options_;
  // The index (dataset/index_reader.h): never a mapping, so an index truncated or rewritten while
  // open cannot raise SIGBUS or change what readers get.
  std::unique_ptr<IndexReader> index_;
  std::vector<size_t> field_dim_start_;
  std::vector<uint8_t> codecs_;  // per field (FORMAT.md §4.3.1); empty when every field is raw
  std::vector<ShardInfo> shards_;
  DatasetProvenance provenance_;
  std::vector<io::File> shard_files_;
  uint64_t stored_bytes_ = 0;
  // Row-range reads said once that they read whole samples or fields (SayOnce).
  mutable std::atomic<bool> said_zstd_{false};
  mutable std::atomic<bool> said_no_blocks_{false};
  std::string notes_name_;      // SetNotes; "" for dir_
  std::string upgrade_advice_;  // SetNotes; "" for "run `libshard upgrade DIR`"
  std::string UpgradeAdvice() const {
    return upgrade_advice_.empty() ? "run `libshard upgrade " + dir_ + "`" : upgrade_advice_;
  }
};

}  // namespace libshard::internal
