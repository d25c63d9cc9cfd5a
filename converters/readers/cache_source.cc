#include "readers/cache_source.h"

#include <algorithm>
#include <regex>

#include "libshard/checksum.h"
#include "readers/automodel_cache.h"
#include "readers/cache_manifest.h"
#include "readers/deepspec_cache.h"
#include "readers/torchspec_folder.h"

namespace libshard::convert {

namespace {

constexpr std::pair<SourceFormat, std::string_view> kNames[] = {
    {SourceFormat::kAuto, "auto"},           {SourceFormat::kFiles, "files"},
    {SourceFormat::kDeepSpec, "deepspec"},   {SourceFormat::kAutoModel, "automodel"},
    {SourceFormat::kTorchSpec, "torchspec"},
};

// Enough for any real manifest.json / dataset.json (AutoModel's holds the draft vocabulary's
// token ids: ~200 KB for 32k).
constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;

bool IsAutoModelShardName(const std::string& name) {
  static const std::regex re("shard-[0-9]{6}\\.safetensors");
  return std::regex_match(name, re);
}

}  // namespace

std::string_view SourceFormatName(SourceFormat format) {
  for (const auto& [f, n] : kNames)
    if (f == format) return n;
  return "?";
}

Result<SourceFormat> ParseSourceFormat(std::string_view text) {
  for (const auto& [f, n] : kNames)
    if (n == text) return f;
  return Status::InvalidArgument("unknown source format '" + std::string(text) +
                                 "'; expected one of: auto, files, deepspec, automodel, "
                                 "torchspec");
}

Result<uint64_t> CacheSource::HashSample(uint64_t i) const {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<SourceFile> f, OpenSample(i));
  const auto* ranges = dynamic_cast<const RangeSampleFile*>(f.get());
  if (ranges == nullptr) return Status::Internal(path() + ": HashSample needs an override");
  return ranges->Hash();
}

std::optional<uint64_t> CacheSource::Find(std::string_view key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

Status CacheSource::IndexKeys() {
  by_key_.clear();
  by_key_.reserve(samples_.size());
  for (uint64_t i = 0; i < samples_.size(); ++i) {
    if (!by_key_.emplace(samples_[i].key, i).second)
      return Status::InvalidArgument(path() + ": two samples of the cache are both '" +
                                     samples_[i].key + "'; the cache's manifest is damaged");
  }
  return Status::OK();
}

Result<SourceFormat> DetectSourceFormat(const CacheDir& dir, const SourceOptions& options) {
  const bool has_idx = dir.Exists("samples.idx");
  const bool has_jsonl = dir.Exists("manifest.jsonl");
  const bool has_dataset_json = dir.Exists("dataset.json");
  if (has_jsonl && has_dataset_json) return SourceFormat::kTorchSpec;
  bool has_st_shards = false;
  if (!has_idx) {
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::string> names, dir.List());
    has_st_shards = std::any_of(names.begin(), names.end(), IsAutoModelShardName);
  }
  if (!dir.Exists("manifest.json")) {
    if (has_idx)
      return Status::Corruption(dir.Name("samples.idx") +
                                " is there but manifest.json is not: a DeepSpec target cache "
                                "that was never finalized; finish or re-run its "
                                "prepare_target_cache");
    return SourceFormat::kFiles;
  }
  auto manifest = ReadCacheJsonObject(dir, "manifest.json",
                                      std::min(options.max_header_bytes, kMaxManifestBytes));
  if (manifest.ok()) {
    const CacheJson& m = *manifest;
    if (m.contains("index_record_size") || has_idx) return SourceFormat::kDeepSpec;
    if (m.contains("format_version") && m.contains("shard_size")) return SourceFormat::kAutoModel;
    if (has_st_shards)
      return Status::Corruption(dir.Name("manifest.json") +
                                ": beside shard-NNNNNN.safetensors files but without the "
                                "format_version and shard_size of a NeMo AutoModel cache; pass "
                                "--from files to pack the files one by one");
    return SourceFormat::kFiles;
  }
  if (has_idx || has_st_shards)
    return manifest.status().WithContext(
        std::string("the directory looks like a ") +
        (has_idx ? "DeepSpec target cache" : "NeMo AutoModel cache") +
        " but its manifest cannot be read (pass --from files to pack its files one by one)");
  return SourceFormat::kFiles;
}

Result<std::unique_ptr<CacheSource>> OpenCache(std::unique_ptr<CacheDir> dir, SourceFormat format,
                                               const SourceOptions& options) {
  if (format == SourceFormat::kAuto) {
    LIBSHARD_ASSIGN_OR_RETURN(format, DetectSourceFormat(*dir, options));
  }
  switch (format) {
    case SourceFormat::kDeepSpec:
      return OpenDeepSpecCache(std::move(dir), options);
    case SourceFormat::kAutoModel:
      return OpenAutoModelCache(std::move(dir), options);
    case SourceFormat::kTorchSpec:
      return OpenTorchSpecFolder(std::move(dir), options);
    case SourceFormat::kAuto:
    case SourceFormat::kFiles:
      break;
  }
  return Status::InvalidArgument(dir->path() + " is not a cache (DeepSpec, NeMo AutoModel or "
                                 "TorchSpec) but a directory of sample files");
}

RangeSampleFile::RangeSampleFile(std::string path, std::shared_ptr<const ByteSource> file,
                                 std::vector<Range> ranges, Metadata metadata,
                                 const char* format_name)
    : path_(std::move(path)), file_(std::move(file)), metadata_(std::move(metadata)),
      format_name_(format_name) {
  for (Range& r : ranges) {
    file_size_ += r.tensor.nbytes;
    offsets_.push_back(r.offset);
    tensors_.push_back(std::move(r.tensor));
  }
}

Status RangeSampleFile::ReadTensor(size_t t, std::span<std::byte> dst) const {
  if (t >= tensors_.size())
    return Status::InvalidArgument(path_ + ": tensor index " + std::to_string(t) +
                                   " out of range (" + std::to_string(tensors_.size()) + ")");
  if (dst.size() != tensors_[t].nbytes)
    return Status::InvalidArgument(path_ + ": tensor '" + tensors_[t].name + "' has " +
                                   std::to_string(tensors_[t].nbytes) +
                                   " bytes, destination has " + std::to_string(dst.size()));
  return file_->ReadAt(offsets_[t], dst, path_ + " tensor '" + tensors_[t].name + "'");
}

Result<uint64_t> RangeSampleFile::Hash() const {
  Xxh3Stream hash;
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  std::vector<std::byte> buf(
      static_cast<size_t>(std::min(kChunk, std::max<uint64_t>(file_size_, 1))));
  for (size_t t = 0; t < tensors_.size(); ++t) {
    for (uint64_t done = 0; done < tensors_[t].nbytes;) {
      const std::span<std::byte> chunk(
          buf.data(),
          static_cast<size_t>(std::min<uint64_t>(buf.size(), tensors_[t].nbytes - done)));
      LIBSHARD_RETURN_IF_ERROR(file_->ReadAt(offsets_[t] + done, chunk, "the provenance hash"));
      hash.Update(chunk);
      done += chunk.size();
    }
  }
  return hash.Digest();
}

}  // namespace libshard::convert
