#include "dataset/index_reader.h"

#include <fcntl.h>

#include <atomic>
#include <mutex>
#include <optional>

#include "format/bytes.h"
#include "format/index.h"
#include "format/legacy/index_v1.h"
#include "io/file.h"
#include "io/filesystem.h"

namespace libshard::internal {

namespace {

constexpr const char* kRepack = "; the dataset is damaged, re-run libshard pack";

// Largest version 1 index Open reads into memory: ~2^28 samples of a typical EAGLE-3 schema.
// The manifest's index.size must match the file's size first, so a damaged manifest cannot make
// Open allocate more than the file holds. (Version 2 reads its head and lengths, each bounded by
// the file size and checked against the header's counts first.)
constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 30;

Result<std::vector<std::byte>> ReadRange(const io::File& file, uint64_t offset, uint64_t size) {
  std::vector<std::byte> bytes(size);
  LIBSHARD_RETURN_IF_ERROR(file.PReadExact(bytes.data(), size, offset));
  return bytes;
}

// Version 1: the whole index in memory, checked at Open (FORMAT.md §3.7).
class IndexReaderV1 final : public IndexReader {
 public:
  static Result<std::unique_ptr<IndexReader>> Open(const io::File& file, const std::string& path,
                                                   uint64_t size) {
    if (size > kMaxIndexBytes)
      return Status::ResourceExhausted(path + ": " + std::to_string(size) +
                                       " bytes is more than the largest index this libshard "
                                       "reads (" + std::to_string(kMaxIndexBytes) + ")");
    auto r = std::make_unique<IndexReaderV1>();
    r->bytes_ = AllocateAligned(size, 4096);
    if (!r->bytes_)
      return Status::ResourceExhausted(path + ": cannot allocate " + std::to_string(size) +
                                       " bytes to read the index");
    LIBSHARD_RETURN_IF_ERROR(file.PReadExact(r->bytes_.get(), size, 0));
    LIBSHARD_ASSIGN_OR_RETURN(r->view_, format::legacy::IndexV1View::Parse({r->bytes_.get(), size}, path));
    r->codecs_.resize(r->view_.schema().fields.size());
    return std::unique_ptr<IndexReader>(std::move(r));
  }

  uint32_t index_version() const override { return format::kIndexVersion1; }
  uint64_t sample_count() const override { return view_.sample_count(); }
  const Schema& schema() const override { return view_.schema(); }
  const std::vector<format::IndexShard>& shards() const override { return view_.shards(); }
  uint64_t checksum() const override { return view_.checksum(); }
  uint64_t total_raw_bytes() const override { return view_.total_raw_bytes(); }
  bool has_shard_uids() const override { return view_.has_shard_uids(); }
  uint64_t resident_bytes() const override { return view_.file_size(); }
  uint64_t length(uint64_t i) const override { return view_.record(i).length; }
  void Lengths(std::vector<uint64_t>* out) const override {
    out->resize(view_.sample_count());
    for (uint64_t i = 0; i < out->size(); ++i) (*out)[i] = view_.record(i).length;
  }
  Status Lookup(uint64_t i, format::SampleRecord* record,
                std::vector<uint64_t>* dims) const override {
    *record = view_.record(i);
    if (dims) {
      dims->resize(view_.dims_per_sample());
      for (uint64_t j = 0; j < dims->size(); ++j) (*dims)[j] = view_.dim(i, j);
    }
    return Status::OK();
  }
  Result<std::string> SourcePath(uint64_t i) const override {
    return std::string(view_.source_path(i));
  }
  Result<std::string> MetadataBytes(uint64_t i) const override {
    auto m = view_.metadata_bytes(i);
    return std::string(reinterpret_cast<const char*>(m.data()), m.size());
  }
  Result<format::IndexSample> Entry(uint64_t i) const override { return view_.Entry(i); }
  const std::vector<format::FieldCodec>& codecs() const override { return codecs_; }
  Status FieldStoredSizes(uint64_t, std::vector<uint64_t>* sizes) const override {
    sizes->assign(view_.schema().fields.size(), 0);
    return Status::OK();
  }
  bool has_field_checksums() const override { return false; }
  Status FieldChecksums(uint64_t, std::vector<uint64_t>* sums) const override {
    sums->clear();
    return Status::OK();
  }

 private:
  std::shared_ptr<std::byte[]> bytes_;
  format::legacy::IndexV1View view_;
  std::vector<format::FieldCodec> codecs_;  // all raw
};

// Version 2: head and lengths at Open, blocks on first use (FORMAT.md §3.8.7).
class CurrentIndexReader final : public IndexReader {
 public:
  static Result<std::unique_ptr<IndexReader>> Open(io::File file, const std::string& path,
                                                   uint64_t size) {
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::byte> header,
                              ReadRange(file, 0, format::kIndexHeaderSize));
    LIBSHARD_ASSIGN_OR_RETURN(format::IndexLayout layout,
                              format::Index::ParseHeader(header, size, path));
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::byte> head, ReadRange(file, 0, layout.head_size));
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::byte> lengths,
                              ReadRange(file, layout.lengths_offset, layout.lengths_size));
    auto r = std::make_unique<CurrentIndexReader>();
    LIBSHARD_ASSIGN_OR_RETURN(
        r->index_, format::Index::Parse(std::move(head), std::move(lengths), size, path));
    r->file_ = std::move(file);
    r->path_ = path;
    r->slots_ = std::make_unique<Slot[]>(r->index_.block_count());
    r->resident_ = r->index_.resident_bytes();
    return std::unique_ptr<IndexReader>(std::move(r));
  }

  uint32_t index_version() const override { return index_.version(); }
  uint64_t sample_count() const override { return index_.sample_count(); }
  const Schema& schema() const override { return index_.schema(); }
  const std::vector<format::IndexShard>& shards() const override { return index_.shards(); }
  uint64_t checksum() const override { return index_.checksum(); }
  uint64_t total_raw_bytes() const override { return index_.total_raw_bytes(); }
  bool has_shard_uids() const override { return index_.has_shard_uids(); }
  uint64_t resident_bytes() const override {
    return resident_.load(std::memory_order_relaxed);
  }
  uint64_t length(uint64_t i) const override { return index_.length(i); }
  void Lengths(std::vector<uint64_t>* out) const override { index_.Lengths(out); }
  Status Lookup(uint64_t i, format::SampleRecord* record,
                std::vector<uint64_t>* dims) const override {
    LIBSHARD_ASSIGN_OR_RETURN(const format::IndexBlock* block, Block(i));
    *record = index_.Record(*block, i);
    if (dims) index_.Dims(*block, i, dims);
    return Status::OK();
  }
  Result<std::string> SourcePath(uint64_t i) const override {
    LIBSHARD_ASSIGN_OR_RETURN(const format::IndexBlock* block, Block(i));
    return index_.SourcePath(*block, i);
  }
  Result<std::string> MetadataBytes(uint64_t i) const override {
    LIBSHARD_ASSIGN_OR_RETURN(const format::IndexBlock* block, Block(i));
    auto m = index_.Metadata(*block, i);
    return std::string(reinterpret_cast<const char*>(m.data()), m.size());
  }
  Result<format::IndexSample> Entry(uint64_t i) const override {
    LIBSHARD_ASSIGN_OR_RETURN(const format::IndexBlock* block, Block(i));
    return index_.Entry(*block, i);
  }
  const std::vector<format::FieldCodec>& codecs() const override { return index_.codecs(); }
  Status FieldStoredSizes(uint64_t i, std::vector<uint64_t>* sizes) const override {
    LIBSHARD_ASSIGN_OR_RETURN(const format::IndexBlock* block, Block(i));
    index_.FieldStoredSizes(*block, i, sizes);
    return Status::OK();
  }
  bool has_field_checksums() const override { return index_.has_field_checksums(); }
  Status FieldChecksums(uint64_t i, std::vector<uint64_t>* sums) const override {
    LIBSHARD_ASSIGN_OR_RETURN(const format::IndexBlock* block, Block(i));
    index_.FieldChecksums(*block, i, sums);
    return Status::OK();
  }
  bool has_block_tables() const override { return index_.has_block_tables(); }
  Result<format::BlockTable> BlockTable(uint64_t i) const override {
    LIBSHARD_ASSIGN_OR_RETURN(const format::IndexBlock* block, Block(i));
    const format::Index::TableRef ref = index_.Table(*block, i);
    std::vector<uint64_t> dims;
    index_.Dims(*block, i, &dims);
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadTable(ref));
    return index_.CheckTable(i, ref, bytes, dims, index_.Record(*block, i).flags);
  }
  Result<std::string> BlockTableBytes(uint64_t i) const override {
    LIBSHARD_ASSIGN_OR_RETURN(format::BlockTable table, BlockTable(i));
    return format::EncodeBlockTable(table);  // the bytes as stored: the encoding is canonical
  }

 private:
  // One block's state: loaded (and checked) at most once; a failure is kept and returned to
  // every later use of the block.
  struct Slot {
    std::mutex mu;
    std::atomic<bool> done{false};
    std::optional<format::IndexBlock> block;
    Status error;
  };

  Result<const format::IndexBlock*> Block(uint64_t i) const {
    Slot& slot = slots_[index_.block_of(i)];
    if (!slot.done.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(slot.mu);
      if (!slot.done.load(std::memory_order_relaxed)) {
        Load(index_.block_of(i), &slot);
        slot.done.store(true, std::memory_order_release);
      }
    }
    if (!slot.block) return slot.error;
    return &*slot.block;
  }

  // A sample's block table bytes (FORMAT.md §3.10.1), bounded by the tables part (CheckRecord).
  Result<std::vector<std::byte>> ReadTable(const format::Index::TableRef& ref) const {
    if (ref.size == 0) return std::vector<std::byte>();
    auto bytes = ReadRange(file_, ref.offset, ref.size);
    if (!bytes.ok())
      return bytes.status().WithContext(
          path_ + ": reading a block table (" + std::to_string(ref.size) + " bytes at offset " +
          std::to_string(ref.offset) + "; the index changed after the dataset was opened, "
          "reopen it)");
    return bytes;
  }

  void Load(uint64_t b, Slot* slot) const {
    const uint64_t offset = index_.block_offset(b), size = index_.block_size(b);
    auto bytes = ReadRange(file_, offset, size);
    if (!bytes.ok()) {
      // A file that shrank since Open fails here: it was changed under the open dataset.
      slot->error = bytes.status().WithContext(
          path_ + ": reading index block " + std::to_string(b) + " (" + std::to_string(size) +
          " bytes at offset " + std::to_string(offset) +
          "; the index changed after the dataset was opened, reopen it)");
      return;
    }
    auto block = index_.ParseBlock(b, std::move(bytes).value());
    if (!block.ok()) {
      slot->error = block.status();
      return;
    }
    slot->block.emplace(std::move(block).value());
    resident_.fetch_add(size, std::memory_order_relaxed);
  }

  format::Index index_;
  io::File file_;
  std::string path_;
  std::unique_ptr<Slot[]> slots_;
  mutable std::atomic<uint64_t> resident_{0};
};

}  // namespace

Result<std::unique_ptr<IndexReader>> IndexReader::Open(const std::string& path,
                                                       uint64_t expected_size) {
  LIBSHARD_ASSIGN_OR_RETURN(io::File file, io::File::Open(path, O_RDONLY));
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t size, file.Size());
  if (size != expected_size)
    return Status::Corruption(path + ": size " + std::to_string(size) + " != " +
                              std::to_string(expected_size) +
                              " recorded in manifest.json (truncated or replaced)" + kRepack);
  std::vector<std::byte> first(std::min<uint64_t>(size, format::kIndexHeaderSize));
  LIBSHARD_RETURN_IF_ERROR(file.PReadExact(first.data(), first.size(), 0));
  LIBSHARD_ASSIGN_OR_RETURN(uint32_t index_version, format::PeekIndexVersion(first, path));
  if (index_version == format::kIndexVersion1) return IndexReaderV1::Open(file, path, size);
  return CurrentIndexReader::Open(std::move(file), path, size);
}

}  // namespace libshard::internal
