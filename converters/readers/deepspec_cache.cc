#include "readers/deepspec_cache.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "readers/cache_manifest.h"

namespace libshard::convert {

namespace {

constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;
constexpr size_t kTensors = 5;
// The record's tensors in the order the cache stores a sample (and pack serves its fields).
constexpr const char* kNames[kTensors] = {"input_ids", "attention_mask", "loss_mask",
                                          "target_hidden_states", "target_last_hidden_states"};

uint64_t LoadLe(const std::byte* p, int n) {
  uint64_t v = 0;
  for (int k = n - 1; k >= 0; --k) v = (v << 8) | std::to_integer<uint64_t>(p[k]);
  return v;
}

class DeepSpecCache final : public CacheSource {
 public:
  static Result<std::unique_ptr<CacheSource>> Open(std::unique_ptr<CacheDir> dir,
                                                   const SourceOptions& options);
  SourceFormat format() const override { return SourceFormat::kDeepSpec; }
  Result<std::unique_ptr<SourceFile>> OpenSample(uint64_t i) const override;

 private:
  explicit DeepSpecCache(std::unique_ptr<CacheDir> dir) : CacheSource(std::move(dir)) {}
  Status ReadManifest(const SourceOptions& options);
  Status ReadIndex();

  struct Shard {
    std::string file;
    CacheFileInfo info;
  };
  struct Record {
    uint32_t shard = 0;
    uint32_t seq_len = 0;
    std::array<uint64_t, kTensors> offset{};
  };
  std::vector<Shard> shards_;
  std::vector<Record> records_;
  uint64_t num_samples_ = 0;
  uint64_t hidden_size_ = 0;
  uint64_t layers_ = 0;
  DType hidden_dtype_ = DType::kBFloat16;

  std::array<Shape, kTensors> Shapes(uint64_t seq_len) const {
    return {Shape{seq_len}, Shape{seq_len}, Shape{seq_len}, Shape{seq_len, layers_ * hidden_size_},
            Shape{seq_len, hidden_size_}};
  }
  std::array<DType, kTensors> DTypes() const {
    return {DType::kInt32, DType::kUInt8, DType::kUInt8, hidden_dtype_, hidden_dtype_};
  }
};

Status DeepSpecCache::ReadManifest(const SourceOptions& options) {
  const std::string where = dir_->Name("manifest.json");
  LIBSHARD_ASSIGN_OR_RETURN(
      CacheJson m,
      ReadCacheJsonObject(*dir_, "manifest.json",
                          std::min(options.max_header_bytes, kMaxManifestBytes)));
  auto bad = [&](const std::string& what) {
    return Status::Corruption(where + ": " + what +
                              "; the DeepSpec target cache's manifest is damaged or was not "
                              "finalized (re-run its prepare_target_cache)");
  };
  std::string missing;
  for (const char* k : {"version", "num_samples", "num_shards", "target_layer_ids", "hidden_dtype",
                        "token_dtype", "mask_dtype", "index_record_size", "hidden_size", "shards"})
    if (!m.contains(k)) missing += (missing.empty() ? "" : ", ") + std::string(k);
  if (!missing.empty()) return bad("required keys missing: " + missing);
  if (m["version"] != 2)
    return Status::Unsupported(where + ": DeepSpec target cache version " + m["version"].dump() +
                               "; libshard reads version 2");
  const std::string hd = m["hidden_dtype"].is_string() ? m["hidden_dtype"].get<std::string>() : "";
  if (hd == "bfloat16") {
    hidden_dtype_ = DType::kBFloat16;
  } else if (hd == "float8_e4m3fn") {
    hidden_dtype_ = DType::kFloat8E4M3FN;
  } else if (hd == "float8_e5m2") {
    hidden_dtype_ = DType::kFloat8E5M2;
  } else {
    return Status::Unsupported(where + ": hidden_dtype " + m["hidden_dtype"].dump() +
                               "; DeepSpec caches hold bfloat16, float8_e4m3fn or float8_e5m2");
  }
  if (m["token_dtype"] != "int32")
    return bad("token_dtype is " + m["token_dtype"].dump() + ", not \"int32\"");
  if (m["mask_dtype"] != "uint8")
    return bad("mask_dtype is " + m["mask_dtype"].dump() + ", not \"uint8\"");
  if (JsonUnsigned(m, "index_record_size") != kDeepSpecRecordSize)
    return bad("index_record_size is " + m["index_record_size"].dump() + ", not 56");
  const auto hidden = JsonUnsigned(m, "hidden_size");
  if (!hidden || *hidden == 0 || *hidden > (uint64_t{1} << 32))
    return bad("hidden_size " + m["hidden_size"].dump() + " is not a positive integer");
  hidden_size_ = *hidden;
  const CacheJson& layers = m["target_layer_ids"];
  if (!layers.is_array() || layers.empty()) return bad("target_layer_ids is not a non-empty list");
  for (size_t k = 0; k < layers.size(); ++k) {
    if (!layers[k].is_number_integer()) return bad("target_layer_ids holds a non-integer");
    if (k > 0 && layers[k].get<int64_t>() < layers[k - 1].get<int64_t>())
      return bad("target_layer_ids is not sorted ascending");
  }
  layers_ = layers.size();
  const auto samples = JsonUnsigned(m, "num_samples");
  const auto num_shards = JsonUnsigned(m, "num_shards");
  if (!samples) return bad("num_samples is not a non-negative integer");
  num_samples_ = *samples;
  const CacheJson& shards = m["shards"];
  if (!num_shards || !shards.is_array() || shards.size() != *num_shards)
    return bad("num_shards " + m["num_shards"].dump() + " does not match the " +
               std::to_string(shards.is_array() ? shards.size() : 0) + " entries of shards");
  for (size_t k = 0; k < shards.size(); ++k) {
    const CacheJson& s = shards[k];
    if (!s.is_object() || JsonUnsigned(s, "shard_id") != k)
      return bad("shards[" + std::to_string(k) + "] has no shard_id " + std::to_string(k) +
                 " (shard ids must count up from 0)");
    auto name = s.find("file_name");
    if (name == s.end() || !name->is_string() || !IsPlainRelativePath(name->get<std::string>()) ||
        name->get<std::string>().find('/') != std::string::npos)
      return bad("shards[" + std::to_string(k) + "].file_name is not a plain file name");
    Shard shard;
    shard.file = name->get<std::string>();
    auto info = dir_->Stat(shard.file);
    if (!info.ok())
      return info.status().WithContext(where + " names shard " + shard.file);
    shard.info = *info;
    shards_.push_back(std::move(shard));
  }
  // The counts and the shard list describe this copy of the cache, not its data: left out, so
  // that --append of a cache that grew is not refused as another cache's.
  ManifestAttributes(m, SourceFormat::kDeepSpec, {"shards", "num_shards", "num_samples"},
                     &attributes_, &omitted_keys_);
  return Status::OK();
}

Status DeepSpecCache::ReadIndex() {
  const std::string where = dir_->Name("samples.idx");
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> idx, dir_->Open("samples.idx"));
  uint64_t want = 0;
  if (__builtin_mul_overflow(num_samples_, kDeepSpecRecordSize, &want) || idx->size() != want)
    return Status::Corruption(where + ": " + std::to_string(idx->size()) +
                              " bytes, but manifest.json's num_samples " +
                              std::to_string(num_samples_) + " needs " +
                              (want == 0 && num_samples_ != 0 ? std::string("more than 2^64")
                                                              : std::to_string(want)) +
                              " (56 each); the cache is incomplete or its files are mixed up");
  // num_samples is now backed by the index file's size.
  records_.resize(num_samples_);
  samples_.resize(num_samples_);
  constexpr uint64_t kBatch = 1 << 16;
  std::vector<std::byte> buf;
  for (uint64_t first = 0; first < num_samples_; first += kBatch) {
    const uint64_t n = std::min(kBatch, num_samples_ - first);
    buf.resize(static_cast<size_t>(n * kDeepSpecRecordSize));
    LIBSHARD_RETURN_IF_ERROR(idx->ReadAt(first * kDeepSpecRecordSize, buf, "index records"));
    for (uint64_t j = 0; j < n; ++j) {
      const uint64_t i = first + j;
      const std::byte* r = buf.data() + j * kDeepSpecRecordSize;
      auto bad = [&](const std::string& what) {
        return Status::Corruption(where + ": record " + std::to_string(i) + " (byte " +
                                  std::to_string(i * kDeepSpecRecordSize) + "): " + what +
                                  "; the cache's index is damaged");
      };
      const uint64_t sample_id = LoadLe(r, 8);
      if (sample_id != i)
        return bad("sample_id " + std::to_string(sample_id) + " where " + std::to_string(i) +
                   " belongs (records must be dense and in order)");
      Record& rec = records_[i];
      const uint64_t shard = LoadLe(r + 8, 4);
      rec.seq_len = static_cast<uint32_t>(LoadLe(r + 12, 4));
      if (shard >= shards_.size())
        return bad("shard_id " + std::to_string(shard) + " but the manifest lists " +
                   std::to_string(shards_.size()) + " shards");
      rec.shard = static_cast<uint32_t>(shard);
      if (rec.seq_len == 0) return bad("seq_len 0");
      const uint64_t shard_size = shards_[shard].info.size;
      const auto shapes = Shapes(rec.seq_len);
      const auto dtypes = DTypes();
      uint64_t total = 0;
      for (size_t t = 0; t < kTensors; ++t) {
        rec.offset[t] = LoadLe(r + 16 + 8 * t, 8);
        uint64_t nbytes = DTypeSize(dtypes[t]);
        for (uint64_t d : shapes[t])
          if (__builtin_mul_overflow(nbytes, d, &nbytes))
            return bad(std::string(kNames[t]) + " size overflows");
        if (rec.offset[t] > shard_size || nbytes > shard_size - rec.offset[t])
          return bad(std::string(kNames[t]) + " [" + std::to_string(rec.offset[t]) + ", +" +
                     std::to_string(nbytes) + ") runs past the end of " + shards_[shard].file +
                     " (" + std::to_string(shard_size) + " bytes; truncated?)");
        if (__builtin_add_overflow(total, nbytes, &total)) return bad("sample size overflows");
      }
      CacheSample& s = samples_[i];
      s.key = shards_[shard].file + "/" + std::to_string(i);
      s.bytes = total;
      s.mtime_ns = shards_[shard].info.mtime_ns;
    }
  }
  return Status::OK();
}

Result<std::unique_ptr<CacheSource>> DeepSpecCache::Open(std::unique_ptr<CacheDir> dir,
                                                         const SourceOptions& options) {
  auto cache = std::unique_ptr<DeepSpecCache>(new DeepSpecCache(std::move(dir)));
  LIBSHARD_RETURN_IF_ERROR(cache->ReadManifest(options));
  LIBSHARD_RETURN_IF_ERROR(cache->ReadIndex());
  LIBSHARD_RETURN_IF_ERROR(cache->IndexKeys());
  return std::unique_ptr<CacheSource>(std::move(cache));
}

Result<std::unique_ptr<SourceFile>> DeepSpecCache::OpenSample(uint64_t i) const {
  if (i >= records_.size())
    return Status::InvalidArgument(path() + ": sample " + std::to_string(i) + " out of range (" +
                                   std::to_string(records_.size()) + ")");
  const Record& rec = records_[i];
  const Shard& shard = shards_[rec.shard];
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, dir_->Open(shard.file));
  if (file->size() != shard.info.size)
    return Status::Corruption(dir_->Name(shard.file) + ": " + std::to_string(file->size()) +
                              " bytes now, " + std::to_string(shard.info.size) +
                              " when the cache was opened; the cache changed while being read");
  const auto shapes = Shapes(rec.seq_len);
  const auto dtypes = DTypes();
  std::vector<RangeSampleFile::Range> ranges;
  for (size_t t = 0; t < kTensors; ++t) {
    RangeSampleFile::Range r;
    r.tensor.name = kNames[t];
    r.tensor.dtype = dtypes[t];
    r.tensor.shape = shapes[t];
    r.tensor.nbytes = NumElements(shapes[t]) * DTypeSize(dtypes[t]);  // checked at open
    r.offset = rec.offset[t];
    ranges.push_back(std::move(r));
  }
  return std::unique_ptr<SourceFile>(std::make_unique<RangeSampleFile>(
      dir_->Name(samples_[i].key), std::shared_ptr<const ByteSource>(std::move(file)),
      std::move(ranges), Metadata{}, "deepspec"));
}

}  // namespace

Result<std::unique_ptr<CacheSource>> OpenDeepSpecCache(std::unique_ptr<CacheDir> dir,
                                                       const SourceOptions& options) {
  return DeepSpecCache::Open(std::move(dir), options);
}

}  // namespace libshard::convert
