// WriterImpl::AppendEncoded and Finish: writing samples to the open shard, rolling to a new
// shard, sealing a shard (WriterOptions::on_shard_sealed), journal checkpoints (FORMAT.md §4, §6).
#include "libshard/writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "codec/field_codec.h"
#include "format/index.h"
#include "io/direct_io.h"
#include "io/file.h"
#include "io/filesystem.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index_common.h"
#include "format/journal.h"
#include "format/manifest.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"
#include "libshard/dataset.h"
#include "writer/buffer_pool.h"
#include "writer/commit.h"
#include "writer/writer_impl.h"

namespace libshard::writer_internal {

Status WriterImpl::OpenNewShard() {
  if (shards_.size() >= kMaxShards)
    return Status::ResourceExhausted(dir_ + ": more than " + std::to_string(kMaxShards) +
                                     " shards; use a larger shard size");
  const uint32_t number = static_cast<uint32_t>(shards_.size());
  // A fresh uid per shard (FORMAT.md §4.1): the index records it, and a reader refuses a shard
  // file whose header carries another (a shard of a different write).
  uint64_t uid = 0;
  if (options_.shard_uid_seed != 0) {
    uid = format::ShardUidFromSeed(options_.shard_uid_seed, number);
  } else {
    LIBSHARD_ASSIGN_OR_RETURN(uid, internal::RandomNonZeroU64());
  }
  shards_.push_back(
      format::IndexShard{format::ShardFileName(number), format::kShardHeaderSize, 0, uid});
  // Shards are written with O_DIRECT where the file system allows it: every write is a
  // 4 KiB-aligned extent from a 4 KiB-aligned buffer (FORMAT.md §4), and skipping the page cache
  // saves a copy of every byte and the cache churn of writing terabytes once.
  LIBSHARD_ASSIGN_OR_RETURN(
      shard_, io::OpenForWriting(TmpPath(number), IoMode::kAuto, io::Disposition::kCreateTruncate));
  const std::string header = format::EncodeShardHeader(number, uid);
  std::shared_ptr<std::byte[]> aligned = buffers_->Acquire(header.size());
  if (!aligned) return Status::ResourceExhausted(dir_ + ": cannot allocate a shard header");
  std::memcpy(aligned.get(), header.data(), header.size());
  LIBSHARD_RETURN_IF_ERROR(WriteShard(aligned.get(), header.size(), 0));
  shard_samples_ = 0;
  return Status::OK();
}

Status WriterImpl::WriteShard(const std::byte* data, uint64_t n, uint64_t offset) {
  return io::WriteWithFallback(&shard_, data, n, offset);
}

Status WriterImpl::CloseShard() {
  if (!shard_.file.valid()) return Status::OK();
  LIBSHARD_RETURN_IF_ERROR(Checkpoint());
  if (options_.fsync && mode_ == Mode::kAppend) LIBSHARD_RETURN_IF_ERROR(shard_.file.Sync());
  LIBSHARD_RETURN_IF_ERROR(shard_.file.Close());
  if (options_.on_shard_sealed)
    return options_.on_shard_sealed(shards_.back().name, TmpPath(static_cast<uint32_t>(shards_.size() - 1)));
  return Status::OK();
}

Status WriterImpl::Checkpoint() {
  if (!failed_.ok()) return failed_;
  if (finished_) return Status::OK();
  unjournaled_bytes_ = 0;
  if (mode_ != Mode::kCreate || journaled_ == samples_.size()) return Status::OK();
  if (options_.fsync && shard_.file.valid()) LIBSHARD_RETURN_IF_ERROR(shard_.file.Sync());
  const std::string entry = format::EncodeJournalSamples(
      schema_, journaled_, std::span<const format::IndexSample>(samples_).subspan(journaled_),
      codecs_, journal_field_checksums_, journal_block_tables_);
  LIBSHARD_RETURN_IF_ERROR(journal_.PWriteAll(entry.data(), entry.size(), journal_size_));
  if (options_.fsync) LIBSHARD_RETURN_IF_ERROR(journal_.Sync());
  journal_size_ += entry.size();
  journaled_ = samples_.size();
  return Status::OK();
}

Result<double> WriterImpl::CheckpointIfDue() {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  const double interval = options_.commit_interval_seconds;
  if (!failed_.ok()) return failed_;
  if (mode_ != Mode::kCreate || finished_ || journaled_ == samples_.size() || !(interval > 0))
    return kNever;
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                      unjournaled_since_).count();
  if (waited < interval) return interval - waited;
  Status st = Checkpoint();
  if (!st.ok()) return Fail(st);
  return kNever;
}

Status WriterImpl::AppendEncoded(EncodedSample sample) {
  if (finished_) return Status::InvalidArgument(dir_ + ": Writer::AppendEncoded after Finish");
  if (!failed_.ok()) return failed_;
  const size_t f_count = schema_.fields.size();
  if (sample.dims.size() != schema_.DimsPerSample() || sample.tensor_offsets.size() != f_count ||
      sample.tensor_sizes.size() != f_count || (sample.stored_size > 0 && !sample.stored_buffer) ||
      sample.field_stored_sizes.size() != (codecs_.empty() ? 0 : f_count))
    return Status::InvalidArgument(dir_ + ": EncodedSample does not match the schema (make it "
                                   "with Writer::Encode)");
  const uint64_t padded = format::AlignUp(sample.stored_size, kSampleAlignment);
  const uint64_t index = samples_.size();
  const auto now = std::chrono::steady_clock::now();
  if (journaled_ == index) unjournaled_since_ = now;  // the oldest sample the journal lacks
  if (index >= kMaxSamples)
    return Status::ResourceExhausted(dir_ + ": more than " + std::to_string(kMaxSamples) +
                                     " samples");
  // Roll when the open shard already has a sample and this one would pass shard_size; a sample
  // is never split, and one larger than shard_size gets a shard of its own.
  if (shard_.file.valid() && shard_samples_ > 0 &&
      shards_.back().file_size + padded > options_.shard_size) {
    Status st = CloseShard();
    if (!st.ok()) return Fail(st);
  }
  if (!shard_.file.valid()) {
    Status st = OpenNewShard();
    if (!st.ok()) return Fail(st);
  }
  format::IndexShard& shard = shards_.back();
  if (padded > 0) {
    Status st = WriteShard(sample.stored_buffer.get(), padded, shard.file_size);
    if (!st.ok()) return Fail(st.WithContext("sample " + std::to_string(index)));
  }
  format::IndexSample s;
  s.record.offset = shard.file_size;
  s.record.stored_size = sample.stored_size;
  s.record.raw_size = sample.raw_size;
  s.record.checksum = sample.checksum;
  s.record.shard = static_cast<uint32_t>(shards_.size() - 1);
  s.record.flags = sample.flags;
  s.record.length = sample.length;
  s.record.source_bytes = sample.source.size;
  s.record.source_mtime_ns = sample.source.mtime_ns;
  s.record.source_hash = sample.source.content_hash;
  s.dims = std::move(sample.dims);
  s.tensor_offsets = std::move(sample.tensor_offsets);
  s.tensor_sizes = std::move(sample.tensor_sizes);
  s.field_stored_sizes = std::move(sample.field_stored_sizes);
  s.field_checksums = std::move(sample.field_checksums);
  s.block_table = std::move(sample.block_table);
  LIBSHARD_RETURN_IF_ERROR(format::EncodeMetadata(sample.metadata, &s.metadata));
  s.source_path = std::move(sample.source.path);
  samples_.push_back(std::move(s));
  shard.file_size += padded;
  ++shard.sample_count;
  ++shard_samples_;
  unjournaled_bytes_ += padded;
  const double interval = options_.commit_interval_seconds;
  if (unjournaled_bytes_ >= options_.journal_every_bytes ||
      (interval > 0 && std::chrono::duration<double>(now - unjournaled_since_).count() >= interval)) {
    Status st = Checkpoint();
    if (!st.ok()) return Fail(st);
  }
  return Status::OK();
}

Result<WriteSummary> WriterImpl::Finish() {
  if (finished_) return Status::InvalidArgument(dir_ + ": Writer::Finish called twice");
  if (!failed_.ok()) return failed_;
  LIBSHARD_RETURN_IF_ERROR(CloseShard());
  for (uint32_t k = first_new_shard_; k < shards_.size(); ++k)
    LIBSHARD_RETURN_IF_ERROR(internal::RenameFile(TmpPath(k), JoinPath(dir_, shards_[k].name)));
  if (options_.fsync) LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(dir_));

  internal::CommitRequest req;
  req.dir = dir_;
  req.schema = schema_;
  req.shards = shards_;
  req.samples = &samples_;
  req.index_file = old_index_file_ == "index.lsi" ? "index.a.lsi" : "index.lsi";
  req.old_index_file = old_index_file_;
  req.source_root = source_root_;
  req.created_by = options_.created_by;
  req.attributes = options_.attributes;
  req.fsync = options_.fsync;
  for (uint8_t c : codecs_) req.codecs.push_back(format::FieldCodec{c, {}});
  LIBSHARD_ASSIGN_OR_RETURN(WriteSummary summary, internal::CommitDataset(req));
  if (journal_.valid()) {
    LIBSHARD_RETURN_IF_ERROR(journal_.Close());
    LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(JoinPath(dir_, format::kJournalName)));
    // The manifest records the identity now (FORMAT.md §2.2, §6).
    LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(JoinPath(dir_, kIdentityFileName)));
    if (options_.fsync) LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(dir_));
  }
  finished_ = true;
  lock_.reset();  // committed and cleaned up: the next writer may start
  return summary;
}


}  // namespace libshard::writer_internal
