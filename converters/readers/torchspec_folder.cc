#include "readers/torchspec_folder.h"

#include <algorithm>
#include <unordered_set>

#include "libshard/checksum.h"
#include "libshard_support/text.h"
#include "readers/cache_manifest.h"

namespace libshard::convert {

namespace {

constexpr uint64_t kMaxDatasetJsonBytes = uint64_t{1} << 20;
// A manifest line is ~150 bytes; a longer one is not a TorchSpec line.
constexpr size_t kMaxLineBytes = size_t{1} << 20;

// A source file with metadata entries appended (the sample's split).
class WithMetadata final : public SourceFile {
 public:
  WithMetadata(std::unique_ptr<SourceFile> inner, Metadata extra)
      : inner_(std::move(inner)), metadata_(inner_->metadata()) {
    for (auto& e : extra) metadata_.push_back(std::move(e));
  }
  const std::string& path() const override { return inner_->path(); }
  const std::vector<SourceTensor>& tensors() const override { return inner_->tensors(); }
  const Metadata& metadata() const override { return metadata_; }
  Status ReadTensor(size_t t, std::span<std::byte> dst) const override {
    return inner_->ReadTensor(t, dst);
  }
  uint64_t file_size() const override { return inner_->file_size(); }
  const char* format_name() const override { return inner_->format_name(); }

 private:
  std::unique_ptr<SourceFile> inner_;
  Metadata metadata_;
};

class TorchSpecFolder final : public CacheSource {
 public:
  static Result<std::unique_ptr<CacheSource>> Open(std::unique_ptr<CacheDir> dir,
                                                   const SourceOptions& options);
  SourceFormat format() const override { return SourceFormat::kTorchSpec; }
  Result<std::unique_ptr<SourceFile>> OpenSample(uint64_t i) const override;
  Result<uint64_t> HashSample(uint64_t i) const override;

 private:
  TorchSpecFolder(std::unique_ptr<CacheDir> dir, const SourceOptions& options)
      : CacheSource(std::move(dir)), options_(options) {}
  Status ReadManifest();
  Status AddRow(const std::string& line, uint64_t line_no,
                std::unordered_set<std::string>* data_ids);

  struct Row {
    std::string split;
    std::string data_id;
    uint64_t seq_len = 0;
  };
  SourceOptions options_;
  std::vector<Row> rows_;
};

Status TorchSpecFolder::AddRow(const std::string& line, uint64_t line_no,
                               std::unordered_set<std::string>* data_ids) {
  const std::string where = dir_->Name("manifest.jsonl") + " line " + std::to_string(line_no);
  LIBSHARD_ASSIGN_OR_RETURN(CacheJson row, ParseCacheJson(line, where));
  auto bad = [&](const std::string& what) {
    return Status::Corruption(where + ": " + what + "; the TorchSpec manifest is damaged");
  };
  if (!row.is_object()) return bad("not a JSON object");
  Row r;
  auto split = row.find("split");
  if (split == row.end() || (*split != "train" && *split != "eval"))
    return bad("split is not \"train\" or \"eval\"");
  r.split = split->get<std::string>();
  auto id = row.find("data_id");
  if (id != row.end() && id->is_string()) {
    r.data_id = id->get<std::string>();
  } else if (id != row.end() && id->is_number_integer()) {
    r.data_id = id->dump();
  } else {
    return bad("data_id is not a string or an integer");
  }
  if (!data_ids->insert(r.data_id).second)
    return bad("data_id '" + PrintableBytes(r.data_id) + "' appears twice");
  auto file = row.find("file");
  if (file == row.end() || !file->is_string() || !IsPlainRelativePath(file->get<std::string>()))
    return bad("file is not a relative path beneath the folder");
  auto seq_len = JsonUnsigned(row, "seq_len");
  if (!seq_len) return bad("seq_len is not a non-negative integer");
  r.seq_len = *seq_len;
  CacheSample s;
  s.key = file->get<std::string>();
  auto info = dir_->Stat(s.key);
  if (!info.ok()) return info.status().WithContext(where);
  s.bytes = info->size;
  s.mtime_ns = info->mtime_ns;
  samples_.push_back(std::move(s));
  rows_.push_back(std::move(r));
  return Status::OK();
}

Status TorchSpecFolder::ReadManifest() {
  LIBSHARD_ASSIGN_OR_RETURN(CacheJson ds,
                            ReadCacheJsonObject(*dir_, "dataset.json", kMaxDatasetJsonBytes));
  if (!ds.contains("version") || ds["version"] != 1)
    return Status::Unsupported(dir_->Name("dataset.json") + ": TorchSpec offline dataset version " +
                               (ds.contains("version") ? ds["version"].dump() : "(none)") +
                               "; libshard reads version 1");
  ManifestAttributes(ds, SourceFormat::kTorchSpec, {}, &attributes_, &omitted_keys_);

  const std::string where = dir_->Name("manifest.jsonl");
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> f, dir_->Open("manifest.jsonl"));
  std::unordered_set<std::string> data_ids;
  std::vector<std::byte> chunk(static_cast<size_t>(std::min<uint64_t>(f->size(), 1 << 20)));
  std::string line;
  uint64_t line_no = 0;
  auto finish_line = [&]() -> Status {
    ++line_no;
    const bool blank = std::all_of(line.begin(), line.end(), [](char c) {
      return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
    });
    Status st = blank ? Status::OK() : AddRow(line, line_no, &data_ids);
    line.clear();
    return st;
  };
  for (uint64_t off = 0; off < f->size(); off += chunk.size()) {
    const std::span<std::byte> part(
        chunk.data(), static_cast<size_t>(std::min<uint64_t>(chunk.size(), f->size() - off)));
    LIBSHARD_RETURN_IF_ERROR(f->ReadAt(off, part, "manifest lines"));
    for (std::byte b : part) {
      const char c = static_cast<char>(b);
      if (c == '\n') {
        LIBSHARD_RETURN_IF_ERROR(finish_line());
        continue;
      }
      if (line.size() >= kMaxLineBytes)
        return Status::Corruption(where + " line " + std::to_string(line_no + 1) +
                                  ": longer than " + std::to_string(kMaxLineBytes) +
                                  " bytes; not a TorchSpec manifest line");
      line.push_back(c);
    }
  }
  if (!line.empty()) LIBSHARD_RETURN_IF_ERROR(finish_line());
  return Status::OK();
}

Result<std::unique_ptr<CacheSource>> TorchSpecFolder::Open(std::unique_ptr<CacheDir> dir,
                                                           const SourceOptions& options) {
  auto folder = std::unique_ptr<TorchSpecFolder>(new TorchSpecFolder(std::move(dir), options));
  LIBSHARD_RETURN_IF_ERROR(folder->ReadManifest());
  LIBSHARD_RETURN_IF_ERROR(folder->IndexKeys());
  return std::unique_ptr<CacheSource>(std::move(folder));
}

Result<std::unique_ptr<SourceFile>> TorchSpecFolder::OpenSample(uint64_t i) const {
  if (i >= samples_.size())
    return Status::InvalidArgument(path() + ": sample " + std::to_string(i) + " out of range (" +
                                   std::to_string(samples_.size()) + ")");
  const Row& row = rows_[i];
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, dir_->Open(samples_[i].key));
  const std::string name = file->name();
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<SourceFile> pt, OpenSource(std::move(file), options_));
  const MetaValue* id = nullptr;
  for (const auto& [k, v] : pt->metadata())
    if (k == "data_id") id = &v;
  if (id == nullptr || !std::holds_alternative<std::string>(*id) ||
      std::get<std::string>(*id) != row.data_id)
    return Status::Corruption(name + ": its data_id does not match manifest.jsonl's '" +
                              PrintableBytes(row.data_id) +
                              "' (TorchSpec's reader refuses it too)");
  // TorchSpec's OfflineDataset.load refuses a sample without these tensors.
  for (const char* needed : {"input_ids", "hidden_states"}) {
    bool found = false;
    for (const SourceTensor& t : pt->tensors()) found = found || t.name == needed;
    if (!found)
      return Status::Corruption(name + ": no tensor '" + needed + "', which TorchSpec's reader "
                                "needs in every sample (it refuses this one: \"Offline sample has "
                                "missing tensors\"); the sample is damaged or not TorchSpec's");
  }
  for (const SourceTensor& t : pt->tensors()) {
    if (t.name != "input_ids") continue;
    if (NumElements(t.shape) != row.seq_len)
      return Status::Corruption(name + ": input_ids has " + std::to_string(NumElements(t.shape)) +
                                " tokens, manifest.jsonl says seq_len " +
                                std::to_string(row.seq_len));
  }
  Metadata extra;
  extra.push_back({"split", MetaValue(row.split)});
  return std::unique_ptr<SourceFile>(
      std::make_unique<WithMetadata>(std::move(pt), std::move(extra)));
}

Result<uint64_t> TorchSpecFolder::HashSample(uint64_t i) const {
  if (i >= samples_.size()) return Status::InvalidArgument("sample out of range");
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, dir_->Open(samples_[i].key));
  Xxh3Stream hash;
  std::vector<std::byte> buf(static_cast<size_t>(std::clamp<uint64_t>(file->size(), 1, 4 << 20)));
  for (uint64_t off = 0; off < file->size(); off += buf.size()) {
    const std::span<std::byte> part(
        buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), file->size() - off)));
    LIBSHARD_RETURN_IF_ERROR(file->ReadAt(off, part, "the provenance hash"));
    hash.Update(part);
  }
  return hash.Digest();
}

}  // namespace

Result<std::unique_ptr<CacheSource>> OpenTorchSpecFolder(std::unique_ptr<CacheDir> dir,
                                                         const SourceOptions& options) {
  return TorchSpecFolder::Open(std::move(dir), options);
}

}  // namespace libshard::convert
