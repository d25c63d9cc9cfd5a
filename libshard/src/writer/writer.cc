// Writer: Create / Resume / OpenForAppend, Encode, AppendEncoded, Finish (FORMAT.md §2.3, §4, §6).
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
#include "io/s3_client.h"
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
#include "remote/s3_writer.h"
#include "writer/commit.h"

namespace libshard {

namespace {

using internal::JoinPath;

constexpr const char* kTmpSuffix = ".tmp";

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

Status ValidateOptions(const WriterOptions& o) {
  if (o.shard_size == 0) return Status::InvalidArgument("WriterOptions.shard_size must be > 0");
  if (o.compression != Compression::kNone && o.compression != Compression::kZstd)
    return Status::InvalidArgument("WriterOptions.compression is not a known value");
  LIBSHARD_RETURN_IF_ERROR(ValidateAttributes(o.attributes).WithContext("WriterOptions.attributes"));
  if (o.zstd_level < kMinZstdLevel || o.zstd_level > kMaxZstdLevel)
    return Status::InvalidArgument("WriterOptions.zstd_level " + std::to_string(o.zstd_level) +
                                   " is not in " + std::to_string(kMinZstdLevel) + ".." +
                                   std::to_string(kMaxZstdLevel));
  if (o.field_codecs != FieldCodecPolicy::kNone && o.field_codecs != FieldCodecPolicy::kAuto &&
      o.field_codecs != FieldCodecPolicy::kPlanes)
    return Status::InvalidArgument("WriterOptions.field_codecs is not a known value");
  const bool codecs = o.field_codecs != FieldCodecPolicy::kNone || o.store_fp8;
  if (codecs && o.compression != Compression::kNone)
    return Status::InvalidArgument("field codecs (compress auto/planes, store_dtype "
                                   "float8_e4m3fn) and whole-sample zstd compression are "
                                   "exclusive (FORMAT.md §3.8.6); choose one");
  return Status::OK();
}

bool AnyCodec(const std::vector<uint8_t>& codecs) {
  return std::any_of(codecs.begin(), codecs.end(), [](uint8_t c) { return c != 0; });
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

enum class Mode { kCreate, kAppend };

using LockPtr = std::shared_ptr<const DatasetLock>;

// The lock the caller passed in WriterOptions (checked to be `dir`'s), else a fresh one.
Result<LockPtr> LockDataset(const std::string& dir, const WriterOptions& options,
                            bool create_directory) {
  if (!options.lock) return DatasetLock::Acquire(dir, create_directory);
  if (!options.lock->Covers(dir))
    return Status::InvalidArgument("WriterOptions.lock is the lock of " + options.lock->dir() +
                                   ", not of " + dir);
  return options.lock;
}

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
  // OpenForAppend with the dataset lock already held (Resume of a committed job).
  static Result<std::unique_ptr<Writer>> OpenForAppendLocked(const std::string& dir,
                                                             const WriterOptions& options,
                                                             LockPtr lock);

  Result<EncodedSample> Encode(const SampleInput& sample) const override;
  Status AppendEncoded(EncodedSample sample) override;
  Status Append(const SampleInput& sample) override {
    LIBSHARD_ASSIGN_OR_RETURN(EncodedSample e, Encode(sample));
    return AppendEncoded(std::move(e));
  }
  Result<WriteSummary> Finish() override;

  const Schema& schema() const override { return schema_; }
  uint64_t samples_written() const override { return samples_.size(); }
  const std::vector<Provenance>& existing_sources() const override { return existing_sources_; }

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
  // Makes every appended sample durable and journals it (FORMAT.md §6).
  Status Checkpoint();
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
  std::vector<format::IndexShard> shards_;
  std::vector<format::IndexSample> samples_;
  std::vector<Provenance> existing_sources_;
  uint32_t first_new_shard_ = 0;  // shards before this one belong to the existing dataset
  io::OpenedFile shard_;         // the open shard (the last of shards_) when shard_.file.valid()
  uint64_t shard_samples_ = 0;    // samples in the open shard
  io::File journal_;             // only in kCreate mode
  uint64_t journal_size_ = 0;
  uint64_t journaled_ = 0;        // samples described by the journal
  uint64_t unjournaled_bytes_ = 0;
  std::string old_index_file_;
  std::string source_root_;
  Status failed_;                 // sticky: after a failed write the writer refuses more
  bool finished_ = false;
};

Result<std::unique_ptr<Writer>> WriterImpl::Create(const std::string& dir, const Schema& schema,
                                                   const WriterOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(schema.Validate());
  LIBSHARD_RETURN_IF_ERROR(ValidateOptions(options));
  LIBSHARD_ASSIGN_OR_RETURN(LockPtr lock, LockDataset(dir, options, /*create_directory=*/true));
  if (internal::PathExists(JoinPath(dir, format::kManifestName)))
    return Status::AlreadyExists(dir + " already holds a dataset; add to it with "
                                 "Writer::OpenForAppend (libshard pack --append) or choose an "
                                 "empty directory");
  if (internal::PathExists(JoinPath(dir, format::kJournalName)))
    return Status::AlreadyExists(dir + " holds an interrupted write (" + format::kJournalName +
                                 "); continue it with Writer::Resume (libshard pack --resume) "
                                 "or delete the directory");
  auto w = std::make_unique<WriterImpl>(dir, schema, options, Mode::kCreate);
  w->lock_ = std::move(lock);
  w->source_root_ = options.source_root;
  LIBSHARD_RETURN_IF_ERROR(w->RemoveShardsFrom(0));
  const std::string journal_path = JoinPath(dir, format::kJournalName);
  // The journal appears whole or not at all (written aside, fsynced and renamed): a job stopped
  // while writing its header (a full disk, an I/O error, a kill) leaves no journal, so
  // `pack --resume` starts it afresh instead of refusing a torn header (FORMAT.md §6).
  w->journal_field_checksums_ = true;  // new indexes are version 3 (FORMAT.md §3.9)
  const std::string header =
      format::EncodeJournalHeader(schema, w->codecs_, w->journal_field_checksums_);
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
  auto w = std::make_unique<WriterImpl>(dir, journal.schema, options, Mode::kCreate);
  // The journal's codecs, whatever the options say: the resumed write continues the same job.
  w->codecs_ = journal.codecs;
  w->journal_field_checksums_ = journal.field_checksums;
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
    w->existing_sources_.push_back(Provenance{s.source_path, s.record.source_bytes,
                                              s.record.source_mtime_ns, s.record.source_hash});
  w->samples_ = std::move(journal.samples);
  w->journaled_ = w->samples_.size();
  if (options.fsync) LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(dir));
  return std::unique_ptr<Writer>(std::move(w));
}

Result<std::unique_ptr<Writer>> WriterImpl::OpenForAppend(const std::string& dir,
                                                          const WriterOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(ValidateOptions(options));
  // A missing `dir` is left to Dataset::Open's message (not created just to be locked).
  if (!internal::PathExists(dir)) return Dataset::Open(dir).status();
  LIBSHARD_ASSIGN_OR_RETURN(LockPtr lock, LockDataset(dir, options, /*create_directory=*/false));
  return OpenForAppendLocked(dir, options, std::move(lock));
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
    return Status::InvalidArgument(dir + " stores its fields with field codecs (FORMAT.md §4.3); "
                                   "append without --compress zstd");
  w->lock_ = std::move(lock);
  w->source_root_ = options.source_root.empty() ? manifest.source_root : options.source_root;
  w->old_index_file_ = manifest.index_file;
  for (const auto& [key, value] : options.attributes) {
    auto it = manifest.attributes.find(key);
    if (it != manifest.attributes.end() && it->second != value)
      return Status::InvalidArgument(dir + " was made with " + key + "='" +
                                     AttributeText(it->second) + "'; adding samples made with '" +
                                     AttributeText(value) + "' would mix two setups in one "
                                     "dataset; write them to another directory");
  }
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
    w->existing_sources_.push_back(Provenance{s.source_path, s.record.source_bytes,
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

Result<EncodedSample> WriterImpl::Encode(const SampleInput& sample) const {
  const std::string where = sample.source.path.empty()
                                ? std::string("sample")
                                : "source '" + sample.source.path + "'";
  const size_t f_count = schema_.fields.size();
  std::vector<const TensorInput*> by_field(f_count, nullptr);
  for (const TensorInput& t : sample.tensors) {
    auto f = schema_.Find(t.name);
    if (!f)
      return Status::InvalidArgument(where + ": tensor '" + t.name +
                                     "' is not a field of the dataset's schema");
    if (by_field[*f])
      return Status::InvalidArgument(where + ": tensor '" + t.name + "' is given twice");
    by_field[*f] = &t;
  }
  EncodedSample out;
  out.dims.reserve(schema_.DimsPerSample());
  for (size_t f = 0; f < f_count; ++f) {
    const Field& field = schema_.fields[f];
    const TensorInput* t = by_field[f];
    const std::string fw = where + ": field '" + field.name + "'";
    if (!t) return Status::InvalidArgument(fw + " is missing");
    if (t->dtype != field.dtype)
      return Status::InvalidArgument(fw + ": dtype " + std::string(DTypeName(t->dtype)) +
                                     " != schema dtype " + std::string(DTypeName(field.dtype)));
    if (t->shape.size() != field.rank)
      return Status::InvalidArgument(fw + ": rank " + std::to_string(t->shape.size()) +
                                     " != schema rank " + std::to_string(field.rank));
    // An empty tensor needs neither (an empty std::vector's data() may be null).
    if ((t->data != nullptr && t->fill) ||
        (t->data == nullptr && !t->fill && NumElements(t->shape) != 0))
      return Status::InvalidArgument(fw + ": exactly one of TensorInput.data and .fill must be set");
    out.dims.insert(out.dims.end(), t->shape.begin(), t->shape.end());
  }
  if (sample.source.path.size() > kMaxSourcePathBytes)
    return Status::InvalidArgument(where + ": source path longer than " +
                                   std::to_string(kMaxSourcePathBytes) + " bytes");
  {
    std::string encoded;
    Status st = format::EncodeMetadata(sample.metadata, &encoded);
    if (!st.ok()) return st.WithContext(where);
  }
  format::PayloadLayout layout;
  {
    Status st = format::ComputeLayout(schema_, out.dims, &layout);
    if (!st.ok()) return st.WithContext(where);
  }
  const uint64_t raw_size = layout.raw_size;
  const uint64_t padded = format::AlignUp(raw_size, kSampleAlignment);
  std::shared_ptr<std::byte[]> raw = buffers_->Acquire(raw_size);
  if (!raw)
    return Status::ResourceExhausted(where + ": cannot allocate " + std::to_string(raw_size) +
                                     " bytes for the sample");
  // Zero the gaps between tensors and the padding; the tensors are written once, by the caller.
  uint64_t pos = 0;
  for (size_t f = 0; f < f_count; ++f) {
    std::memset(raw.get() + pos, 0, layout.offsets[f] - pos);
    pos = layout.offsets[f] + layout.sizes[f];
  }
  std::memset(raw.get() + pos, 0, std::max<uint64_t>(padded, kSampleAlignment) - pos);
  for (size_t f = 0; f < f_count; ++f) {
    const TensorInput* t = by_field[f];
    std::byte* dst = raw.get() + layout.offsets[f];
    if (!t->fill) {
      if (layout.sizes[f]) std::memcpy(dst, t->data, layout.sizes[f]);
    } else {
      Status st = t->fill(std::span<std::byte>(dst, layout.sizes[f]));
      if (!st.ok()) return st.WithContext(where + ": field '" + schema_.fields[f].name + "'");
    }
  }
  out.tensor_offsets = layout.offsets;
  out.tensor_sizes = layout.sizes;
  out.raw_size = raw_size;
  // Field checksums (FORMAT.md §3.9): over the tensors of the raw payload, which are the stored
  // regions of a raw sample and what a whole-sample zstd sample decodes to; EncodeFields
  // replaces them by the stored regions' for field codecs.
  out.field_checksums.resize(f_count);
  for (size_t f = 0; f < f_count; ++f)
    out.field_checksums[f] = format::FieldChecksum(raw.get() + layout.offsets[f], layout.sizes[f]);
  out.stored_buffer = raw;
  out.stored_size = raw_size;
  if (!codecs_.empty()) {
    Status st = EncodeFields(layout, out.dims, raw.get(), &out);
    if (!st.ok()) return st.WithContext(where);
  } else if (options_.compression == Compression::kZstd && raw_size > 0) {
    std::shared_ptr<std::byte[]> shuffled;
    const std::byte* src = raw.get();
    if (shuffle_) {
      shuffled = internal::AllocateAligned(raw_size, kTensorAlignment);
      if (!shuffled) return Status::ResourceExhausted(where + ": cannot allocate a shuffle buffer");
      format::ShufflePayload(schema_, layout, raw.get(), shuffled.get(), /*inverse=*/false);
      src = shuffled.get();
    }
    const uint64_t bound = format::ZstdBound(raw_size);
    std::shared_ptr<std::byte[]> comp = internal::AllocateAligned(bound, kSampleAlignment);
    if (!comp) return Status::ResourceExhausted(where + ": cannot allocate a compression buffer");
    uint64_t frame = 0;
    Status st = format::ZstdCompress({src, raw_size}, {comp.get(), bound}, options_.zstd_level,
                                     &frame);
    if (!st.ok()) return st.WithContext(where);
    // Keep the frame only when it saves at least 3% (FORMAT.md §4.2).
    if (frame * 100 <= raw_size * 97) {
      std::memset(comp.get() + frame, 0, format::AlignUp(frame, kSampleAlignment) - frame);
      out.stored_buffer = std::move(comp);
      out.stored_size = frame;
      out.flags = format::kFlagZstd | (shuffle_ ? format::kFlagByteShuffle : 0);
    }
  }
  out.checksum = format::Xxh3(out.stored_buffer.get(), out.stored_size);
  if (schema_.length_field >= 0) {
    uint64_t start = 0;
    for (int32_t f = 0; f < schema_.length_field; ++f) start += schema_.fields[f].rank;
    out.length = out.dims[start + schema_.fields[schema_.length_field].seq_dim];
  }
  out.metadata = sample.metadata;
  out.source = sample.source;
  return out;
}

Status WriterImpl::EncodeFields(const format::PayloadLayout& layout,
                                const std::vector<uint64_t>& dims, const std::byte* raw,
                                EncodedSample* out) const {
  // Encoder output, one per thread and field (reused: pack encodes on its worker threads).
  thread_local std::vector<std::vector<std::byte>> regions;
  const size_t f_count = schema_.fields.size();
  if (regions.size() < f_count) regions.resize(f_count);
  out->field_stored_sizes.assign(f_count, 0);
  std::vector<uint64_t> stored_sizes(f_count, 0);
  const codec::EncodeOptions eo;
  size_t dim = 0;
  for (size_t f = 0; f < f_count; ++f) {
    const Field& field = schema_.fields[f];
    std::span<const uint64_t> shape(dims.data() + dim, field.rank);
    dim += field.rank;
    if (codecs_[f] == 0) continue;
    LIBSHARD_ASSIGN_OR_RETURN(codec::FieldGeometry g,
                              codec::GeometryOf(field.dtype, shape, field.seq_dim));
    regions[f].clear();
    Status st = codec::Encode(static_cast<codec::CodecId>(codecs_[f]), g,
                              {raw + layout.offsets[f], layout.sizes[f]}, eo, &regions[f]);
    if (!st.ok()) return st.WithContext("field '" + field.name + "'");
    stored_sizes[f] = regions[f].size();
    out->field_stored_sizes[f] = regions[f].size();
  }
  std::vector<format::FieldCodec> fc;
  for (uint8_t c : codecs_) fc.push_back(format::FieldCodec{c, {}});
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  if (!format::ComputeStoredLayout(fc, layout.sizes, stored_sizes, &offsets, &total) ||
      total > kMaxSampleBytes)
    return Status::InvalidArgument("stored sample exceeds " + std::to_string(kMaxSampleBytes) +
                                   " bytes");
  const uint64_t padded = std::max<uint64_t>(format::AlignUp(total, kSampleAlignment),
                                             kSampleAlignment);
  std::shared_ptr<std::byte[]> stored = buffers_->Acquire(padded);
  if (!stored)
    return Status::ResourceExhausted("cannot allocate " + std::to_string(padded) +
                                     " bytes for the stored sample");
  uint64_t pos = 0;
  for (size_t f = 0; f < f_count; ++f) {
    std::memset(stored.get() + pos, 0, offsets[f] - pos);
    const uint64_t n = codecs_[f] == 0 ? layout.sizes[f] : stored_sizes[f];
    const std::byte* src = codecs_[f] == 0 ? raw + layout.offsets[f] : regions[f].data();
    if (n) std::memcpy(stored.get() + offsets[f], src, n);
    out->field_checksums[f] = format::FieldChecksum(src, n);  // FORMAT.md §3.9: stored region
    pos = offsets[f] + n;
  }
  std::memset(stored.get() + pos, 0, padded - pos);
  out->stored_buffer = std::move(stored);
  out->stored_size = total;
  return Status::OK();
}

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
  unjournaled_bytes_ = 0;
  if (mode_ != Mode::kCreate || journaled_ == samples_.size()) return Status::OK();
  if (options_.fsync && shard_.file.valid()) LIBSHARD_RETURN_IF_ERROR(shard_.file.Sync());
  const std::string entry = format::EncodeJournalSamples(
      schema_, journaled_, std::span<const format::IndexSample>(samples_).subspan(journaled_),
      codecs_, journal_field_checksums_);
  LIBSHARD_RETURN_IF_ERROR(journal_.PWriteAll(entry.data(), entry.size(), journal_size_));
  if (options_.fsync) LIBSHARD_RETURN_IF_ERROR(journal_.Sync());
  journal_size_ += entry.size();
  journaled_ = samples_.size();
  return Status::OK();
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
  LIBSHARD_RETURN_IF_ERROR(format::EncodeMetadata(sample.metadata, &s.metadata));
  s.source_path = std::move(sample.source.path);
  samples_.push_back(std::move(s));
  shard.file_size += padded;
  ++shard.sample_count;
  ++shard_samples_;
  unjournaled_bytes_ += padded;
  if (unjournaled_bytes_ >= options_.journal_every_bytes) {
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
    if (options_.fsync) LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(dir_));
  }
  finished_ = true;
  lock_.reset();  // committed and cleaned up: the next writer may start
  return summary;
}

}  // namespace

std::vector<uint8_t> ChooseFieldCodecs(const Schema& schema, FieldCodecPolicy policy,
                                       bool store_fp8) {
  std::vector<uint8_t> out(schema.fields.size(), 0);
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const Field& field = schema.fields[f];
    const bool half = field.dtype == DType::kBFloat16 || field.dtype == DType::kFloat16;
    if (store_fp8 && half && field.seq_dim >= 0 && field.rank >= 2) {
      out[f] = static_cast<uint8_t>(policy == FieldCodecPolicy::kNone ? codec::CodecId::kFp8
                                                                     : codec::CodecId::kFp8Entropy);
    } else if (policy == FieldCodecPolicy::kNone) {
      out[f] = 0;
    } else if (half) {
      out[f] = static_cast<uint8_t>(codec::CodecId::kPlanes);
    } else if (policy == FieldCodecPolicy::kAuto &&
               codec::CodecAccepts(codec::CodecId::kZstd, field.dtype)) {
      out[f] = static_cast<uint8_t>(codec::CodecId::kZstd);
    }
  }
  return out;
}

// An s3:// output is written through a local staging directory and uploaded (remote/s3_writer.h).
Result<std::unique_ptr<Writer>> Writer::Create(const std::string& dir, const Schema& schema,
                                               const WriterOptions& options) {
  if (io::IsS3Url(dir)) return remote::CreateS3Writer(dir, schema, options);
  return WriterImpl::Create(dir, schema, options);
}

Result<std::unique_ptr<Writer>> Writer::Resume(const std::string& dir,
                                               const WriterOptions& options) {
  if (io::IsS3Url(dir)) return remote::ResumeS3Writer(dir, options);
  return WriterImpl::Resume(dir, options);
}

Result<std::unique_ptr<Writer>> Writer::OpenForAppend(const std::string& dir,
                                                      const WriterOptions& options) {
  if (io::IsS3Url(dir))
    return Status::Unsupported(dir + ": appending to an s3:// dataset is not supported; write "
                               "the new samples to another prefix, or append locally and upload");
  return WriterImpl::OpenForAppend(dir, options);
}

}  // namespace libshard
