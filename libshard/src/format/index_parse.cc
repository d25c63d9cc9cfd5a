// The index (index.h): ParseHeader and Parse, the checks of the header, the head and the
// lengths part (FORMAT.md §3.8.7).
#include "format/index.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_set>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index_internal.h"
#include "format/index_records.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"

namespace libshard::format {

using index_internal::kDamaged;
using index_internal::kMaxKnownCodec;

namespace {

struct HeadCounts {
  IndexHeader header;
  uint32_t index_version = 0;
  bool field_sums = false;
  uint64_t n = 0, d = 0, k = 0, strings_size = 0;
  uint32_t f = 0, s = 0, b = 0;
  uint8_t length_width = 0;
  uint64_t base_width = 0;
  uint64_t fields_at = 0, dims_at = 0, shards_at = 0, directory_at = 0, strings_at = 0;
  uint64_t head_size = 0, lengths_size = 0;
  uint64_t tables_offset = 0;  // version 4: where the tables part starts; else the file size
};

Status HeaderCorrupt(const std::string& file, uint64_t offset, const std::string& what) {
  return Status::Corruption(file + ": offset " + std::to_string(offset) + ": " + what + kDamaged);
}

// §3.8.7 up to the minimal size bound: everything the 128-byte header alone decides.
Result<HeadCounts> CheckHeaderBytes(std::span<const std::byte> bytes, uint64_t file_size,
                                    const std::string& file) {
  LIBSHARD_ASSIGN_OR_RETURN(uint32_t index_version, PeekIndexVersion(bytes, file));
  if (index_version < kIndexVersion2 || index_version > kIndexVersion4)
    return HeaderCorrupt(file, kHeaderVersion,
                         "index version " + std::to_string(index_version) + " is not 2, 3 or 4");
  const IndexHeader h = IndexHeader::DecodeFrom(bytes.data());
  auto bad = [&](uint64_t at, const std::string& what) { return HeaderCorrupt(file, at, what); };
  if (h.file_size != file_size)
    return bad(kHeaderFileSize, "recorded index size " + std::to_string(h.file_size) +
                                " != actual size " + std::to_string(file_size) +
                                " (truncated or extended)");
  const uint32_t known =
      kKnownIndexFlags | (index_version >= kIndexVersion3 ? kIndexFlagFieldChecksums : 0);
  if (h.flags & ~known)
    return bad(kHeaderFlags, "unknown header flags 0x" + Hex16(h.flags & ~known).substr(8));
  if (index_version >= kIndexVersion4 && !(h.flags & kIndexFlagFieldChecksums))
    return bad(kHeaderFlags, "index version 4 without field checksums (flags bit 1)");
  if (h.reserved83 != 0) return bad(kHeaderReserved83, "reserved header byte is not zero");
  if (index_version < kIndexVersion4) {  // §3.10.1: reserved before version 4
    if (h.tables_offset != 0) return bad(kHeaderTablesOffset, "reserved header byte is not zero");
    if (h.table_offset_width != 0)
      return bad(kHeaderTableOffsetWidth, "reserved header byte is not zero");
    if (h.table_size_width != 0)
      return bad(kHeaderTableSizeWidth, "reserved header byte is not zero");
  } else if (h.table_offset_width > 8 || h.table_size_width > 8) {
    return bad(h.table_offset_width > 8 ? kHeaderTableOffsetWidth : kHeaderTableSizeWidth,
               "table column width exceeds 8");
  }
  for (size_t k = 0; k < h.reserved.size(); ++k)
    if (h.reserved[k] != 0) return bad(kHeaderReserved + k, "reserved header byte is not zero");
  HeadCounts c;
  c.header = h;
  c.index_version = index_version;
  c.field_sums = (h.flags & kIndexFlagFieldChecksums) != 0;
  c.n = h.sample_count;
  c.f = h.field_count;
  c.s = h.shard_count;
  c.b = h.block_samples;
  c.d = h.dims_per_sample;
  c.strings_size = h.strings_size;
  c.length_width = h.length_width;
  if (c.n > kMaxSamples)
    return bad(kHeaderSampleCount, "sample count " + std::to_string(c.n) + " exceeds the limit " +
                                       std::to_string(kMaxSamples));
  if (c.f == 0 || c.f > kMaxFields)
    return bad(kHeaderFieldCount, "field count " + std::to_string(c.f) + " is not in 1.." +
                                      std::to_string(kMaxFields));
  if (c.s > kMaxShards)
    return bad(kHeaderShardCount, "shard count " + std::to_string(c.s) + " exceeds the limit " +
                                      std::to_string(kMaxShards));
  if (c.s == 0 && c.n != 0) return bad(kHeaderShardCount, "samples but no shards");
  if (c.b == 0 || c.b > kMaxBlockSamples || !std::has_single_bit(c.b))
    return bad(kHeaderBlockSamples, "block_samples " + std::to_string(c.b) +
                                    " is not a power of two in 1.." +
                                    std::to_string(kMaxBlockSamples));
  if (c.d > uint64_t{kMaxFields} * kMaxRank)
    return bad(kHeaderDimsPerSample, "dims_per_sample " + std::to_string(c.d) + " exceeds the limit");
  if (c.length_width > 8) return bad(kHeaderLengthWidth, "length width exceeds 8");
  for (size_t col = 0; col < kBaseColumns; ++col) {
    const uint8_t wd = h.column_widths[col];
    if (wd > 8 || (col == kColChecksum && wd != 8))
      return bad(kHeaderColumnWidths + col, "column " + std::to_string(col) + " width " +
                                            std::to_string(wd) + " is invalid");
    c.base_width += wd;
  }
  if (c.field_sums) c.base_width += kFieldChecksumWidth * uint64_t{c.f};  // §3.9: every record
  if (index_version >= kIndexVersion4)  // §3.10.1: table_offset, table_size, table_checksum
    c.base_width += h.table_offset_width + h.table_size_width + kFieldChecksumWidth;
  c.tables_offset = index_version >= kIndexVersion4 ? h.tables_offset : file_size;
  if (c.tables_offset > file_size)
    return bad(kHeaderTablesOffset, "tables_offset " + std::to_string(c.tables_offset) +
                                        " is past the end of the file (" +
                                        std::to_string(file_size) + " bytes)");
  // Counts are bounded above, so these products and sums fit in 64 bits except via strings_size.
  c.k = (c.n + c.b - 1) / c.b;
  c.fields_at = kIndexHeaderSize;
  c.dims_at = c.fields_at + kFieldRecordSize * c.f;
  c.shards_at = c.dims_at + kDimRecordSize * c.d;
  c.directory_at = c.shards_at + kShardRecordSize * c.s;
  c.strings_at = c.directory_at + kBlockEntrySize * c.k;
  uint64_t total = 0;
  if (!CheckedAdd(c.strings_at, c.strings_size, &c.head_size) ||
      !CheckedAlignUp(c.head_size, 8, &c.head_size) ||
      !CheckedAdd(c.head_size, AlignUp(c.n * c.length_width, 8), &total) ||
      !CheckedAdd(total, c.n * c.base_width, &total) || total > c.tables_offset)
    return bad(kHeaderSampleCount, "the head and the records of " + std::to_string(c.n) +
                                       " samples cannot fit in the file's " +
                                       std::to_string(file_size) + " bytes (strings " +
                                       std::to_string(c.strings_size) + " bytes)");
  c.lengths_size = AlignUp(c.n * c.length_width, 8);
  return c;
}

}  // namespace

Result<IndexLayout> Index::ParseHeader(std::span<const std::byte> header, uint64_t file_size,
                                           const std::string& file) {
  LIBSHARD_ASSIGN_OR_RETURN(HeadCounts c, CheckHeaderBytes(header, file_size, file));
  return IndexLayout{c.head_size, c.head_size, c.lengths_size};
}

class IndexParser {
 public:
  IndexParser(Index* v, const HeadCounts& c) : v_(*v), c_(c), h_(v->head_.data()) {}

  Status Run() {
    for (Status (IndexParser::*step)() :
         {&IndexParser::CheckChecksum, &IndexParser::CheckFields,
          &IndexParser::CheckLengthField, &IndexParser::CheckDims,
          &IndexParser::CheckShards, &IndexParser::CheckDirectory,
          &IndexParser::CheckLengths}) {
      Status st = (this->*step)();
      if (!st.ok()) return st;
    }
    return Status::OK();
  }

 private:
  Status Corrupt(uint64_t offset, const std::string& what) const {
    return HeaderCorrupt(v_.file_, offset, what);
  }
  bool StringOk(uint64_t off, uint64_t len) const {
    uint64_t end = 0;
    return CheckedAdd(off, len, &end) && end <= c_.strings_size;
  }
  std::string_view String(uint64_t off, uint64_t len) const {
    return {reinterpret_cast<const char*>(h_ + c_.strings_at + off), static_cast<size_t>(len)};
  }

  Status CheckChecksum() {
    v_.checksum_ = c_.header.checksum;
    const uint64_t actual = Xxh3WithHole(v_.head_, kIndexChecksumOffset);
    if (actual != v_.checksum_)
      return Corrupt(kIndexChecksumOffset, "index checksum mismatch: stored " +
                                               Hex16(v_.checksum_) + ", computed " + Hex16(actual));
    v_.has_shard_uids_ = (c_.header.flags & kIndexFlagShardUids) != 0;
    v_.total_raw_bytes_ = c_.header.total_raw_bytes;
    return Status::OK();
  }

  Status CheckFields() {
    std::unordered_set<std::string_view> names;
    uint64_t d = 0;
    v_.codecs_.resize(c_.f);
    v_.stored_width_.resize(c_.f);
    for (uint32_t f = 0; f < c_.f; ++f) {
      const uint64_t at = c_.fields_at + kFieldRecordSize * f;
      const FieldRecord r = FieldRecord::DecodeFrom(h_ + at);
      const std::string which = "field " + std::to_string(f) + ": ";
      Field field;
      const uint32_t dtype = r.dtype;
      field.rank = r.rank;
      const uint16_t codec = r.codec;
      field.seq_dim = r.seq_dim;
      const uint16_t name_size = r.name_size;
      const uint8_t stored_width = r.stored_width;
      const uint64_t name_offset = r.name_offset;
      if (!IsValidDType(dtype))
        return Corrupt(at, which + "invalid dtype code " + std::to_string(dtype));
      field.dtype = static_cast<DType>(dtype);
      if (field.rank > kMaxRank)
        return Corrupt(at + FieldRecord::kRankAt,
                       which + "rank " + std::to_string(field.rank) + " exceeds the limit");
      if (codec > kMaxKnownCodec)
        return Status::Unsupported(v_.file_ + ": offset " +
                                   std::to_string(at + FieldRecord::kCodecAt) + ": " + which +
                                   "codec " + std::to_string(codec) +
                                   " is not known to this libshard (written by a newer one); "
                                   "upgrade libshard");
      if (field.seq_dim < -1 ||
          (field.seq_dim >= 0 && static_cast<uint32_t>(field.seq_dim) >= field.rank))
        return Corrupt(at + FieldRecord::kSeqDimAt,
                       which + "seq_dim " + std::to_string(field.seq_dim) +
                       " is not -1 or a dimension");
      if ((codec == 0) != (stored_width == 0) || stored_width > 8)
        return Corrupt(at + FieldRecord::kStoredWidthAt,
                       which + "stored size width " + std::to_string(stored_width) +
                       " does not fit codec " + std::to_string(codec));
      if (r.reserved != 0)
        return Corrupt(at + FieldRecord::kReservedAt, which + "reserved byte is not zero");
      FieldCodec fc;
      fc.codec = codec;
      fc.params = r.codec_params;
      if (codec == 0 && fc != FieldCodec{})
        return Corrupt(at + FieldRecord::kCodecParamsAt,
                       which + "codec parameters of a raw field are not zero");
      if (name_size == 0 || name_size > kMaxNameBytes || !StringOk(name_offset, name_size))
        return Corrupt(at + FieldRecord::kNameSizeAt,
                       which + "name range (" + std::to_string(name_offset) + ", " +
                       std::to_string(name_size) +
                       ") is empty, too long or outside the strings");
      const std::string_view name = String(name_offset, name_size);
      if (name.find('\0') != std::string_view::npos)
        return Corrupt(at + FieldRecord::kNameOffsetAt, which + "name contains a NUL byte");
      if (!names.insert(name).second)
        return Corrupt(at + FieldRecord::kNameOffsetAt,
                       which + "duplicate name '" + std::string(name) + "'");
      field.name = std::string(name);
      d += field.rank;
      v_.codecs_[f] = fc;
      v_.stored_width_[f] = stored_width;
      v_.any_codec_ = v_.any_codec_ || codec != 0;
      v_.schema_.fields.push_back(std::move(field));
    }
    if (d != c_.d)
      return Corrupt(kHeaderDimsPerSample, "dims_per_sample " + std::to_string(c_.d) +
                                           " != the sum of the field ranks " + std::to_string(d));
    v_.d_ = d;
    return Status::OK();
  }

  Status CheckLengthField() {
    const int32_t lf = c_.header.length_field;
    if (lf < -1 || lf >= static_cast<int64_t>(c_.f) ||
        (lf >= 0 && v_.schema_.fields[lf].seq_dim < 0))
      return Corrupt(kHeaderLengthField,
                     "length_field " + std::to_string(lf) + " is not -1 or a field with a seq_dim");
    if (lf < 0 && c_.length_width != 0)
      return Corrupt(kHeaderLengthWidth, "lengths are stored but there is no length field");
    v_.schema_.length_field = lf;
    v_.length_width_ = c_.length_width;
    return Status::OK();
  }

  Status CheckDims() {
    const int32_t lf = v_.schema_.length_field;
    int64_t length_dim = -1;
    for (int32_t f = 0, j = 0; f < static_cast<int32_t>(c_.f); j += v_.schema_.fields[f].rank, ++f)
      if (f == lf) length_dim = j + v_.schema_.fields[f].seq_dim;
    // Record columns: the base columns, then kind-2 dims, then stored sizes (§3.8.6).
    uint64_t col = 0;
    for (size_t c = 0; c < kBaseColumns; ++c) {
      v_.width_[c] = c_.header.column_widths[c];
      v_.column_[c] = col;
      col += v_.width_[c];
    }
    v_.dims_.resize(c_.d);
    for (uint64_t j = 0; j < c_.d; ++j) {
      const uint64_t at = c_.dims_at + kDimRecordSize * j;
      const DimRecord r = DimRecord::DecodeFrom(h_ + at);
      const uint8_t kind = r.kind;
      const uint8_t width = r.width;
      const uint64_t value = r.value;
      const std::string which = "dim " + std::to_string(j) + ": ";
      for (size_t k = 0; k < r.reserved.size(); ++k)
        if (r.reserved[k] != 0)
          return Corrupt(at + DimRecord::kReservedAt + k, which + "reserved byte is not zero");
      if (kind > 2) return Corrupt(at, which + "unknown kind " + std::to_string(kind));
      if ((kind != 2 && width != 0) || width > 8)
        return Corrupt(at + DimRecord::kWidthAt,
                       which + "width " + std::to_string(width) + " is invalid");
      if (kind != 0 && value != 0)
        return Corrupt(at + DimRecord::kValueAt,
                       which + "value of a non-constant dim");
      if (kind == 1 && lf < 0) return Corrupt(at, which + "a length dim without a length field");
      if (static_cast<int64_t>(j) == length_dim && kind != 1)
        return Corrupt(at, which + "the length field's sequence dim must be the length");
      Index::DimInfo& di = v_.dims_[j];
      di.kind = static_cast<DimKind>(kind);
      di.width = width;
      di.value = value;
      di.column = col;
      col += width;
    }
    v_.stored_column_.resize(c_.f);
    for (uint32_t f = 0; f < c_.f; ++f) {
      v_.stored_column_[f] = col;
      col += v_.stored_width_[f];
    }
    v_.checksum_column_ = col;  // §3.9: F field checksums
    if (v_.field_checksums_) col += kFieldChecksumWidth * uint64_t{c_.f};
    v_.table_column_ = col;  // §3.10.1: table_offset, table_size, table_checksum
    if (v_.has_block_tables()) {
      v_.table_offset_width_ = c_.header.table_offset_width;
      v_.table_size_width_ = c_.header.table_size_width;
      col += v_.table_offset_width_ + v_.table_size_width_ + kFieldChecksumWidth;
    }
    v_.record_width_ = col;
    return Status::OK();
  }

  Status CheckShards() {
    const bool uids = v_.has_shard_uids_;
    v_.shards_.reserve(c_.s);
    for (uint32_t k = 0; k < c_.s; ++k) {
      const uint64_t at = c_.shards_at + kShardRecordSize * k;
      const ShardRecord r = ShardRecord::DecodeFrom(h_ + at);
      const std::string which = "shard " + std::to_string(k) + ": ";
      const uint64_t name_offset = r.name_offset, name_size = r.name_size;
      IndexShard shard;
      shard.file_size = r.file_size;
      shard.sample_count = r.sample_count;
      shard.uid = r.uid;
      if (name_size == 0 || name_size > kMaxShardNameBytes || !StringOk(name_offset, name_size))
        return Corrupt(at, which + "name range outside the strings");
      shard.name = std::string(String(name_offset, name_size));
      if (!IsPlainFileName(shard.name))
        return Corrupt(at, which + "'" + shard.name + "' is not a plain file name");
      if (shard.file_size < kShardHeaderSize)
        return Corrupt(at + ShardRecord::kFileSizeAt,
                       which + "file size " + std::to_string(shard.file_size) +
                       " is smaller than its header");
      if (shard.sample_count > c_.n)
        return Corrupt(at + ShardRecord::kSampleCountAt,
                       which + "sample count exceeds the dataset's");
      if (!uids && shard.uid != 0)
        return Corrupt(at + ShardRecord::kUidAt,
                       which + "uid is set but the shard-uid flag is not");
      v_.shards_.push_back(std::move(shard));
    }
    return Status::OK();
  }

  Status CheckDirectory() {
    v_.blocks_begin_ = c_.head_size + c_.lengths_size;
    v_.blocks_.resize(2 * c_.k);
    uint64_t expect = v_.blocks_begin_;
    for (uint64_t b = 0; b < c_.k; ++b) {
      const uint64_t at = c_.directory_at + kBlockEntrySize * b;
      const uint64_t offset = GetU64(h_ + at);
      const uint64_t count = std::min<uint64_t>(c_.b, c_.n - b * c_.b);
      if ((b == 0 && offset != v_.blocks_begin_) || offset < expect || offset > v_.tables_offset_)
        return Corrupt(at, "block " + std::to_string(b) + " offset " + std::to_string(offset) +
                               " is out of order or outside the file");
      expect = offset + count * v_.record_width_;  // bounded: count * R <= 2^16 * 2^16ish
      if (expect > v_.tables_offset_ || expect < offset)
        return Corrupt(at, "block " + std::to_string(b) + " at offset " + std::to_string(offset) +
                               " has no room for its " + std::to_string(count) + " records");
      v_.blocks_[2 * b] = offset;
      v_.blocks_[2 * b + 1] = GetU64(h_ + at + 8);
    }
    if (c_.k == 0 && v_.blocks_begin_ != v_.tables_offset_)
      return Corrupt(v_.has_block_tables() ? kHeaderTablesOffset : kHeaderFileSize,
                     "bytes after the lengths of an empty index");
    if (c_.k == 0 && v_.tables_offset_ != v_.file_size_)
      return Corrupt(kHeaderTablesOffset, "a tables part in an index without samples");
    return Status::OK();
  }

  Status CheckLengths() {
    const uint64_t sum = Xxh3(v_.lengths_);
    if (sum != c_.header.lengths_checksum)
      return Corrupt(c_.head_size, "lengths checksum mismatch: stored " +
                                       Hex16(c_.header.lengths_checksum) + ", computed " +
                                       Hex16(sum));
    return Status::OK();
  }

  Index& v_;
  const HeadCounts& c_;
  const std::byte* h_;
};

Result<Index> Index::Parse(std::vector<std::byte> head, std::vector<std::byte> lengths,
                               uint64_t file_size, const std::string& file) {
  if (head.size() < kIndexHeaderSize)
    return Status::Corruption(file + ": head shorter than the header" + std::string(kDamaged));
  LIBSHARD_ASSIGN_OR_RETURN(HeadCounts c, CheckHeaderBytes({head.data(), kIndexHeaderSize},
                                                           file_size, file));
  if (head.size() != c.head_size || lengths.size() != c.lengths_size)
    return Status::InvalidArgument(file + ": Index::Parse needs the head and lengths that "
                                          "ParseHeader located");
  Index v;
  v.file_ = file;
  v.head_ = std::move(head);
  v.lengths_ = std::move(lengths);
  v.n_ = c.n;
  v.file_size_ = file_size;
  v.block_samples_ = c.b;
  v.version_ = c.index_version;
  v.field_checksums_ = c.field_sums;
  v.tables_offset_ = c.tables_offset;
  LIBSHARD_RETURN_IF_ERROR(IndexParser(&v, c).Run());
  return v;
}

}  // namespace libshard::format
