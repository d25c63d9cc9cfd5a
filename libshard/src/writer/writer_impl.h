// WriterImpl: the local-directory Writer (FORMAT.md §2.3, §4, §6), shared by the files that
// implement it: writer_open.cc (Create, Resume from the journal, OpenForAppend),
// writer_encode.cc (Encode, field codecs, zstd), writer_shards.cc (AppendEncoded, rolling and
// sealing shards, journal checkpoints, Finish). writer.cc holds the public Writer entry points.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "format/index.h"
#include "format/payload.h"
#include "io/direct_io.h"
#include "io/file.h"
#include "io/filesystem.h"
#include "libshard/dataset_lock.h"
#include "libshard/writer.h"
#include "writer/buffer_pool.h"
#include "writer/identity_check.h"

namespace libshard::writer_internal {

using internal::JoinPath;

inline constexpr const char* kTmpSuffix = ".tmp";

inline bool AnyCodec(const std::vector<uint8_t>& codecs) {
  return std::any_of(codecs.begin(), codecs.end(), [](uint8_t c) { return c != 0; });
}

enum class Mode { kCreate, kAppend };

using LockPtr = std::shared_ptr<const DatasetLock>;

class WriterImpl final : public Writer {
 public:
  WriterImpl(std::string dir, Schema schema, WriterOptions options, Mode mode)
      : dir_(std::move(dir)), schema_(std::move(schema)), options_(std::move(options)),
        mode_(mode), shuffle_(format::HasShuffledFields(schema_)) {
    if (mode == Mode::kCreate)
      codecs_ = ChooseFieldCodecs(schema_, options_.field_codecs, options_.store_fp8);
    if (!AnyCodec(codecs_)) codecs_.clear();
  }

  static Result<std::unique_ptr<Writer>> Create(const std::string& dir, const Schema& schema,
                                                const WriterOptions& options);
  static Result<std::unique_ptr<Writer>> Resume(const std::string& dir,
                                                const WriterOptions& options);
  static Result<std::unique_ptr<Writer>> OpenForAppend(const std::string& dir,
                                                       const WriterOptions& options);
  // OpenForAppend with the dataset lock already held and the identity checked (Resume of a
  // committed job).
  static Result<std::unique_ptr<Writer>> OpenForAppendLocked(const std::string& dir,
                                                             const WriterOptions& options,
                                                             LockPtr lock);
  // Create with the dataset lock already held.
  static Result<std::unique_ptr<Writer>> CreateLocked(const std::string& dir, const Schema& schema,
                                                      const WriterOptions& options, LockPtr lock);
  // After what `dir` held was set aside (Continuation::set_aside): a new write of its schema.
  static Result<std::unique_ptr<Writer>> StartAfresh(const std::string& dir,
                                                     const Continuation& found,
                                                     const WriterOptions& options, LockPtr lock);

  Result<EncodedSample> Encode(const SampleInput& sample) const override;
  Status AppendEncoded(EncodedSample sample) override;
  Status Append(const SampleInput& sample) override {
    LIBSHARD_ASSIGN_OR_RETURN(EncodedSample e, Encode(sample));
    return AppendEncoded(std::move(e));
  }
  Result<WriteSummary> Finish() override;
  Status Checkpoint() override;
  Result<double> CheckpointIfDue() override;

  const Schema& schema() const override { return schema_; }
  uint64_t samples_written() const override { return samples_.size(); }
  const std::vector<SourceFileInfo>& existing_sources() const override { return existing_sources_; }
  std::vector<std::string> set_aside() const override { return set_aside_; }

 private:
  std::string TmpPath(uint32_t shard) const {
    return JoinPath(dir_, shards_[shard].name) + kTmpSuffix;
  }
  Status OpenNewShard();
  // Lays out the stored regions of the sample whose raw payload is `raw` (FORMAT.md §3.8.4,
  // §4.3) into out->stored_buffer / stored_size / field_stored_sizes.
  Status EncodeFields(const format::PayloadLayout& layout, const std::vector<uint64_t>& dims,
                      const std::byte* raw, EncodedSample* out) const;
  // pwrite of a 4 KiB-aligned extent to the open shard (io::WriteWithFallback: buffered when
  // the file system refuses O_DIRECT writes).
  Status WriteShard(const std::byte* data, uint64_t n, uint64_t offset);
  Status CloseShard();
  // Removes shard files numbered >= `first` (leftovers of an interrupted run).
  Status RemoveShardsFrom(uint64_t first);
  Status Fail(Status st) {
    failed_ = st;
    return st;
  }

  // Declared first so that it is released last, after every file below is closed.
  LockPtr lock_;
  std::string dir_;
  Schema schema_;
  WriterOptions options_;
  // Sample buffers are reused across Encode calls (FORMAT-independent; see buffer_pool.h).
  std::shared_ptr<internal::BufferPool> buffers_ = internal::BufferPool::Create(uint64_t{1} << 30);
  Mode mode_;
  bool shuffle_;
  // Per field codec id (FORMAT.md §4.3.1); empty when every field is raw.
  std::vector<uint8_t> codecs_;
  // The journal's header flag (FORMAT.md §6): its sample entries carry field checksums.
  bool journal_field_checksums_ = false;
  // The journal's header flag (FORMAT.md §6): its sample entries carry block tables (§3.10).
  bool journal_block_tables_ = false;
  std::vector<format::IndexShard> shards_;
  std::vector<format::IndexSample> samples_;
  std::vector<SourceFileInfo> existing_sources_;
  std::vector<std::string> set_aside_;  // what Resume / OpenForAppend set aside (identity)
  uint32_t first_new_shard_ = 0;  // shards before this one belong to the existing dataset
  io::OpenedFile shard_;         // the open shard (the last of shards_) when shard_.file.valid()
  uint64_t shard_samples_ = 0;    // samples in the open shard
  io::File journal_;             // only in kCreate mode
  uint64_t journal_size_ = 0;
  uint64_t journaled_ = 0;        // samples described by the journal
  uint64_t unjournaled_bytes_ = 0;
  // When the oldest sample not yet journaled was appended (commit_interval_seconds).
  std::chrono::steady_clock::time_point unjournaled_since_;
  std::string old_index_file_;
  std::string source_root_;
  Status failed_;                 // sticky: after a failed write the writer refuses more
  bool finished_ = false;
};


}  // namespace libshard::writer_internal
