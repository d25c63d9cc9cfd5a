// Dataset::Open and random access (FORMAT.md §2.2, §3.7, §4).
#include "libshard/dataset.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <thread>

#include "codec/field_codec.h"
#include "format/index.h"
#include "io/direct_io.h"
#include "dataset/index_reader.h"
#include "io/file.h"
#include "io/filesystem.h"
#include "io/s3_client.h"
#include "remote/remote_dataset.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/journal.h"
#include "format/manifest.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"

namespace libshard {

namespace {

using internal::IndexReader;

constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
constexpr const char* kRepack = "; the dataset is damaged, re-run libshard pack";

// One shard file opened and checked at Open (§4.1, §3.7).
struct OpenedShard {
  Status status;
  ShardInfo info;
  std::optional<io::File> file;
};

void OpenShard(const std::string& dir, const format::IndexShard& s, bool check_uid,
               OpenedShard* out) {
  const std::string path = internal::JoinPath(dir, s.name);
  Result<io::OpenedFile> file = io::OpenForReading(path, IoMode::kBuffered);
  if (!file.ok()) {
    out->status = Status(file.status().code(), file.status().message() +
                                                   " (a shard named by the index is missing)" +
                                                   kRepack);
    return;
  }
  Result<uint64_t> size = file->file.Size();
  if (!size.ok()) {
    out->status = size.status();
    return;
  }
  if (*size != s.file_size) {
    out->status = Status::Corruption(
        path + ": size " + std::to_string(*size) + " != " + std::to_string(s.file_size) +
        " recorded in the index (" + (*size < s.file_size ? "truncated" : "extended or replaced") +
        ")" + kRepack);
    return;
  }
  std::vector<std::byte> header(format::kShardHeaderSize);
  out->status = file->file.PReadExact(header.data(), header.size(), 0);
  if (!out->status.ok()) return;
  uint64_t uid = 0;
  out->status = format::CheckShardHeader(header, path, &uid);
  if (!out->status.ok()) return;
  // Shard ownership (§3.7): a shard file is served only as part of the dataset it was written
  // for. Indexes without uids (written before the uid revision) are not checked.
  if (check_uid && uid != s.uid) {
    out->status = Status::Corruption(
        path + ": shard was written for another dataset (uid " + format::Hex16(uid) +
        ", index expects " + format::Hex16(s.uid) + "); the directory mixes two writers' " +
        "output — re-run libshard pack into an empty directory");
    return;
  }
  out->info = ShardInfo{path, s.file_size, s.sample_count, uid};
  out->file.emplace(std::move(file->file));
}

// Opens every shard, up to kOpenThreads at once. No exception leaves a thread: a failure (also
// an allocation failure) becomes that shard's status; where no thread can be started, the
// remaining shards are opened on the calling thread.
void OpenShardsInParallel(const std::string& dir, const std::vector<format::IndexShard>& shards,
                          bool check_uid, std::vector<OpenedShard>* out) {
  constexpr size_t kOpenThreads = 8;
  std::atomic<size_t> next{0};
  auto work = [&]() noexcept {
    for (size_t k = next.fetch_add(1); k < shards.size(); k = next.fetch_add(1)) {
      try {
        OpenShard(dir, shards[k], check_uid, &(*out)[k]);
      } catch (const std::exception& e) {
        (*out)[k].status = Status::ResourceExhausted(dir + ": opening " + shards[k].name + ": " +
                                                     e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t extra = std::min(kOpenThreads, shards.size()) - (shards.empty() ? 0 : 1);
  for (size_t t = 0; t < extra; ++t) {
    try {
      threads.emplace_back(work);
    } catch (const std::exception&) {
      break;  // the calling thread does the rest
    }
  }
  work();
  for (std::thread& t : threads) t.join();
}

class DatasetImpl final : public Dataset {
 public:
  static Result<std::shared_ptr<Dataset>> Open(const std::string& dir,
                                               const DatasetOptions& options);

  const std::string& path() const override { return dir_; }
  uint64_t size() const override { return index_->sample_count(); }
  const Schema& schema() const override { return index_->schema(); }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  uint64_t total_stored_bytes() const override { return stored_bytes_; }
  uint64_t total_raw_bytes() const override { return index_->total_raw_bytes(); }
  const DatasetProvenance& provenance() const override { return provenance_; }
  std::vector<uint8_t> field_codecs() const override { return codecs_; }
  uint32_t index_version() const override { return index_->version(); }
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
  Result<Provenance> source(uint64_t i) const override {
    LIBSHARD_RETURN_IF_ERROR(CheckIndex(i));
    format::SampleRecord r;
    LIBSHARD_RETURN_IF_ERROR(index_->Lookup(i, &r, nullptr));
    LIBSHARD_ASSIGN_OR_RETURN(std::string path, index_->SourcePath(i));
    return Provenance{std::move(path), r.source_bytes, r.source_mtime_ns, r.source_hash};
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

  Result<Sample> Read(uint64_t i) const override;
  Status Verify(uint64_t i) const override;
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
};

Result<std::shared_ptr<Dataset>> DatasetImpl::Open(const std::string& dir_in,
                                                   const DatasetOptions& options) {
  std::error_code ec;
  std::string dir = std::filesystem::absolute(dir_in, ec).lexically_normal().string();
  if (ec || dir.empty()) dir = dir_in;
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string manifest_path = internal::JoinPath(dir, format::kManifestName);
  if (!internal::PathExists(manifest_path)) {
    if (!internal::PathExists(dir))
      return Status::NotFound(dir + ": no such directory");
    if (internal::PathExists(internal::JoinPath(dir, format::kJournalName)))
      return Status::NotFound(dir + ": no manifest.json: this is an unfinished write (a journal "
                                    "is present); resume it with libshard pack --resume");
    return Status::NotFound(dir + ": no manifest.json; not a libshard dataset");
  }
  LIBSHARD_ASSIGN_OR_RETURN(std::string manifest_text,
                            internal::ReadWholeFile(manifest_path, kMaxManifestBytes));
  LIBSHARD_ASSIGN_OR_RETURN(format::Manifest manifest,
                            format::ParseManifest(manifest_text, manifest_path));

  auto ds = std::make_shared<DatasetImpl>();
  ds->dir_ = dir;
  ds->options_ = options;
  ds->index_path_ = internal::JoinPath(dir, manifest.index_file);
  ds->provenance_ = {manifest.source_root, manifest.sources, manifest.created_by,
                     manifest.created_at, manifest.attributes};
  const std::string& ip = ds->index_path_;
  LIBSHARD_ASSIGN_OR_RETURN(ds->index_, IndexReader::Open(ip, manifest.index_size));
  const IndexReader& index = *ds->index_;
  // Field codecs (FORMAT.md §3.8.3, §4.3): decoded by Decode/Read; an id this reader does not
  // know, or one that cannot store the field's dtype, is refused here.
  bool any_codec = false;
  for (size_t f = 0; f < index.codecs().size(); ++f) {
    const uint16_t c = index.codecs()[f].codec;
    if (c == 0) continue;
    any_codec = true;
    if (c > codec::kMaxCodecId)
      return Status::Unsupported(ip + ": field '" + index.schema().fields[f].name +
                                 "' is stored with codec " + std::to_string(c) +
                                 " (FORMAT.md §4.3), which this libshard does not decode; "
                                 "upgrade libshard");
    if (!codec::CodecAccepts(static_cast<codec::CodecId>(c), index.schema().fields[f].dtype))
      return Status::Corruption(ip + ": field '" + index.schema().fields[f].name + "' has codec " +
                                std::to_string(c) + ", which cannot store its dtype" + kRepack);
  }
  if (any_codec)
    for (const format::FieldCodec& c : index.codecs())
      ds->codecs_.push_back(static_cast<uint8_t>(c.codec));
  for (size_t f = 0, j = 0; f < index.schema().fields.size(); ++f) {
    ds->field_dim_start_.push_back(j);
    j += index.schema().fields[f].rank;
  }

  // Manifest agreement (§2.2).
  auto disagree = [&](const std::string& what) {
    return Status::Corruption(manifest_path + ": " + what + " disagrees with " + ip + kRepack);
  };
  if (manifest.version != index.version())
    return disagree("version " + std::to_string(manifest.version) + " (index version " +
                    std::to_string(index.version()) + ")");
  if (manifest.index_xxh3 != index.checksum())
    return disagree("index.xxh3 " + format::Hex16(manifest.index_xxh3) + " (index has " +
                    format::Hex16(index.checksum()) + ")");
  if (!(manifest.schema == index.schema())) return disagree("the schema");
  if (manifest.shards.size() != index.shards().size())
    return disagree("the shard count " + std::to_string(manifest.shards.size()));
  for (size_t k = 0; k < manifest.shards.size(); ++k) {
    const auto& a = manifest.shards[k];
    const auto& b = index.shards()[k];
    if (a.file != b.name || a.size != b.file_size || a.samples != b.sample_count)
      return disagree("shard " + std::to_string(k) + " ('" + a.file + "', " +
                      std::to_string(a.size) + " bytes, " + std::to_string(a.samples) +
                      " samples)");
  }
  if (manifest.total_samples != index.sample_count())
    return disagree("totals.samples " + std::to_string(manifest.total_samples));
  if (manifest.total_raw_bytes != index.total_raw_bytes())
    return disagree("totals.raw_bytes " + std::to_string(manifest.total_raw_bytes));

  // Shard files: size on disk and header (§4.1). Each costs a few cold reads (directory entry,
  // inode, header), so several shards are opened at once; the first failing shard in index order
  // is the error reported, as if they were opened one after another.
  const std::vector<format::IndexShard>& index_shards = index.shards();
  std::vector<OpenedShard> opened(index_shards.size());
  OpenShardsInParallel(dir, index_shards, index.has_shard_uids(), &opened);
  ds->shards_.reserve(opened.size());
  ds->shard_files_.reserve(opened.size());
  for (OpenedShard& o : opened) {
    LIBSHARD_RETURN_IF_ERROR(o.status);
    ds->stored_bytes_ += o.info.size;
    ds->shards_.push_back(std::move(o.info));
    ds->shard_files_.push_back(std::move(*o.file));
  }
  if (manifest.total_stored_bytes != ds->stored_bytes_)
    return disagree("totals.stored_bytes " + std::to_string(manifest.total_stored_bytes));
  return std::shared_ptr<Dataset>(std::move(ds));
}

Result<std::shared_ptr<std::byte[]>> DatasetImpl::ReadStored(uint64_t i,
                                                             const format::SampleRecord& r) const {
  auto buf = internal::AllocateAligned(r.stored_size, kSampleAlignment);
  if (!buf)
    return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                     std::to_string(r.stored_size) + " bytes");
  Status st = shard_files_[r.shard].PReadExact(buf.get(), r.stored_size, r.offset);
  if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
  return buf;
}

Status DatasetImpl::CheckChecksum(uint64_t i, const format::SampleRecord& r,
                                  const std::byte* stored) const {
  const uint64_t actual = format::Xxh3(stored, r.stored_size);
  if (actual == r.checksum) return Status::OK();
  auto path = index_->SourcePath(i);
  const std::string source = path.ok() ? *path : std::string();
  return Status::Corruption(Where(i, r) + " (" + std::to_string(r.stored_size) +
                            " stored bytes): checksum mismatch: xxh3 " + format::Hex16(actual) +
                            " != " + format::Hex16(r.checksum) + " recorded in the index" +
                            (source.empty() ? "" : " (source '" + source + "')") +
                            "; the shard is damaged, re-run libshard pack");
}

Result<Sample> DatasetImpl::Read(uint64_t i) const {
  format::SampleRecord r;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r));
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<std::byte[]> stored, ReadStored(i, r));
  if (options_.verify_checksums) LIBSHARD_RETURN_IF_ERROR(CheckChecksum(i, r, stored.get()));
  std::shared_ptr<std::byte[]> raw = stored;
  if ((r.flags & format::kFlagZstd) || !codecs_.empty()) {
    raw = internal::AllocateAligned(r.raw_size, kSampleAlignment);
    if (!raw)
      return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                       std::to_string(r.raw_size) + " bytes");
    LIBSHARD_RETURN_IF_ERROR(Decode(i, {stored.get(), r.stored_size}, {raw.get(), r.raw_size}));
  }
  const std::byte* base = raw.get();
  return MakeSample(i, base, 0, r.raw_size, std::shared_ptr<const void>(raw, raw.get()), {});
}

Status DatasetImpl::Verify(uint64_t i) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<std::byte[]> stored, ReadStored(i, r));
  LIBSHARD_RETURN_IF_ERROR(CheckChecksum(i, r, stored.get()));
  if (!has_field_checksums()) return Status::OK();
  // The second level (FORMAT.md §3.9): every field checksum, over the stored regions, or over
  // the decoded tensors of a whole-sample zstd sample.
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  if (!(r.flags & format::kFlagZstd))
    return CheckFieldChecksums(i, r, offsets, sizes, stored.get(), 0, r.stored_size, {});
  auto raw = internal::AllocateAligned(std::max<uint64_t>(r.raw_size, 1), kSampleAlignment);
  if (!raw)
    return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                     std::to_string(r.raw_size) + " bytes");
  LIBSHARD_RETURN_IF_ERROR(Decode(i, {stored.get(), r.stored_size}, {raw.get(), r.raw_size}));
  return CheckFieldChecksums(i, r, offsets, sizes, raw.get(), 0, r.raw_size, {});
}

Result<std::vector<uint64_t>> DatasetImpl::ComputeFieldChecksums(uint64_t i) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<std::byte[]> stored, ReadStored(i, r));
  LIBSHARD_RETURN_IF_ERROR(CheckChecksum(i, r, stored.get()));
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  std::shared_ptr<std::byte[]> bytes = stored;
  if (r.flags & format::kFlagZstd) {  // §3.9: over the decoded tensors
    bytes = internal::AllocateAligned(std::max<uint64_t>(r.raw_size, 1), kSampleAlignment);
    if (!bytes)
      return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                       std::to_string(r.raw_size) + " bytes");
    LIBSHARD_RETURN_IF_ERROR(Decode(i, {stored.get(), r.stored_size}, {bytes.get(), r.raw_size}));
  }
  std::vector<uint64_t> sums(offsets.size());
  for (size_t f = 0; f < sums.size(); ++f)
    sums[f] = format::FieldChecksum(bytes.get() + offsets[f], sizes[f]);
  return sums;
}

Status DatasetImpl::Regions(uint64_t i, const format::SampleRecord& r,
                            const std::vector<uint64_t>& dims, std::vector<uint64_t>* offsets,
                            std::vector<uint64_t>* sizes) const {
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // checked at load
  if (codecs_.empty()) {
    *offsets = layout.offsets;
    *sizes = layout.sizes;
    return Status::OK();
  }
  std::vector<uint64_t> stored_sizes;
  Status st = index_->FieldStoredSizes(i, &stored_sizes);
  if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
  std::vector<format::FieldCodec> fc;
  for (uint8_t c : codecs_) fc.push_back(format::FieldCodec{c, {}});
  uint64_t total = 0;
  if (!format::ComputeStoredLayout(fc, layout.sizes, stored_sizes, offsets, &total) ||
      total != r.stored_size)
    return Status::Corruption(Where(i, r) + ": the field regions' sizes do not add up to the "
                              "stored size " + std::to_string(r.stored_size) + kRepack);
  sizes->resize(codecs_.size());
  for (size_t f = 0; f < codecs_.size(); ++f)
    (*sizes)[f] = codecs_[f] == 0 ? layout.sizes[f] : stored_sizes[f];
  return Status::OK();
}

Status DatasetImpl::FieldRegions(uint64_t i, std::vector<uint64_t>* offsets,
                                 std::vector<uint64_t>* sizes) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  return Regions(i, r, dims, offsets, sizes);
}

Status DatasetImpl::CheckFieldChecksums(uint64_t i, const format::SampleRecord& r,
                                        const std::vector<uint64_t>& offsets,
                                        const std::vector<uint64_t>& sizes,
                                        const std::byte* bytes, uint64_t base_offset,
                                        uint64_t base_size,
                                        std::span<const size_t> fields) const {
  std::vector<uint64_t> sums;
  {
    Status st = index_->FieldChecksums(i, &sums);
    if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
  }
  const size_t f_count = schema().fields.size();
  auto check = [&](size_t f) -> Status {
    if (f >= f_count)
      return Status::InvalidArgument("VerifyFields: field " + std::to_string(f) + " out of range");
    const uint64_t off = offsets[f], size = sizes[f];
    if (off < base_offset || off - base_offset > base_size || size > base_size - (off - base_offset))
      return Status::InvalidArgument(Where(i, r) + ": field '" + schema().fields[f].name +
                                     "' region [" + std::to_string(off) + ", +" +
                                     std::to_string(size) + ") is not within the bytes read [" +
                                     std::to_string(base_offset) + ", +" +
                                     std::to_string(base_size) + ")");
    const uint64_t actual = format::FieldChecksum(bytes + (off - base_offset), size);
    if (actual == sums[f]) return Status::OK();
    auto path = index_->SourcePath(i);
    const std::string source = path.ok() ? *path : std::string();
    const bool zstd = (r.flags & format::kFlagZstd) != 0;
    return Status::Corruption(
        Where(i, r) + ": field '" + schema().fields[f].name + "' (" + std::to_string(size) +
        (zstd ? " decoded bytes at payload offset " + std::to_string(off)
              : " bytes at shard offset " + std::to_string(r.offset + off)) +
        "): field checksum mismatch: " + format::Hex16(actual).substr(8) + " != " +
        format::Hex16(sums[f]).substr(8) + " recorded in the index" + (source.empty() ? "" : " (source '" + source + "')") +
        "; the shard is damaged, re-run libshard pack");
  };
  if (fields.empty()) {
    for (size_t f = 0; f < f_count; ++f) LIBSHARD_RETURN_IF_ERROR(check(f));
  } else {
    for (size_t f : fields) LIBSHARD_RETURN_IF_ERROR(check(f));
  }
  return Status::OK();
}

Status DatasetImpl::VerifyFields(uint64_t i, const std::byte* base, uint64_t base_offset,
                                 uint64_t base_size, std::span<const size_t> fields) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  if (!has_field_checksums())
    return Status::Unsupported(index_path_ + ": the index has no field checksums (index version " +
                               std::to_string(index_->version()) +
                               "); check the whole sample, or add them with libshard upgrade");
  if (r.flags & format::kFlagZstd)
    return Status::InvalidArgument(Where(i, r) + ": VerifyFields of a zstd-compressed sample "
                                   "(its field checksums cover the decoded bytes; use Verify)");
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  return CheckFieldChecksums(i, r, offsets, sizes, base, base_offset, base_size, fields);
}

Status DatasetImpl::DecodeSelected(uint64_t i, std::span<const std::byte> stored,
                                   std::span<std::byte> raw, std::span<const size_t> fields,
                                   uint64_t max_len) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  if (stored.size() != r.stored_size || raw.size() < r.raw_size)
    return Status::InvalidArgument(Where(i, r) + ": Decode needs " + std::to_string(r.stored_size) +
                                   " stored bytes and room for " + std::to_string(r.raw_size) +
                                   " raw bytes");
  raw = raw.first(r.raw_size);
  if (!codecs_.empty()) return DecodeFields(i, r, dims, stored, raw, fields, max_len);
  if (!(r.flags & format::kFlagZstd)) {
    if (stored.data() != raw.data() && r.raw_size > 0)
      std::memmove(raw.data(), stored.data(), r.raw_size);
    return Status::OK();
  }
  const auto* s0 = stored.data();
  const auto* r0 = raw.data();
  if (s0 < r0 + raw.size() && r0 < s0 + stored.size())
    return Status::InvalidArgument(Where(i, r) + ": compressed sample: stored and raw overlap");
  auto damaged = [&](const Status& st) {
    return Status::Corruption(Where(i, r) + ": " + st.message() +
                              "; the shard is damaged, re-run libshard pack");
  };
  if (!(r.flags & format::kFlagByteShuffle)) {
    Status st = format::ZstdDecompress(stored, raw);
    return st.ok() ? st : damaged(st);
  }
  auto scratch = internal::AllocateAligned(r.raw_size, kTensorAlignment);
  if (!scratch)
    return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                     std::to_string(r.raw_size) + " bytes");
  Status st = format::ZstdDecompress(stored, {scratch.get(), r.raw_size});
  if (!st.ok()) return damaged(st);
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // validated at Open
  format::ShufflePayload(schema(), layout, scratch.get(), raw.data(), /*inverse=*/true);
  return Status::OK();
}

Status DatasetImpl::DecodeFields(uint64_t i, const format::SampleRecord& r,
                                 const std::vector<uint64_t>& dims,
                                 std::span<const std::byte> stored,
                                 std::span<std::byte> raw, std::span<const size_t> fields,
                                 uint64_t max_len) const {
  const auto* s0 = stored.data();
  const auto* r0 = raw.data();
  if (r.raw_size > 0 && s0 < r0 + raw.size() && r0 < s0 + stored.size())
    return Status::InvalidArgument(Where(i, r) + ": sample with field codecs: stored and raw "
                                   "overlap");
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // validated at load
  // Each field's stored region (FORMAT.md §3.8.4), checked against the stored size.
  std::vector<uint64_t> offsets, stored_sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &stored_sizes));
  // One decoder per thread (the loader decodes on its worker threads).
  thread_local codec::Decoder decoder;
  const bool everything = fields.empty() && max_len == 0;
  std::vector<bool> wanted(codecs_.size(), fields.empty());
  for (size_t f : fields)
    if (f < wanted.size()) wanted[f] = true;
  uint64_t pos = 0;
  for (size_t f = 0; f < codecs_.size(); ++f) {
    const Field& field = schema().fields[f];
    if (!wanted[f]) continue;
    if (everything) std::memset(raw.data() + pos, 0, layout.offsets[f] - pos);  // gaps
    std::span<std::byte> dst = raw.subspan(layout.offsets[f], layout.sizes[f]);
    pos = layout.offsets[f] + layout.sizes[f];
    if (codecs_[f] == 0) {
      if (!dst.empty()) std::memcpy(dst.data(), stored.data() + offsets[f], dst.size());
      continue;
    }
    const Shape shape = FieldShape(dims, f);
    Result<codec::FieldGeometry> g = codec::GeometryOf(field.dtype, shape, field.seq_dim);
    if (!g.ok()) return g.status().WithContext(Where(i, r));
    uint64_t rows = g->rows;
    if (max_len > 0 && field.seq_dim >= 0 && max_len < rows) {
      // The first max_len tokens are the first max_len rows when the dims before seq_dim are 1
      // (EAGLE-3's [1, L, H]; FORMAT.md §4.3.1); otherwise everything is decoded.
      uint64_t outer = 1;
      for (int32_t d = 0; d < field.seq_dim; ++d) outer *= shape[static_cast<size_t>(d)];
      if (outer == 1) {
        rows = max_len;
        dst = dst.first(codec::DecodedBytes(*g, rows));
      }
    }
    Status st = decoder.Decode(stored.subspan(offsets[f], stored_sizes[f]),
                               static_cast<codec::CodecId>(codecs_[f]), *g, rows, dst);
    if (!st.ok()) {
      auto path = index_->SourcePath(i);
      const std::string source = path.ok() ? *path : std::string();
      return Status::Corruption(
          Where(i, r) + ": field '" + field.name + "' (" +
          std::string(codec::CodecName(static_cast<codec::CodecId>(codecs_[f]))) +
          " region of " + std::to_string(stored_sizes[f]) + " bytes at shard offset " +
          std::to_string(r.offset + offsets[f]) + "): " + st.message() +
          (source.empty() ? "" : " (source '" + source + "')") +
          "; the shard is damaged, re-run libshard pack");
    }
  }
  if (everything) std::memset(raw.data() + pos, 0, raw.size() - pos);
  return Status::OK();
}

Result<Sample> DatasetImpl::MakeSample(uint64_t i, const std::byte* base, uint64_t base_offset,
                                       uint64_t base_size, std::shared_ptr<const void> memory,
                                       std::span<const size_t> fields) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // checked at load
  const size_t f_count = schema().fields.size();
  std::vector<size_t> all;
  if (fields.empty()) {
    all.resize(f_count);
    for (size_t f = 0; f < f_count; ++f) all[f] = f;
    fields = all;
  }
  uint64_t base_end = 0;
  if (!format::CheckedAdd(base_offset, base_size, &base_end))
    return Status::InvalidArgument("MakeSample: base range overflows");
  std::vector<TensorView> views;
  views.reserve(fields.size());
  for (size_t f : fields) {
    if (f >= f_count)
      return Status::InvalidArgument("MakeSample: field " + std::to_string(f) + " out of range");
    const uint64_t off = layout.offsets[f], nbytes = layout.sizes[f];
    const Field& field = schema().fields[f];
    if (off < base_offset || off + nbytes > base_end)
      return Status::InvalidArgument(dir_ + ": sample " + std::to_string(i) + ": tensor '" +
                                     field.name + "' bytes [" + std::to_string(off) + ", +" +
                                     std::to_string(nbytes) + ") are outside the buffer [" +
                                     std::to_string(base_offset) + ", +" +
                                     std::to_string(base_size) + ")");
    views.push_back(TensorView{field.name, field.dtype, FieldShape(dims, f),
                               base + (off - base_offset), nbytes});
  }
  LIBSHARD_ASSIGN_OR_RETURN(Metadata meta, metadata(i));
  return Sample(i, std::move(views), std::move(meta), std::move(memory));
}

}  // namespace

std::string_view FieldCodecName(uint8_t codec) {
  return codec::CodecName(static_cast<codec::CodecId>(codec));
}

Result<std::vector<uint64_t>> Dataset::field_checksums(uint64_t) const {
  return Status::Unsupported(path() + ": the dataset has no field checksums (index version " +
                             std::to_string(index_version()) + "); libshard upgrade adds them");
}

Status Dataset::VerifyFields(uint64_t, const std::byte*, uint64_t, uint64_t,
                             std::span<const size_t>) const {
  return Status::Unsupported(path() + ": the dataset has no field checksums");
}

Result<std::vector<uint64_t>> Dataset::field_stored_sizes(uint64_t i) const {
  std::vector<uint64_t> sizes;
  for (size_t f = 0; f < schema().fields.size(); ++f) sizes.push_back(tensor(i, f).nbytes);
  return sizes;
}

Result<std::shared_ptr<Dataset>> Dataset::Open(const std::string& dir,
                                               const DatasetOptions& options) {
  if (io::IsS3Url(dir)) return remote::OpenRemoteDataset(dir, options, &DatasetImpl::Open);
  return DatasetImpl::Open(dir, options);
}

}  // namespace libshard
