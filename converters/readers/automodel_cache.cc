#include "readers/automodel_cache.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

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

// The two layouts of AutoModel 0.7's offline caches, as its readers read them: the format_version
// each reads (offline_cache.read_manifest refuses any other) and the tensors it reads from every
// shard (its disk keys; a shard without one fails at the first item).
struct Layout {
  const char* name;      // the reader's cache name
  const char* producer;  // what writes it
  int64_t format_version;
};
constexpr Layout kEagle3{"EAGLE-3", "precompute_eagle3", 2};
constexpr Layout kDSpark{"DSpark", "precompute_dspark", 1};
constexpr const char* kEagle3Common[] = {"input_ids", "attention_mask", "loss_mask",
                                         "aux_hidden_states", "position_mask"};
constexpr const char* kDSparkKeys[] = {"input_ids", "loss_mask", "target_hidden_states",
                                       "target_last_hidden_states"};

class AutoModelCache final : public CacheSource {
 public:
  static Result<std::unique_ptr<CacheSource>> Open(std::unique_ptr<CacheDir> dir,
                                                   const SourceOptions& options);
  SourceFormat format() const override { return SourceFormat::kAutoModel; }
  Result<std::unique_ptr<SourceFile>> OpenSample(uint64_t i) const override;

 private:
  explicit AutoModelCache(std::unique_ptr<CacheDir> dir) : CacheSource(std::move(dir)) {}
  Status ReadShard(uint64_t k, const SourceOptions& options);
  // What AutoModel's own reader of the cache's layout refuses, refused here too, naming the file,
  // the field and both values: a format_version it does not read, a manifest field it needs
  // missing or of another type, a target_probs_topk the shards contradict, a shard without a
  // tensor it reads.
  Status CheckReaderRules(const CacheJson& m) const;
  // The row shape of tensor `name` in shard k, or nullptr.
  const SourceTensor* Find(size_t k, std::string_view name) const;

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
  LIBSHARD_RETURN_IF_ERROR(cache->CheckReaderRules(m));
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

const SourceTensor* AutoModelCache::Find(size_t k, std::string_view name) const {
  for (const Column& c : shards_[k].columns)
    if (c.row.name == name) return &c.row;
  return nullptr;
}

std::string RowShape(const SourceTensor& t) {
  std::string out = "[n";
  for (uint64_t d : t.shape) out += ", " + std::to_string(d);
  return out + "]";
}

Status AutoModelCache::CheckReaderRules(const CacheJson& m) const {
  const std::string manifest = dir_->Name("manifest.json");
  const int64_t version = m["format_version"].get<int64_t>();  // an integer: checked at open
  // The layout, by the tensors the shards hold (the manifest says only its version).
  auto holds = [&](std::string_view name) { return !shards_.empty() && Find(0, name) != nullptr; };
  const Layout* layout = nullptr;
  if (holds("aux_hidden_states") || holds("target_probs") || holds("target_probs_values"))
    layout = &kEagle3;
  else if (holds("target_hidden_states") || holds("target_last_hidden_states"))
    layout = &kDSpark;
  else if (version == kEagle3.format_version)
    layout = &kEagle3;
  else if (version == kDSpark.format_version)
    layout = &kDSpark;
  if (layout == nullptr)
    return Status::Unsupported(
        manifest + ": format_version " + std::to_string(version) + ", and the shards hold "
        "neither an EAGLE-3 cache's tensors nor a DSpark cache's; NeMo AutoModel 0.7 reads EAGLE-3 "
        "caches of format_version 2 and DSpark caches of format_version 1 (regenerate the cache "
        "with the current AutoModel and pack it again)");
  if (version != layout->format_version)
    return Status::Unsupported(
        manifest + ": format_version " + std::to_string(version) + ", but the shards hold " +
        (layout == &kEagle3 ? "an " : "a ") + layout->name + " cache, whose AutoModel reader "
        "reads format_version " + std::to_string(layout->format_version) + " only (and refuses " +
        std::to_string(version) + "); regenerate the cache with the current " + layout->producer +
        " and pack it again");

  // The tensors the reader reads from every shard, and why.
  std::vector<std::string> keys;
  std::string why;
  int64_t vocab = 0, topk = 0;
  bool compressed = false;
  if (layout == &kEagle3) {
    for (const char* k : kEagle3Common) keys.emplace_back(k);
    auto v = m.find("draft_vocab_size");
    if (v == m.end() || !v->is_number_integer() || v->get<int64_t>() <= 0)
      return Status::Corruption(
          manifest + ": draft_vocab_size is " +
          (v == m.end() ? std::string("missing") : v->dump()) +
          ", not a positive integer; AutoModel's EAGLE-3 reader needs it (the width of "
          "target_probs); the manifest is damaged or incomplete");
    vocab = v->get<int64_t>();
    auto t = m.find("target_probs_topk");
    if (t != m.end() && !t->is_null() && !t->is_number_integer())
      return Status::Corruption(manifest + ": target_probs_topk is " + t->dump() +
                                ", not null or an integer (the k of a top-k cache); the "
                                "manifest is damaged");
    topk = (t == m.end() || t->is_null()) ? 0 : t->get<int64_t>();
    // eagle3_cache.is_compressed: a positive k below the vocabulary's width.
    compressed = topk > 0 && topk < vocab;
    const std::string said = "manifest.json's target_probs_topk " +
                             (t == m.end() ? std::string("(absent)") : t->dump()) +
                             " with draft_vocab_size " + std::to_string(vocab);
    if (compressed) {
      keys.emplace_back("target_probs_values");
      keys.emplace_back("target_probs_indices");
      why = said + " says the cache stores the top-" + std::to_string(topk) +
            " target_probs_values + target_probs_indices";
    } else {
      keys.emplace_back("target_probs");
      why = said + " says the cache stores the full target_probs";
    }
  } else {
    for (const char* k : kDSparkKeys) keys.emplace_back(k);
  }
  for (size_t k = 0; k < shards_.size(); ++k) {
    const std::string shard = dir_->Name(shards_[k].file);
    for (const std::string& key : keys) {
      if (Find(k, key) != nullptr) continue;
      std::string held;
      for (const Column& c : shards_[k].columns)
        held += (held.empty() ? "" : ", ") + c.row.name + " " + RowShape(c.row);
      return Status::Corruption(
          shard + ": no tensor '" + key + "', which AutoModel's " + layout->name +
          " reader reads from every shard" + (why.empty() ? std::string() : " (" + why + ")") +
          "; the shard holds " + (held.empty() ? std::string("nothing") : held) +
          ": the manifest and the shards disagree, or the cache is damaged");
    }
    if (layout != &kEagle3) continue;
    // The width of the stored distribution, as the manifest declares it.
    auto width = [&](const char* name, int64_t want) -> Status {
      const SourceTensor* t = Find(k, name);
      const int64_t got = t->shape.empty() ? -1 : static_cast<int64_t>(t->shape.back());
      if (got == want) return Status::OK();
      return Status::Corruption(
          shard + ": " + name + " " + RowShape(*t) + " is " + std::to_string(got) +
          " wide, but " + why + " (" + std::to_string(want) + " wide): the manifest and the "
          "shards disagree (a cache made with another " +
          (compressed ? "target_probs_topk" : "draft_vocab_size") + "?)");
    };
    if (compressed) {
      LIBSHARD_RETURN_IF_ERROR(width("target_probs_values", topk));
      LIBSHARD_RETURN_IF_ERROR(width("target_probs_indices", topk));
    } else {
      LIBSHARD_RETURN_IF_ERROR(width("target_probs", vocab));
    }
  }
  return Status::OK();
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
