// The index (index.h): sample blocks, checked on first use (ParseBlock, FORMAT.md §3.8.7), the
// records read from them, the stored layout of a sample (§3.8.4), and where a sample's block
// table lies and its check (§3.10.1, §3.10.3).
#include "format/index.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_set>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index_internal.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"

namespace libshard::format {

using index_internal::kDamaged;
using index_internal::GetUN;

bool ComputeStoredLayout(std::span<const FieldCodec> codecs, std::span<const uint64_t> sizes,
                         std::span<const uint64_t> stored_sizes, std::vector<uint64_t>* offsets,
                         uint64_t* total) {
  uint64_t off = 0;
  if (offsets) offsets->assign(sizes.size(), 0);
  for (size_t f = 0; f < sizes.size(); ++f) {
    const bool raw = codecs.empty() || codecs[f].codec == 0;
    const uint64_t n = raw ? sizes[f] : (f < stored_sizes.size() ? stored_sizes[f] : 0);
    if (!CheckedAlignUp(off, kTensorAlignment, &off)) return false;
    if (offsets) (*offsets)[f] = off;
    if (!CheckedAdd(off, n, &off)) return false;
  }
  *total = off;
  return true;
}

uint64_t Index::block_size(uint64_t b) const {
  const uint64_t end = b + 1 < block_count() ? blocks_[2 * (b + 1)] : tables_offset_;
  return end - blocks_[2 * b];
}

uint64_t Index::length(uint64_t i) const {
  return GetUN(lengths_.data() + i * length_width_, length_width_);
}

void Index::Lengths(std::vector<uint64_t>* out) const {
  out->resize(n_);
  const std::byte* p = lengths_.data();
  switch (length_width_) {
    case 0: std::fill(out->begin(), out->end(), 0); break;
    case 2: for (uint64_t i = 0; i < n_; ++i) (*out)[i] = GetU16(p + 2 * i); break;
    case 4: for (uint64_t i = 0; i < n_; ++i) (*out)[i] = GetU32(p + 4 * i); break;
    default:
      for (uint64_t i = 0; i < n_; ++i) (*out)[i] = GetUN(p + i * length_width_, length_width_);
  }
}

uint64_t Index::Column(const std::byte* record, size_t c) const {
  return GetUN(record + column_[c], width_[c]);
}

const std::byte* Index::RecordPtr(const IndexBlock& block, uint64_t i) const {
  return block.bytes_.data() + (i - block.first_) * record_width_;
}

void Index::AreaRange(const IndexBlock& block, uint64_t k, size_t end_column,
                        uint64_t* begin, uint64_t* end) const {
  const std::byte* r = block.bytes_.data() + k * record_width_;
  *begin = k == 0 ? 0 : Column(r - record_width_, end_column);
  *end = Column(r, end_column);
}

SampleRecord Index::Record(const IndexBlock& block, uint64_t i) const {
  const std::byte* p = RecordPtr(block, i);
  SampleRecord r;
  r.shard = static_cast<uint32_t>(Column(p, kColShard));
  r.offset = Column(p, kColOffsetPages) * kSampleAlignment;
  r.checksum = Column(p, kColChecksum);
  r.flags = static_cast<uint32_t>(Column(p, kColFlags));
  r.source_bytes = Column(p, kColSourceBytes);
  r.source_mtime_ns = static_cast<int64_t>(Column(p, kColSourceMtime));
  r.source_hash = Column(p, kColSourceHash);
  r.length = length(i);
  // Sizes follow from the layout (checked by ParseBlock, so no overflow here).
  std::vector<uint64_t> dims, stored;
  Dims(block, i, &dims);
  PayloadLayout layout;
  (void)ComputeLayout(schema_, dims, &layout);
  r.raw_size = layout.raw_size;
  if (width_[kColStoredSize] != 0) {
    r.stored_size = Column(p, kColStoredSize);
  } else {
    FieldStoredSizes(block, i, &stored);
    (void)ComputeStoredLayout(codecs_, layout.sizes, stored, nullptr, &r.stored_size);
  }
  return r;
}

void Index::Dims(const IndexBlock& block, uint64_t i, std::vector<uint64_t>* dims) const {
  const std::byte* p = RecordPtr(block, i);
  dims->resize(d_);
  for (uint64_t j = 0; j < d_; ++j) {
    const DimInfo& di = dims_[j];
    (*dims)[j] = di.kind == DimKind::kConstant ? di.value
                 : di.kind == DimKind::kLength ? length(i)
                                               : GetUN(p + di.column, di.width);
  }
}

void Index::FieldStoredSizes(const IndexBlock& block, uint64_t i,
                               std::vector<uint64_t>* out) const {
  out->assign(schema_.fields.size(), 0);
  if (!any_codec_) return;
  const std::byte* p = RecordPtr(block, i);
  for (size_t f = 0; f < out->size(); ++f)
    if (stored_width_[f]) (*out)[f] = GetUN(p + stored_column_[f], stored_width_[f]);
}

void Index::FieldChecksums(const IndexBlock& block, uint64_t i,
                             std::vector<uint64_t>* out) const {
  out->resize(schema_.fields.size());
  const std::byte* p = RecordPtr(block, i) + checksum_column_;
  for (size_t f = 0; f < out->size(); ++f) (*out)[f] = GetU32(p + kFieldChecksumWidth * f);
}

Index::TableRef Index::Table(const IndexBlock& block, uint64_t i) const {
  const std::byte* p = RecordPtr(block, i) + table_column_;
  TableRef ref;
  ref.size = GetUN(p + table_offset_width_, table_size_width_);
  if (ref.size == 0) return ref;
  ref.offset = tables_offset_ + GetUN(p, table_offset_width_);  // checked by CheckRecord
  ref.checksum = GetU32(p + table_offset_width_ + table_size_width_);
  return ref;
}

Result<BlockTable> Index::CheckTable(uint64_t i, const TableRef& ref,
                                     std::span<const std::byte> bytes,
                                     std::span<const uint64_t> dims, uint32_t sample_flags) const {
  auto bad = [&](const std::string& what) {
    return Status::Corruption(file_ + ": sample " + std::to_string(i) + ": block table (" +
                              std::to_string(ref.size) + " bytes at offset " +
                              std::to_string(ref.offset) + "): " + what + kDamaged);
  };
  if (bytes.size() != ref.size)
    return Status::InvalidArgument(file_ + ": CheckTable needs the table's " +
                                   std::to_string(ref.size) + " bytes");
  const uint64_t sum = bytes.empty() ? 0 : BlockTableChecksum(bytes);  // none: all 0 (§3.10.1)
  if (sum != ref.checksum)
    return bad("checksum mismatch: stored " + Hex16(ref.checksum).substr(8) + ", computed " +
               Hex16(sum).substr(8) + " (the index changed or is damaged)");
  std::vector<uint16_t> codecs;
  if (any_codec_)
    for (const FieldCodec& c : codecs_) codecs.push_back(c.codec);
  const std::vector<FieldRows> rows = SampleFieldRows(schema_, dims, codecs);
  Result<BlockTable> t = ParseBlockTable(bytes, rows, (sample_flags & kFlagZstd) != 0);
  if (!t.ok()) return bad(t.status().message());
  return t;
}

std::string Index::SourcePath(const IndexBlock& block, uint64_t i) const {
  const uint64_t k = i - block.first_;
  std::string path;
  for (uint64_t j = k - k % kPathRestartInterval; j <= k; ++j) {
    uint64_t begin = 0, end = 0;
    AreaRange(block, j, kColPathEnd, &begin, &end);
    if (begin == end) {
      path.clear();
      continue;
    }
    const std::byte* e = block.bytes_.data() + block.path_area_ + begin;
    const uint16_t shared = GetU16(e);
    path.resize(shared);
    path.append(reinterpret_cast<const char*>(e + 2), end - begin - 2);
  }
  return path;
}

std::span<const std::byte> Index::Metadata(const IndexBlock& block, uint64_t i) const {
  uint64_t begin = 0, end = 0;
  AreaRange(block, i - block.first_, kColMetaEnd, &begin, &end);
  return {block.bytes_.data() + block.meta_area_ + begin, end - begin};
}

IndexSample Index::Entry(const IndexBlock& block, uint64_t i) const {
  IndexSample s;
  s.record = Record(block, i);
  Dims(block, i, &s.dims);
  PayloadLayout layout;
  (void)ComputeLayout(schema_, s.dims, &layout);
  s.tensor_offsets = layout.offsets;
  s.tensor_sizes = layout.sizes;
  auto m = Metadata(block, i);
  s.metadata.assign(reinterpret_cast<const char*>(m.data()), m.size());
  s.source_path = SourcePath(block, i);
  if (any_codec_) FieldStoredSizes(block, i, &s.field_stored_sizes);
  if (field_checksums_) FieldChecksums(block, i, &s.field_checksums);
  return s;
}

Status Index::CheckRecord(const IndexBlock& block, uint64_t k, std::string* prev_path) const {
  const uint64_t i = block.first_ + k;
  const std::byte* p = block.bytes_.data() + k * record_width_;
  auto bad = [&](const std::string& what) {
    return Status::Corruption(file_ + ": sample " + std::to_string(i) + " (block " +
                              std::to_string(block_of(i)) + " at offset " +
                              std::to_string(block_offset(block_of(i))) + ", record " +
                              std::to_string(k) + "): " + what + kDamaged);
  };
  const uint64_t shard = Column(p, kColShard);
  if (shard >= shards_.size())
    return bad("shard " + std::to_string(shard) + " out of range (" +
               std::to_string(shards_.size()) + " shards)");
  const IndexShard& sh = shards_[shard];
  const uint64_t pages = Column(p, kColOffsetPages);
  uint64_t offset = 0;
  if (pages == 0 || !CheckedMul(pages, kSampleAlignment, &offset))
    return bad("offset of " + std::to_string(pages) + " pages is not past the shard header");
  const uint64_t flags = Column(p, kColFlags);
  if (flags & ~uint64_t{kKnownSampleFlags})
    return bad("unknown flag bits 0x" + Hex16(flags & ~uint64_t{kKnownSampleFlags}));
  if ((flags & kFlagByteShuffle) && !(flags & kFlagZstd)) return bad("byte-shuffle flag without zstd");
  if ((flags & kFlagZstd) && any_codec_)
    return bad("whole-sample zstd in a dataset with field codecs");
  std::vector<uint64_t> dims, stored;
  Dims(block, i, &dims);
  PayloadLayout layout;
  Status ls = ComputeLayout(schema_, dims, &layout);
  if (!ls.ok()) return bad(ls.message());
  FieldStoredSizes(block, i, &stored);
  uint64_t stored_layout = 0;
  if (!ComputeStoredLayout(codecs_, layout.sizes, stored, nullptr, &stored_layout) ||
      stored_layout > kMaxSampleBytes)
    return bad("stored layout overflows");
  const uint64_t stored_size =
      width_[kColStoredSize] ? Column(p, kColStoredSize) : stored_layout;
  if (stored_size > kMaxSampleBytes || layout.raw_size > kMaxSampleBytes)
    return bad("stored or raw size exceeds the limit");
  if (!(flags & kFlagZstd) && stored_size != stored_layout)
    return bad("stored_size " + std::to_string(stored_size) + " != " +
               std::to_string(stored_layout) + " from the layout");
  if ((flags & kFlagZstd) && stored_size == 0) return bad("empty zstd frame");
  uint64_t end = 0;
  if (!CheckedAdd(offset, stored_size, &end) || end > sh.file_size)
    return bad("bytes [" + std::to_string(offset) + ", +" + std::to_string(stored_size) +
               ") extend past the end of " + sh.name + " (" + std::to_string(sh.file_size) +
               " bytes)");
  // Path entry (front-coded, §3.8.6).
  uint64_t begin = 0, pend = 0;
  AreaRange(block, k, kColPathEnd, &begin, &pend);
  if (pend < begin || pend > block.meta_area_ - block.path_area_)
    return bad("path entry end " + std::to_string(pend) + " is out of order or outside the area");
  if (k % kPathRestartInterval == 0) prev_path->clear();
  if (pend != begin) {
    if (pend - begin < 3) return bad("path entry shorter than 3 bytes");
    const std::byte* e = block.bytes_.data() + block.path_area_ + begin;
    const uint16_t shared = GetU16(e);
    if (shared > prev_path->size())
      return bad("path shares " + std::to_string(shared) + " bytes with a previous path of " +
                 std::to_string(prev_path->size()));
    prev_path->resize(shared);
    prev_path->append(reinterpret_cast<const char*>(e + 2), pend - begin - 2);
    if (prev_path->size() > kMaxSourcePathBytes) return bad("source path too long");
    if (prev_path->find('\0') != std::string::npos) return bad("source path contains a NUL byte");
  } else {
    prev_path->clear();
  }
  if (has_block_tables()) {  // §3.10.1: the table's place, checked; its bytes when first used
    const std::byte* t = p + table_column_;
    const uint64_t toff = GetUN(t, table_offset_width_);
    const uint64_t tsize = GetUN(t + table_offset_width_, table_size_width_);
    const uint64_t tsum = GetU32(t + table_offset_width_ + table_size_width_);
    uint64_t tend = 0;
    if (tsize == 0 && (toff != 0 || tsum != 0))
      return bad("a sample without a block table has a table offset or checksum");
    if (tsize % 4 != 0 || tsize > kMaxBlockTableBytes)
      return bad("block table size " + std::to_string(tsize) +
                 " is not a whole number of words within the limit");
    if ((flags & kFlagZstd) && tsize != 0)
      return bad("a sample stored with whole-sample zstd has a block table");
    if (!CheckedAdd(toff, tsize, &tend) || tend > file_size_ - tables_offset_)
      return bad("block table [" + std::to_string(toff) + ", +" + std::to_string(tsize) +
                 ") lies outside the tables part (" + std::to_string(file_size_ - tables_offset_) +
                 " bytes)");
  }
  uint64_t mbegin = 0, mend = 0;
  AreaRange(block, k, kColMetaEnd, &mbegin, &mend);
  if (mend < mbegin || mend > block.bytes_.size() - block.meta_area_ ||
      mend - mbegin > kMaxMetadataBytes)
    return bad("metadata end " + std::to_string(mend) + " is out of order, too long or outside "
                                                        "the area");
  Status ms = DecodeMetadata({block.bytes_.data() + block.meta_area_ + mbegin, mend - mbegin},
                             nullptr);
  if (!ms.ok()) return bad(ms.message());
  return Status::OK();
}

Result<IndexBlock> Index::ParseBlock(uint64_t b, std::vector<std::byte> bytes) const {
  const std::string where = file_ + ": block " + std::to_string(b) + " at offset " +
                            std::to_string(block_offset(b));
  if (bytes.size() != block_size(b))
    return Status::InvalidArgument(where + ": ParseBlock needs the block's " +
                                   std::to_string(block_size(b)) + " bytes");
  const uint64_t sum = Xxh3(bytes);
  if (sum != blocks_[2 * b + 1])
    return Status::Corruption(where + ": checksum mismatch: stored " + Hex16(blocks_[2 * b + 1]) +
                              ", computed " + Hex16(sum) +
                              " (the index changed or is damaged); re-run libshard pack");
  IndexBlock block;
  block.first_ = b * block_samples_;
  block.count_ = std::min<uint64_t>(block_samples_, n_ - block.first_);
  block.bytes_ = std::move(bytes);
  const uint64_t records = block.count_ * record_width_;  // <= size, checked at Parse
  const std::byte* last = block.bytes_.data() + (block.count_ - 1) * record_width_;
  const uint64_t paths = Column(last, kColPathEnd), metas = Column(last, kColMetaEnd);
  uint64_t total = 0;
  if (!CheckedAdd(records, paths, &total) || !CheckedAdd(total, metas, &total) ||
      total != block.bytes_.size())
    return Status::Corruption(where + ": " + std::to_string(block.count_) + " records of " +
                              std::to_string(record_width_) + " bytes, " + std::to_string(paths) +
                              " path bytes and " + std::to_string(metas) +
                              " metadata bytes do not make its " +
                              std::to_string(block.bytes_.size()) + " bytes" + kDamaged);
  block.path_area_ = records;
  block.meta_area_ = records + paths;
  std::string prev;
  for (uint64_t k = 0; k < block.count_; ++k)
    LIBSHARD_RETURN_IF_ERROR(CheckRecord(block, k, &prev));
  return block;
}

}  // namespace libshard::format
