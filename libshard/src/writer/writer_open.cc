// WriterImpl::Create, Resume (from the journal, FORMAT.md §6) and OpenForAppend.
#include "libshard/writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
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
#include "writer/identity_check.h"
#include "writer/writer_impl.h"

namespace libshard::writer_internal {

namespace {

// Parses "shard-NNNNN.lss" / "shard-NNNNN.lss.tmp"; false for other names.
bool ParseShardName(std::string_view name, uint64_t* number, bool* tmp) {
  *tmp = name.ends_with(kTmpSuffix);
  if (*tmp) name.remove_suffix(4);
  if (!name.starts_with("shard-") || !name.ends_with(".lss")) return false;
  std::string_view digits = name.substr(6, name.size() - 10);
  if (digits.empty() || digits.size() > 10) return false;
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  *number = n;
  return true;
}

// The writer configuration's checks (writer_config.h) of the parts a Writer takes, each setting
// named as the caller spells it.
Status ValidateOptions(const WriterOptions& o) {
  const OptionSpeller spell = [caller = o.caller](std::string_view row) {
    return SpellWriterOption(row, caller);
  };
  LIBSHARD_RETURN_IF_ERROR(ValidateEncoding(o, spell));
  LIBSHARD_RETURN_IF_ERROR(ValidateLayout(o, spell));
  return ValidateProvenance(o, spell);
}

// Checks codec ids read from a journal or an index against the schema's dtypes.
Status CheckCodecs(const Schema& schema, const std::vector<uint8_t>& codecs,
                   const std::string& where) {
  if (codecs.empty()) return Status::OK();
  if (codecs.size() != schema.fields.size())
    return Status::Corruption(where + ": " + std::to_string(codecs.size()) + " field codecs for " +
                              std::to_string(schema.fields.size()) + " fields");
  for (size_t f = 0; f < codecs.size(); ++f)
    if (codecs[f] > codec::kMaxCodecId ||
        !codec::CodecAccepts(static_cast<codec::CodecId>(codecs[f]), schema.fields[f].dtype))
      return Status::Corruption(where + ": field '" + schema.fields[f].name + "' has codec " +
                                std::to_string(codecs[f]) + ", which cannot store its dtype");
  return Status::OK();
}

// The lock the caller passed in WriterOptions (checked to be `dir`'s), else a fresh one.
Result<LockPtr> LockDataset(const std::string& dir, const WriterOptions& options,
                            bool create_directory) {
  if (!options.lock) return DatasetLock::Acquire(dir, create_directory, options.caller);
  if (!options.lock->Covers(dir))
    return Status::InvalidArgument("WriterOptions.lock is the lock of " + options.lock->dir() +
                                   ", not of " + dir);
  return options.lock;
}


}  // namespace

Result<std::unique_ptr<Writer>> WriterImpl::Create(const std::string& dir, const Schema& schema,
                                                   const WriterOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(schema.Validate());
  LIBSHARD_RETURN_IF_ERROR(ValidateOptions(options));
  LIBSHARD_ASSIGN_OR_RETURN(LockPtr lock, LockDataset(dir, options, /*create_directory=*/true));
  return CreateLocked(dir, schema, options, std::move(lock));
}

Result<std::unique_ptr<Writer>> WriterImpl::CreateLocked(const std::string& dir,
                                                         const Schema& schema,
                                                         const WriterOptions& options,
                                                         LockPtr lock) {
  if (internal::PathExists(JoinPath(dir, format::kManifestName)))
    return Status::AlreadyExists(dir + " already holds a dataset; add to it with "
                                 "Writer::OpenForAppend or choose an empty directory");
  if (internal::PathExists(JoinPath(dir, format::kJournalName)))
    return Status::AlreadyExists(dir + " holds an interrupted write (" + format::kJournalName +
                                 "); continue it with Writer::Resume or delete the directory");
  auto w = std::make_unique<WriterImpl>(dir, schema, options, Mode::kCreate);
  w->lock_ = std::move(lock);
  w->source_root_ = options.source_root;
  LIBSHARD_RETURN_IF_ERROR(w->RemoveShardsFrom(0));
  const std::string journal_path = JoinPath(dir, format::kJournalName);
  // The journal appears whole or not at all (written aside, fsynced and renamed): a job stopped
  // while writing its header (a full disk, an I/O error, a kill) leaves no journal, so
  // `pack --resume` starts it afresh instead of refusing a torn header (FORMAT.md §6).
  w->journal_field_checksums_ = true;  // new indexes are version 4 (FORMAT.md §3.9, §3.10)
  w->journal_block_tables_ = true;
  // The write's identity (FORMAT.md §6), before its journal: a journal never lacks it.
  LIBSHARD_RETURN_IF_ERROR(WriteIdentityFile(dir, options.attributes, options.fsync));
  const std::string header = format::EncodeJournalHeader(
      schema, w->codecs_, w->journal_field_checksums_, w->journal_block_tables_);
  LIBSHARD_RETURN_IF_ERROR(
      internal::WriteFileAtomically(dir, format::kJournalName, header, options.fsync));
  LIBSHARD_ASSIGN_OR_RETURN(io::OpenedFile journal_file,
                            io::OpenForWriting(journal_path, IoMode::kBuffered,
                                               io::Disposition::kExisting));
  w->journal_ = std::move(journal_file.file);
  w->journal_size_ = header.size();
  if (options.fsync) LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(dir));
  return std::unique_ptr<Writer>(std::move(w));
}

Result<std::unique_ptr<Writer>> WriterImpl::Resume(const std::string& dir,
                                                   const WriterOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(ValidateOptions(options));
  const std::string journal_path = JoinPath(dir, format::kJournalName);
  if (!internal::PathExists(dir))
    return Status::NotFound(dir + ": no such directory, so no " + format::kJournalName +
                            " to resume from; start a new write instead");
  LIBSHARD_ASSIGN_OR_RETURN(LockPtr lock, LockDataset(dir, options, /*create_directory=*/false));
  // What `dir` holds must have the identity this write declares (identity_check.h); a write of
  // another one is refused, or set aside with allow_identity_change.
  LIBSHARD_ASSIGN_OR_RETURN(Continuation found, CheckContinuationLocked(dir, options));
  if (!found.set_aside.empty()) return StartAfresh(dir, found, options, std::move(lock));
  if (internal::PathExists(JoinPath(dir, format::kManifestName))) {
    // Finish() committed but was interrupted before removing the journal: the dataset is
    // complete, so resuming means adding to it.
    LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(journal_path));
    return OpenForAppendLocked(dir, options, std::move(lock));
  }
  if (!internal::PathExists(journal_path))
    return Status::NotFound(dir + ": no " + format::kJournalName +
                            " to resume from (nothing was written, or the directory is not a "
                            "libshard output); start a new write instead");
  format::JournalContents journal;
  {
    LIBSHARD_ASSIGN_OR_RETURN(internal::MappedFile map, internal::MappedFile::Map(journal_path));
    LIBSHARD_ASSIGN_OR_RETURN(journal, format::ParseJournal(map.bytes(), journal_path));
  }
  LIBSHARD_RETURN_IF_ERROR(CheckCodecs(journal.schema, journal.codecs, journal_path));
  // The attributes recorded with the journal, and those given (which agree with them); a journal
  // of a libshard before identities gets the given ones recorded now.
  WriterOptions resumed = options;
  for (const auto& [key, value] : found.recorded) resumed.attributes.emplace(key, value);
  if (!found.recorded_known)
    LIBSHARD_RETURN_IF_ERROR(WriteIdentityFile(dir, resumed.attributes, options.fsync));
  auto w = std::make_unique<WriterImpl>(dir, journal.schema, resumed, Mode::kCreate);
  // The journal's codecs, whatever the options say: the resumed write continues the same job.
  w->codecs_ = journal.codecs;
  w->journal_field_checksums_ = journal.field_checksums;
  w->journal_block_tables_ = journal.block_tables;
  w->lock_ = std::move(lock);
  w->source_root_ = options.source_root;
  LIBSHARD_ASSIGN_OR_RETURN(io::OpenedFile journal_file,
                            io::OpenForWriting(journal_path, IoMode::kBuffered,
                                               io::Disposition::kExisting));
  w->journal_ = std::move(journal_file.file);
  LIBSHARD_RETURN_IF_ERROR(w->journal_.Truncate(journal.valid_size));
  w->journal_size_ = journal.valid_size;

  // The shards the journal describes: their durable sizes follow from the journaled samples.
  uint64_t shard_count = 0;
  for (const format::IndexSample& s : journal.samples)
    shard_count = std::max<uint64_t>(shard_count, uint64_t{s.record.shard} + 1);
  if (shard_count > kMaxShards)
    return Status::Corruption(journal_path + ": shard numbers exceed the limit");
  std::vector<uint64_t> ends(shard_count, format::kShardHeaderSize);
  std::vector<uint64_t> counts(shard_count, 0);
  for (const format::IndexSample& s : journal.samples) {
    uint64_t end = 0;
    if (!format::CheckedAdd(s.record.offset, s.record.stored_size, &end) ||
        !format::CheckedAlignUp(end, kSampleAlignment, &end))
      return Status::Corruption(journal_path + ": sample extent overflows");
    ends[s.record.shard] = std::max(ends[s.record.shard], end);
    ++counts[s.record.shard];
  }
  for (uint64_t k = 0; k < shard_count; ++k) {
    format::IndexShard shard{format::ShardFileName(static_cast<uint32_t>(k)), ends[k], counts[k]};
    const std::string final_path = JoinPath(dir, shard.name);
    const std::string tmp_path = final_path + kTmpSuffix;
    if (!internal::PathExists(tmp_path)) {
      // Finish() may have renamed it already before being interrupted.
      if (!internal::PathExists(final_path))
        return Status::Corruption(tmp_path + ": missing, but the journal describes " +
                                  std::to_string(counts[k]) + " samples in it; the interrupted "
                                  "write cannot be resumed, delete the directory and pack again");
      LIBSHARD_RETURN_IF_ERROR(internal::RenameFile(final_path, tmp_path));
    }
    LIBSHARD_ASSIGN_OR_RETURN(
        io::OpenedFile opened,
        io::OpenForWriting(tmp_path, IoMode::kBuffered, io::Disposition::kExisting));
    io::File& f = opened.file;
    LIBSHARD_ASSIGN_OR_RETURN(uint64_t size, f.Size());
    if (size < shard.file_size)
      return Status::Corruption(tmp_path + ": " + std::to_string(size) + " bytes, but the journal "
                                "describes samples up to byte " + std::to_string(shard.file_size) +
                                "; delete the directory and pack again");
    LIBSHARD_RETURN_IF_ERROR(f.Truncate(shard.file_size));
    // The shard keeps the uid its header was written with (FORMAT.md §4.1, §6).
    {
      std::vector<std::byte> header(format::kShardHeaderSize);
      LIBSHARD_RETURN_IF_ERROR(f.PReadExact(header.data(), header.size(), 0));
      LIBSHARD_RETURN_IF_ERROR(format::CheckShardHeader(header, tmp_path, &shard.uid));
    }
    w->shards_.push_back(std::move(shard));
    if (k + 1 == shard_count) {
      w->shard_ = std::move(opened);
      w->shard_samples_ = counts[k];
    }
  }
  LIBSHARD_RETURN_IF_ERROR(w->RemoveShardsFrom(shard_count));
  for (const format::IndexSample& s : journal.samples)
    w->existing_sources_.push_back(SourceFileInfo{s.source_path, s.record.source_bytes,
                                              s.record.source_mtime_ns, s.record.source_hash});
  w->samples_ = std::move(journal.samples);
  w->journaled_ = w->samples_.size();
  if (options.fsync) LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(dir));
  // The shards sealed before the interruption (all but the last, still open one) are sealed
  // again for WriterOptions::on_shard_sealed: an object store's target uploads what is not up.
  if (options.on_shard_sealed)
    for (uint32_t k = 0; k + 1 < shard_count; ++k)
      LIBSHARD_RETURN_IF_ERROR(options.on_shard_sealed(w->shards_[k].name, w->TmpPath(k)));
  return std::unique_ptr<Writer>(std::move(w));
}

Result<std::unique_ptr<Writer>> WriterImpl::OpenForAppend(const std::string& dir,
                                                          const WriterOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(ValidateOptions(options));
  // A missing `dir` is left to Dataset::Open's message (not created just to be locked).
  if (!internal::PathExists(dir)) return Dataset::Open(dir).status();
  LIBSHARD_ASSIGN_OR_RETURN(LockPtr lock, LockDataset(dir, options, /*create_directory=*/false));
  LIBSHARD_ASSIGN_OR_RETURN(Continuation found, CheckContinuationLocked(dir, options));
  if (!found.set_aside.empty()) return StartAfresh(dir, found, options, std::move(lock));
  return OpenForAppendLocked(dir, options, std::move(lock));
}

Result<std::unique_ptr<Writer>> WriterImpl::StartAfresh(const std::string& dir,
                                                        const Continuation& found,
                                                        const WriterOptions& options,
                                                        LockPtr lock) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<Writer> w,
                            CreateLocked(dir, found.schema, options, std::move(lock)));
  static_cast<WriterImpl*>(w.get())->set_aside_ = {found.set_aside};
  return w;
}

Result<std::unique_ptr<Writer>> WriterImpl::OpenForAppendLocked(const std::string& dir,
                                                                const WriterOptions& options,
                                                                LockPtr lock) {
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<Dataset> ds, Dataset::Open(dir));
  const std::string manifest_path = JoinPath(dir, format::kManifestName);
  LIBSHARD_ASSIGN_OR_RETURN(std::string text, internal::ReadWholeFile(manifest_path, 256u << 20));
  LIBSHARD_ASSIGN_OR_RETURN(format::Manifest manifest, format::ParseManifest(text, manifest_path));
  LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(JoinPath(dir, format::kJournalName)));

  auto w = std::make_unique<WriterImpl>(dir, ds->schema(), options, Mode::kAppend);
  w->codecs_ = ds->field_codecs();  // new samples are stored as the dataset's
  if (!AnyCodec(w->codecs_)) w->codecs_.clear();
  if (!w->codecs_.empty() && options.compression != Compression::kNone)
    return Status::InvalidArgument(dir + " stores its fields with field codecs (FORMAT.md §4.3), "
                                   "which exclude whole-sample zstd compression; append without "
                                   "it");
  w->lock_ = std::move(lock);
  w->source_root_ = options.source_root.empty() ? manifest.source_root : options.source_root;
  w->old_index_file_ = manifest.index_file;
  // The identity was checked by the caller (CheckContinuationLocked): the given attributes agree
  // with the dataset's, which it keeps.
  for (const auto& [key, value] : manifest.attributes) w->options_.attributes.emplace(key, value);
  for (const ShardInfo& s : ds->shards()) {
    std::string name = s.path.substr(s.path.find_last_of('/') + 1);
    w->shards_.push_back(format::IndexShard{std::move(name), s.size, s.samples, s.uid});
  }
  w->first_new_shard_ = static_cast<uint32_t>(w->shards_.size());
  LIBSHARD_RETURN_IF_ERROR(w->RemoveShardsFrom(w->shards_.size()));
  w->samples_.reserve(ds->size());
  for (uint64_t i = 0; i < ds->size(); ++i) {
    LIBSHARD_ASSIGN_OR_RETURN(format::IndexSample s, internal::SampleEntryFromDataset(*ds, i));
    w->existing_sources_.push_back(SourceFileInfo{s.source_path, s.record.source_bytes,
                                              s.record.source_mtime_ns, s.record.source_hash});
    w->samples_.push_back(std::move(s));
  }
  return std::unique_ptr<Writer>(std::move(w));
}

Status WriterImpl::RemoveShardsFrom(uint64_t first) {
  LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::string> names, internal::ListDirectory(dir_));
  for (const std::string& name : names) {
    uint64_t n = 0;
    bool tmp = false;
    if (ParseShardName(name, &n, &tmp) && n >= first)
      LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(JoinPath(dir_, name)));
  }
  return Status::OK();
}


}  // namespace libshard::writer_internal
