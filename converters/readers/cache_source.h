// Cache layouts as pack sources: a directory whose manifest and index describe many samples kept
// in a few large files, rather than one file per sample. One reader per layout, behind this
// interface (as the per-file readers sit behind SourceFile):
//
//   deepspec   DeepSpec's target cache (readers/deepspec_cache.h): manifest.json, samples.idx
//              (56 bytes a sample), shard-NNNNN.bin
//   automodel  NeMo AutoModel's offline cache (readers/automodel_cache.h): manifest.json,
//              shard-NNNNNN.safetensors, every tensor stacked along dim 0
//   torchspec  TorchSpec's offline folder (readers/torchspec_folder.h): dataset.json,
//              manifest.jsonl, samples/*.pt
//
// Each sample of a cache is served as a SourceFile (its tensors and metadata, read from the
// cache's files), so pack, verify --against and the schema checks treat it like a file. Its key
// (SourceEntry::rel_path, the provenance path) is how the cache itself names it: docs/guide/
// converting.md, "Caches as sources". Everything a cache holds is untrusted: every count, offset
// and size is checked against the files before use, and no allocation is sized by a number the
// files cannot back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/status.h"
#include "readers/cache_dir.h"
#include "readers/source_file.h"

namespace libshard::convert {

// What a pack source directory is. kAuto: decided from the directory (DetectSourceFormat).
enum class SourceFormat { kAuto, kFiles, kDeepSpec, kAutoModel, kTorchSpec };

// "auto", "files", "deepspec", "automodel", "torchspec".
std::string_view SourceFormatName(SourceFormat format);
// The inverse; InvalidArgument listing the names for anything else.
Result<SourceFormat> ParseSourceFormat(std::string_view text);

// One sample of a cache, as listed when the cache is opened.
struct CacheSample {
  std::string key;       // unique; the sample's provenance path
  uint64_t bytes = 0;    // bytes of the sample in the cache (its tensors, or its file)
  int64_t mtime_ns = 0;  // of the file that holds its tensors
};

// One opened cache. Immutable after opening; OpenSample and HashSample are thread-safe.
class CacheSource {
 public:
  virtual ~CacheSource() = default;
  virtual SourceFormat format() const = 0;
  const std::string& path() const { return dir_->path(); }
  // In the cache's own sample order: sample i is the owner's reader's item i.
  const std::vector<CacheSample>& samples() const { return samples_; }
  // The cache manifest's keys, each as "<format>.<key>" with its JSON text as a string value, and
  // "source_format" (the format's name); recorded as the dataset's attributes.
  const Attributes& attributes() const { return attributes_; }
  // Keys of the manifest left out of attributes() because their JSON text exceeds the 64 KiB a
  // dataset attribute holds (e.g. AutoModel's selected_token_ids): pack names them.
  const std::vector<std::string>& omitted_keys() const { return omitted_keys_; }
  // Sample i as a source file: its tensors, in the order the cache stores them, and its metadata.
  virtual Result<std::unique_ptr<SourceFile>> OpenSample(uint64_t i) const = 0;
  // The provenance content hash of sample i: xxh3-64 of its bytes as they lie in the cache (its
  // tensors' bytes in order; a TorchSpec sample's whole .pt file).
  virtual Result<uint64_t> HashSample(uint64_t i) const;
  // The index of the sample with this key.
  std::optional<uint64_t> Find(std::string_view key) const;

 protected:
  explicit CacheSource(std::unique_ptr<CacheDir> dir) : dir_(std::move(dir)) {}
  // Fills by_key_ from samples_; InvalidArgument naming the key when two samples share one.
  Status IndexKeys();

  std::unique_ptr<CacheDir> dir_;
  std::vector<CacheSample> samples_;
  Attributes attributes_;
  std::vector<std::string> omitted_keys_;
  std::unordered_map<std::string_view, uint64_t> by_key_;  // views into samples_[i].key
};

// What `dir` holds: a cache when its manifest says so, else kFiles (a directory of sample
// files). Corruption naming the file when it has a cache's marker files (samples.idx,
// shard-NNNNNN.safetensors or manifest.jsonl beside its manifest) but the manifest cannot be read
// as that cache's, so a damaged cache is never packed as loose files.
Result<SourceFormat> DetectSourceFormat(const CacheDir& dir, const SourceOptions& options = {});

// Opens the cache in `dir` as `format` (kAuto: DetectSourceFormat; kFiles is InvalidArgument).
Result<std::unique_ptr<CacheSource>> OpenCache(std::unique_ptr<CacheDir> dir, SourceFormat format,
                                               const SourceOptions& options = {});

// A sample whose tensors are byte ranges of one cache file (DeepSpec, AutoModel).
class RangeSampleFile final : public SourceFile {
 public:
  struct Range {
    SourceTensor tensor;
    uint64_t offset = 0;  // in `file`
  };
  RangeSampleFile(std::string path, std::shared_ptr<const ByteSource> file,
                  std::vector<Range> ranges, Metadata metadata, const char* format_name);

  const std::string& path() const override { return path_; }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const Metadata& metadata() const override { return metadata_; }
  Status ReadTensor(size_t t, std::span<std::byte> dst) const override;
  uint64_t file_size() const override { return file_size_; }
  const char* format_name() const override { return format_name_; }
  // xxh3-64 of the tensors' bytes in order, read in chunks.
  Result<uint64_t> Hash() const;

 private:
  std::string path_;
  std::shared_ptr<const ByteSource> file_;
  std::vector<SourceTensor> tensors_;
  std::vector<uint64_t> offsets_;
  Metadata metadata_;
  uint64_t file_size_ = 0;  // the sample's bytes
  const char* format_name_;
};

}  // namespace libshard::convert
