#include "readers/automodel_cache.h"

#include <algorithm>
#include <cstdio>

#include "readers/cache_manifest.h"
#include "readers/safetensors_source.h"

namespace libshard::convert {

namespace {

constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;

std::string ShardName(uint64_t k) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%06llu.safetensors", static_cast<unsigned long long>(k));
  return buf;
}

// The shard number of "shard-NNNNNN.safetensors" (exactly six digits), else nullopt.
std::optional<uint64_t> ShardNumber(const std::string& name) {
  constexpr std::string_view kPrefix = "shard-", kSuffix = ".safetensors";
  if (name.size() != kPrefix.size() + 6 + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(kPrefix.size() + 6, kSuffix.size(), kSuffix) != 0)
    return std::nullopt;
  uint64_t k = 0;
  for (size_t p = kPrefix.size(); p < kPrefix.size() + 6; ++p) {
    if (name[p] < '0' || name[p] > '9') return std::nullopt;
    k = k * 10 + static_cast<uint64_t>(name[p] - '0');
  }
  return k;
}

class AutoModelCache final : public CacheSource {
 public:
  static Result<std::unique_ptr<CacheSource>> Open(std::unique_ptr<CacheDir> dir,
                                                   const SourceOptions& options);
  SourceFormat format() const override { return SourceFormat::kAutoModel; }
  Result<std::unique_ptr<SourceFile>> OpenSample(uint64_t i) const override;

 private:
  explicit AutoModelCache(std::unique_ptr<CacheDir> dir) : CacheSource(std::move(dir)) {}
  Status ReadShard(uint64_t k, const SourceOptions& options);

  struct Column {
    SourceTensor row;       // one sample's slice: dim 0 dropped
    uint64_t offset = 0;    // of the tensor's bytes in the shard file
  };
  struct Shard {
    std::string file;
    CacheFileInfo info;
    std::vector<Column> columns;
  };
  uint64_t shard_size_ = 0;
  uint64_t num_samples_ = 0;
  std::vector<Shard> shards_;
};

Status AutoModelCache::ReadShard(uint64_t k, const SourceOptions& options) {
  Shard shard;
  shard.file = ShardName(k);
  const std::string where = dir_->Name(shard.file);
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, dir_->Open(shard.file));
  const uint64_t size = file->size();
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSource> st,
                            SafetensorsSource::Open(std::move(file), size, false, options));
  LIBSHARD_ASSIGN_OR_RETURN(shard.info, dir_->Stat(shard.file));
  if (shard.info.size != size)
    return Status::Corruption(where + ": changed while the cache was opened");
  const uint64_t rows = std::min(shard_size_, num_samples_ - k * shard_size_);
  uint64_t row_bytes = 0;
  for (size_t t = 0; t < st->tensors().size(); ++t) {
    const SourceTensor& full = st->tensors()[t];
    if (full.shape.empty() || full.shape[0] != rows)
      return Status::Corruption(
          where + ": tensor '" + full.name + "' has shape " +
          (full.shape.empty() ? std::string("[]")
                              : "[" + std::to_string(full.shape[0]) + ", ...]") +
          " but shard " + std::to_string(k) + " holds " + std::to_string(rows) +
          " samples (manifest.json: shard_size " + std::to_string(shard_size_) + ", num_samples " +
          std::to_string(num_samples_) + "); the manifest and the shards disagree (a resume with "
          "another configuration?)");
    Column c;
    c.row.name = full.name;
    c.row.dtype = full.dtype;
    c.row.shape.assign(full.shape.begin() + 1, full.shape.end());
    c.row.nbytes = full.nbytes / rows;
    c.offset = st->data_offset(t);
    row_bytes += c.row.nbytes;  // <= the file's size: the tensors tile it
    shard.columns.push_back(std::move(c));
  }
  if (row_bytes == 0)
    return Status::Corruption(where + ": its samples hold no bytes; the shard is damaged");
  shards_.push_back(std::move(shard));
  return Status::OK();
}

Result<std::unique_ptr<CacheSource>> AutoModelCache::Open(std::unique_ptr<CacheDir> dir,
                                                          const SourceOptions& options) {
  auto cache = std::unique_ptr<AutoModelCache>(new AutoModelCache(std::move(dir)));
  const CacheDir& d = *cache->dir_;
  const std::string where = d.Name("manifest.json");
  LIBSHARD_ASSIGN_OR_RETURN(
      CacheJson m,
      ReadCacheJsonObject(d, "manifest.json",
                          std::min(options.max_header_bytes, kMaxManifestBytes)));
  auto bad = [&](const std::string& what) {
    return Status::Corruption(where + ": " + what +
                              "; the NeMo AutoModel cache's manifest is damaged or incomplete");
  };
  if (!m.contains("format_version") || !m["format_version"].is_number_integer())
    return bad("no integer format_version");
  // The producers write "complete": false before the first shard and true after the last one.
  if (m.contains("complete") && m["complete"] != true)
    return Status::Corruption(where + ": the cache is marked incomplete (\"complete\": " +
                              m["complete"].dump() + "): its precompute was interrupted or is "
                              "still running; finish it (re-run it with the same configuration) "
                              "and pack again");
  const auto shard_size = JsonUnsigned(m, "shard_size");
  const auto num_samples = JsonUnsigned(m, "num_samples");
  if (!shard_size || *shard_size == 0) return bad("shard_size is not a positive integer");
  if (!num_samples) return bad("num_samples is not a non-negative integer");
  cache->shard_size_ = *shard_size;
  cache->num_samples_ = *num_samples;
  const uint64_t expected = *num_samples / *shard_size + (*num_samples % *shard_size != 0);

  LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::string> names, d.List());
  std::vector<uint64_t> found;
  for (const std::string& n : names)
    if (auto k = ShardNumber(n)) found.push_back(*k);
  std::sort(found.begin(), found.end());
  bool contiguous = found.size() == expected;
  for (size_t k = 0; contiguous && k < found.size(); ++k) contiguous = found[k] == k;
  if (!contiguous) {
    std::string list;
    for (size_t k = 0; k < found.size() && k < 8; ++k)
      list += (k ? ", " : "") + std::to_string(found[k]);
    if (found.size() > 8) list += ", ...";
    return Status::Corruption(
        where + " declares " + std::to_string(*num_samples) + " samples in shards of " +
        std::to_string(*shard_size) + " (shards 0.." +
        (expected == 0 ? std::string("none") : std::to_string(expected - 1)) + "), but the "
        "directory holds " + std::to_string(found.size()) + " shard files (" +
        (list.empty() ? "none" : list) + "); the cache is incomplete or mixes two runs");
  }
  for (uint64_t k = 0; k < expected; ++k) LIBSHARD_RETURN_IF_ERROR(cache->ReadShard(k, options));
  // Every row holds at least one byte of its shard: num_samples is backed by the files.
  cache->samples_.resize(*num_samples);
  for (uint64_t i = 0; i < *num_samples; ++i) {
    const Shard& s = cache->shards_[i / *shard_size];
    CacheSample& c = cache->samples_[i];
    c.key = s.file + "/" + std::to_string(i);
    for (const Column& col : s.columns) c.bytes += col.row.nbytes;
    c.mtime_ns = s.info.mtime_ns;
  }
  // num_samples describes this copy of the cache (it grows when a producer resumes), not its data.
  ManifestAttributes(m, SourceFormat::kAutoModel, {"num_samples"}, &cache->attributes_,
                     &cache->omitted_keys_);
  LIBSHARD_RETURN_IF_ERROR(cache->IndexKeys());
  return std::unique_ptr<CacheSource>(std::move(cache));
}

Result<std::unique_ptr<SourceFile>> AutoModelCache::OpenSample(uint64_t i) const {
  if (i >= samples_.size())
    return Status::InvalidArgument(path() + ": sample " + std::to_string(i) + " out of range (" +
                                   std::to_string(samples_.size()) + ")");
  const Shard& shard = shards_[i / shard_size_];
  const uint64_t row = i % shard_size_;
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, dir_->Open(shard.file));
  if (file->size() != shard.info.size)
    return Status::Corruption(dir_->Name(shard.file) + ": " + std::to_string(file->size()) +
                              " bytes now, " + std::to_string(shard.info.size) +
                              " when the cache was opened; the cache changed while being read");
  std::vector<RangeSampleFile::Range> ranges;
  for (const Column& c : shard.columns) {
    RangeSampleFile::Range r;
    r.tensor = c.row;
    r.offset = c.offset + row * c.row.nbytes;  // inside the tensor: row < its dim 0
    ranges.push_back(std::move(r));
  }
  return std::unique_ptr<SourceFile>(std::make_unique<RangeSampleFile>(
      dir_->Name(samples_[i].key), std::shared_ptr<const ByteSource>(std::move(file)),
      std::move(ranges), Metadata{}, "automodel"));
}

}  // namespace

Result<std::unique_ptr<CacheSource>> OpenAutoModelCache(std::unique_ptr<CacheDir> dir,
                                                        const SourceOptions& options) {
  return AutoModelCache::Open(std::move(dir), options);
}

}  // namespace libshard::convert
