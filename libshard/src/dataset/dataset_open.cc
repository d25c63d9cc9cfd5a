// Dataset::Open (FORMAT.md §2.2, §3.7, §4.1): the manifest, the index and every shard file,
// checked against each other; and the defaults of Dataset's optional methods.
#include "libshard/dataset.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <thread>

#include "codec/field_codec.h"
#include "dataset/dataset_impl.h"
#include "dataset/index_reader.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index.h"
#include "format/journal.h"
#include "format/manifest.h"
#include "format/shard_format.h"
#include "io/direct_io.h"
#include "io/file.h"
#include "io/filesystem.h"
#include "storage/storage_driver.h"

namespace libshard {
namespace internal {
namespace {

constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;


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
  // The Dataset reads the header, then samples, field ranges and token slices at random: each
  // read asks for exactly its bytes, so the kernel's sequential read-ahead would only add bytes
  // nobody asked for (measured: the token slices of SP8 read 1.9x the sample with 8 MiB of
  // read-ahead, 1.1x without).
  file->file.AdviseRandomAccess();
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

}  // namespace

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
                                    "is present); resume it with " +
                              std::string(ResumeAdvice(options.caller)));
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
                     manifest.created_at, manifest.attributes, manifest.identity_recorded};
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
  if (manifest.index_version != index.index_version())
    return disagree("version " + std::to_string(manifest.index_version) + " (index version " +
                    std::to_string(index.index_version()) + ")");
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

std::shared_ptr<Dataset> DatasetImpl::FromIndex(std::string dir, std::string index_name,
                                                std::unique_ptr<IndexReader> index,
                                                std::vector<ShardInfo> shards,
                                                std::vector<io::File> files,
                                                const DatasetOptions& options) {
  auto ds = std::make_shared<DatasetImpl>();
  ds->dir_ = std::move(dir);
  ds->options_ = options;
  ds->index_path_ = std::move(index_name);
  ds->index_ = std::move(index);
  for (const format::FieldCodec& c : ds->index_->codecs()) {
    if (c.codec == 0) continue;
    for (const format::FieldCodec& d : ds->index_->codecs())
      ds->codecs_.push_back(static_cast<uint8_t>(d.codec));
    break;
  }
  for (size_t f = 0, j = 0; f < ds->index_->schema().fields.size(); ++f) {
    ds->field_dim_start_.push_back(j);
    j += ds->index_->schema().fields[f].rank;
  }
  for (const ShardInfo& s : shards) ds->stored_bytes_ += s.size;
  ds->shards_ = std::move(shards);
  ds->shard_files_ = std::move(files);
  return ds;
}

}  // namespace internal

using internal::DatasetImpl;

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

Result<std::string> Dataset::key(uint64_t i) const {
  LIBSHARD_ASSIGN_OR_RETURN(SourceFileInfo p, source(i));
  return std::move(p.path);
}

Result<std::vector<uint64_t>> Dataset::field_stored_sizes(uint64_t i) const {
  std::vector<uint64_t> sizes;
  for (size_t f = 0; f < schema().fields.size(); ++f) sizes.push_back(tensor(i, f).nbytes);
  return sizes;
}

Result<std::shared_ptr<Dataset>> Dataset::Open(const std::string& dir,
                                               const DatasetOptions& options) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                            storage::OpenStorage(dir, options));
  return driver->Open(&DatasetImpl::Open);
}

}  // namespace libshard
