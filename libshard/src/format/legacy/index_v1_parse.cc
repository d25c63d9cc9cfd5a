// Index version 1 (legacy/index_v1.h): IndexV1View::Parse, the checks of FORMAT.md §3.7.
#include "format/legacy/index_v1.h"

#include <cstring>
#include <unordered_set>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"
#include "libshard/sample.h"

namespace libshard::format::legacy {

namespace {

std::string ShapeString(std::span<const uint64_t> dims) {
  std::string s = "[";
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k) s += ",";
    s += std::to_string(dims[k]);
  }
  return s + "]";
}

constexpr const char* kDamaged = "; the index is damaged, re-run libshard pack";

}  // namespace

// IndexV1View::Parse's implementation: one method per check group of FORMAT.md §3.7, called by Run
// in exactly that order, each rejecting on the first failure. A method relies only on what the
// methods before it checked (e.g. the field table is read only once it is known to lie within the
// file), so no untrusted count sizes an allocation before it is checked against the byte size.
class IndexV1Parser {
 public:
  IndexV1Parser(std::span<const std::byte> bytes, const std::string& file)
      : bytes_(bytes), h_(bytes.data()), file_(file) {
    v_.bytes_ = bytes;
  }

  Result<IndexV1View> Run() {
    for (Status (IndexV1Parser::*step)() :
         {&IndexV1Parser::CheckHeader, &IndexV1Parser::CheckCounts,
          &IndexV1Parser::CheckFixedSectionOffsets, &IndexV1Parser::CheckFieldTypes,
          &IndexV1Parser::CheckSectionSizes, &IndexV1Parser::CheckFieldNames,
          &IndexV1Parser::CheckLengthField, &IndexV1Parser::CheckShardTable,
          &IndexV1Parser::CheckShardUids, &IndexV1Parser::CheckSamples,
          &IndexV1Parser::CheckShardSampleCounts}) {
      Status st = (this->*step)();
      if (!st.ok()) return st;
    }
    return std::move(v_);
  }

 private:
  Status Corrupt(uint64_t offset, const std::string& what) const {
    return Status::Corruption(file_ + ": offset " + std::to_string(offset) + ": " + what +
                              kDamaged);
  }
  // `at` is the offset of the offending field within sample i's record.
  Status BadSample(uint64_t i, uint64_t at, const std::string& what) const {
    return Status::Corruption(file_ + ": sample " + std::to_string(i) + " (record at offset " +
                              std::to_string(RecordAt(i) + at) + "): " + what + kDamaged);
  }
  uint64_t FieldAt(uint32_t f) const { return fields_offset_ + kV1FieldRecordSize * f; }
  uint64_t ShardAt(uint32_t k) const { return shards_offset_ + kV1ShardRecordSize * k; }
  uint64_t RecordAt(uint64_t i) const { return v_.samples_offset_ + kSampleRecordSize * i; }
  // True when [off, off + len) lies within the blob (§3.4), overflow-checked.
  bool BlobRangeOk(uint64_t off, uint64_t len) const {
    uint64_t end = 0;
    return CheckedAdd(off, len, &end) && end <= blob_size_;
  }

  // §3.7: size >= 128; magic; version (Unsupported); checksum (§3.6); flags (bits other than 0)
  // and reserved bytes (100..107 when bit 0 is clear, 108..119).
  Status CheckHeader() {
    if (bytes_.size() < kIndexHeaderSize)
      return Status::Corruption(file_ + ": " + std::to_string(bytes_.size()) +
                                " bytes is too short for an index header (128)" + kDamaged);
    if (std::memcmp(h_, kIndexMagic, sizeof(kIndexMagic)) != 0)
      return Corrupt(0, "bad magic (not a libshard index)");
    const uint32_t version = GetU32(h_ + kHeaderVersion);
    if (version != kIndexVersion1)
      return Status::Unsupported(file_ + ": offset 8: index version " + std::to_string(version) +
                                 " is not supported (this libshard reads version 1); the dataset "
                                 "was written by a newer libshard, upgrade it");
    v_.checksum_ = GetU64(h_ + kIndexChecksumOffset);
    const uint64_t actual = Xxh3WithHole(bytes_, kIndexChecksumOffset);
    if (actual != v_.checksum_)
      return Corrupt(kIndexChecksumOffset, "index checksum mismatch: stored " +
                                               Hex16(v_.checksum_) + ", computed " + Hex16(actual));
    const uint32_t flags = GetU32(h_ + kHeaderFlags);
    if (flags & ~kKnownIndexFlags)
      return Corrupt(kHeaderFlags,
                     "unknown header flags 0x" + Hex16(flags & ~kKnownIndexFlags).substr(8));
    v_.has_shard_uids_ = (flags & kIndexFlagShardUids) != 0;
    uids_offset_ = GetU64(h_ + kV1HeaderShardUids);
    if (!v_.has_shard_uids_ && uids_offset_ != 0)
      return Corrupt(kV1HeaderShardUids, "shard uids offset is set but the shard-uid flag is not");
    for (uint64_t k = kV1HeaderReserved; k < kIndexChecksumOffset; ++k)
      if (h_[k] != std::byte{0}) return Corrupt(k, "reserved header byte is not zero");
    return Status::OK();
  }

  // §3.7: counts within limits (§5); S = 0 only when N = 0 (§3.1).
  Status CheckCounts() {
    n_ = GetU64(h_ + kHeaderSampleCount);
    f_count_ = GetU32(h_ + kHeaderFieldCount);
    s_count_ = GetU32(h_ + kHeaderShardCount);
    if (n_ > kMaxSamples)
      return Corrupt(kHeaderSampleCount, "sample count " + std::to_string(n_) +
                                             " exceeds the limit " + std::to_string(kMaxSamples));
    if (f_count_ == 0 || f_count_ > kMaxFields)
      return Corrupt(kHeaderFieldCount, "field count " + std::to_string(f_count_) +
                                            " is not in 1.." + std::to_string(kMaxFields));
    if (s_count_ > kMaxShards)
      return Corrupt(kHeaderShardCount, "shard count " + std::to_string(s_count_) +
                                            " exceeds the limit " + std::to_string(kMaxShards));
    if (s_count_ == 0 && n_ != 0) return Corrupt(kHeaderShardCount, "samples but no shards");
    v_.sample_count_ = n_;
    return Status::OK();
  }

  // §3.7: section offsets and file_size (§3.1), first part: the offsets that follow from the
  // counts alone (field table, shard table, sample records) and file_size. The rest depend on D,
  // the sum of the ranks, which are checked first (CheckFieldTypes, CheckSectionSizes). The
  // counts are bounded, so these sums cannot overflow.
  Status CheckFixedSectionOffsets() {
    const uint64_t size = bytes_.size();
    fields_offset_ = kIndexHeaderSize;
    shards_offset_ = fields_offset_ + kV1FieldRecordSize * f_count_;
    v_.samples_offset_ = shards_offset_ + kV1ShardRecordSize * s_count_;
    if (GetU64(h_ + kV1HeaderFieldsOffset) != fields_offset_)
      return Corrupt(kV1HeaderFieldsOffset,
                     "field table offset is not " + std::to_string(fields_offset_));
    if (GetU64(h_ + kV1HeaderShardsOffset) != shards_offset_)
      return Corrupt(kV1HeaderShardsOffset,
                     "shard table offset is not " + std::to_string(shards_offset_));
    if (GetU64(h_ + kV1HeaderSamplesOffset) != v_.samples_offset_)
      return Corrupt(kV1HeaderSamplesOffset,
                     "sample records offset is not " + std::to_string(v_.samples_offset_));
    if (GetU64(h_ + kV1HeaderFileSize) != size)
      return Corrupt(kV1HeaderFileSize, "recorded index size " +
                                          std::to_string(GetU64(h_ + kV1HeaderFileSize)) +
                                          " != actual size " + std::to_string(size) +
                                          " (truncated or extended)");
    if (v_.samples_offset_ > size)
      return Corrupt(kHeaderShardCount, "field and shard tables extend past the end of the file");
    return Status::OK();
  }

  // §3.7 each field (§3.2), first part: dtype, rank, seq_dim and the reserved bytes; this defines
  // D (ranks are bounded, so D <= 16 * 4096). The names need the blob, located next.
  Status CheckFieldTypes() {
    v_.field_dim_start_.reserve(f_count_);
    v_.schema_.fields.reserve(f_count_);
    uint64_t d = 0;
    for (uint32_t f = 0; f < f_count_; ++f) {
      const uint64_t at = FieldAt(f);
      const std::byte* p = h_ + at;
      const std::string which = "field " + std::to_string(f) + ": ";
      Field field;
      const uint32_t dtype = GetU32(p + kV1FieldDType);
      field.rank = GetU32(p + kV1FieldRank);
      field.seq_dim = GetI32(p + kV1FieldSeqDim);
      if (!IsValidDType(dtype))
        return Corrupt(at + kV1FieldDType, which + "invalid dtype code " + std::to_string(dtype));
      field.dtype = static_cast<DType>(dtype);
      if (field.rank > kMaxRank)
        return Corrupt(at + kV1FieldRank, which + "rank " + std::to_string(field.rank) +
                                            " exceeds the limit " + std::to_string(kMaxRank));
      if (field.seq_dim < -1 ||
          (field.seq_dim >= 0 && static_cast<uint32_t>(field.seq_dim) >= field.rank))
        return Corrupt(at + kV1FieldSeqDim, which + "seq_dim " + std::to_string(field.seq_dim) +
                                              " is not -1 or a dimension");
      if (GetU32(p + kV1FieldReserved) != 0)
        return Corrupt(at + kV1FieldReserved, which + "reserved bytes are not zero");
      v_.field_dim_start_.push_back(d);
      d += field.rank;
      v_.schema_.fields.push_back(std::move(field));
    }
    v_.dims_per_sample_ = d;
    return Status::OK();
  }

  // §3.7 section offsets and file_size (§3.1), second part, now that D is known: the tensor
  // entries, dims and blob offsets, and blob_offset + blob_size == file size. This rejects a
  // forged N before anything is sized by it.
  Status CheckSectionSizes() {
    const uint64_t d = v_.dims_per_sample_;
    uint64_t records = 0, entries = 0, entry_bytes = 0, dims = 0, dim_bytes = 0;
    uint64_t tensors_offset = 0, dims_offset = 0, blob_offset = 0;
    if (!CheckedMul(n_, kSampleRecordSize, &records) ||
        !CheckedAdd(v_.samples_offset_, records, &tensors_offset) ||
        !CheckedMul(n_, f_count_, &entries) ||
        !CheckedMul(entries, kV1TensorEntrySize, &entry_bytes) ||
        !CheckedAdd(tensors_offset, entry_bytes, &dims_offset) || !CheckedMul(n_, d, &dims) ||
        !CheckedMul(dims, kV1DimSize, &dim_bytes) ||
        !CheckedAdd(dims_offset, dim_bytes, &blob_offset))
      return Corrupt(kHeaderSampleCount,
                     "section sizes overflow (sample count " + std::to_string(n_) + ")");
    if (GetU64(h_ + kV1HeaderTensorsOffset) != tensors_offset)
      return Corrupt(kV1HeaderTensorsOffset,
                     "tensor entries offset is not " + std::to_string(tensors_offset));
    if (GetU64(h_ + kV1HeaderDimsOffset) != dims_offset)
      return Corrupt(kV1HeaderDimsOffset, "dims offset is not " + std::to_string(dims_offset));
    if (GetU64(h_ + kV1HeaderBlobOffset) != blob_offset)
      return Corrupt(kV1HeaderBlobOffset, "blob offset is not " + std::to_string(blob_offset));
    blob_size_ = GetU64(h_ + kV1HeaderBlobSize);
    uint64_t end = 0;
    if (!CheckedAdd(blob_offset, blob_size_, &end) || end != bytes_.size())
      return Corrupt(kV1HeaderBlobSize, "sections (sample count " + std::to_string(n_) + ", blob " +
                                          std::to_string(blob_size_) +
                                          " bytes) do not add up to the file size " +
                                          std::to_string(bytes_.size()));
    v_.tensors_offset_ = tensors_offset;
    v_.dims_offset_ = dims_offset;
    v_.blob_offset_ = blob_offset;
    return Status::OK();
  }

  // §3.7 each field, second part: name range (§3.4) and form, names unique (§3.2).
  Status CheckFieldNames() {
    std::unordered_set<std::string_view> names;
    for (uint32_t f = 0; f < f_count_; ++f) {
      const uint64_t at = FieldAt(f) + kV1FieldNameOffset;
      const uint64_t offset = GetU64(h_ + FieldAt(f) + kV1FieldNameOffset);
      const uint64_t size = GetU64(h_ + FieldAt(f) + kV1FieldNameSize);
      const std::string which = "field " + std::to_string(f) + ": ";
      if (size == 0 || size > kMaxNameBytes || !BlobRangeOk(offset, size))
        return Corrupt(at, which + "name range (" + std::to_string(offset) + ", " +
                               std::to_string(size) + ") is empty, too long or outside the blob");
      auto s = v_.blob(offset, size);
      std::string_view name(reinterpret_cast<const char*>(s.data()), s.size());
      if (name.find('\0') != std::string_view::npos)
        return Corrupt(at, which + "name contains a NUL byte");
      if (!names.insert(name).second)
        return Corrupt(at, which + "duplicate name '" + std::string(name) + "'");
      v_.schema_.fields[f].name = std::string(name);
    }
    return Status::OK();
  }

  // §3.7 length_field (§3.2): -1 or a field with a seq_dim.
  Status CheckLengthField() {
    const int32_t length_field = GetI32(h_ + kV1HeaderLengthField);
    if (length_field < -1 || length_field >= static_cast<int64_t>(f_count_) ||
        (length_field >= 0 && v_.schema_.fields[length_field].seq_dim < 0))
      return Corrupt(kV1HeaderLengthField, "length_field " + std::to_string(length_field) +
                                             " is not -1 or a field with a seq_dim");
    v_.schema_.length_field = length_field;
    return Status::OK();
  }

  // §3.7 each shard (§3.5): name range and form, file_size (at least the shard header, §4.1).
  // sample_count is checked last, against the records (CheckShardSampleCounts).
  Status CheckShardTable() {
    v_.shards_.reserve(s_count_);
    for (uint32_t k = 0; k < s_count_; ++k) {
      const uint64_t at = ShardAt(k);
      const std::byte* p = h_ + at;
      const uint64_t name_offset = GetU64(p + kV1ShardNameOffset);
      const uint64_t name_size = GetU64(p + kV1ShardNameSize);
      const std::string which = "shard " + std::to_string(k) + ": ";
      IndexShard shard;
      shard.file_size = GetU64(p + kV1ShardFileSize);
      shard.sample_count = GetU64(p + kV1ShardSampleCount);
      if (name_size == 0 || name_size > kMaxShardNameBytes ||
          !BlobRangeOk(name_offset, name_size))
        return Corrupt(at + kV1ShardNameOffset, which + "name range outside the blob");
      auto s = v_.blob(name_offset, name_size);
      shard.name.assign(reinterpret_cast<const char*>(s.data()), s.size());
      if (!IsPlainFileName(shard.name))
        return Corrupt(at + kV1ShardNameOffset,
                       which + "'" + shard.name + "' is not a plain file name");
      if (shard.file_size < kShardHeaderSize)
        return Corrupt(at + kV1ShardFileSize, which + "file size " +
                                                std::to_string(shard.file_size) +
                                                " is smaller than its header");
      v_.shards_.push_back(std::move(shard));
    }
    return Status::OK();
  }

  // §3.7 with flags bit 0: the shard uid array (§3.4), S u64 8-byte aligned within the blob.
  Status CheckShardUids() {
    if (!v_.has_shard_uids_) return Status::OK();
    if (uids_offset_ % 8 != 0 || !BlobRangeOk(uids_offset_, uint64_t{8} * s_count_))
      return Corrupt(kV1HeaderShardUids, "shard uids at blob offset " +
                                           std::to_string(uids_offset_) + " (" +
                                           std::to_string(s_count_) +
                                           " x 8 bytes) are unaligned or outside the blob");
    const std::byte* uids = h_ + v_.blob_offset_ + uids_offset_;
    for (uint32_t k = 0; k < s_count_; ++k) v_.shards_[k].uid = GetU64(uids + uint64_t{8} * k);
    return Status::OK();
  }

  // §3.7 each sample record, then its tensor entries and dims (§3.3).
  Status CheckSamples() {
    counts_.assign(s_count_, 0);
    dims_.resize(v_.dims_per_sample_);
    for (uint64_t i = 0; i < n_; ++i) {
      const SampleRecord r = SampleRecord::DecodeFrom(h_ + RecordAt(i));
      Status st = CheckSampleRecord(i, r);
      if (st.ok()) st = CheckTensorsAndDims(i, r);
      if (!st.ok()) return st;
      ++counts_[r.shard];
      if (!CheckedAdd(v_.total_raw_bytes_, r.raw_size, &v_.total_raw_bytes_))
        return BadSample(i, kRecordRawSize, "total raw bytes overflow");
    }
    return Status::OK();
  }

  // One sample record (§3.3), in §3.7's order: shard in range, alignment, bounds in its shard,
  // sizes within limits, flags, reserved, blob ranges, metadata encoding.
  Status CheckSampleRecord(uint64_t i, const SampleRecord& r) const {
    if (r.shard >= s_count_)
      return BadSample(i, kRecordShard, "shard " + std::to_string(r.shard) + " out of range (" +
                                            std::to_string(s_count_) + " shards)");
    const IndexShard& shard = v_.shards_[r.shard];
    if (r.offset % kSampleAlignment != 0 || r.offset < kShardHeaderSize)
      return BadSample(i, kRecordOffset, "offset " + std::to_string(r.offset) + " in " +
                                             shard.name + " is not a multiple of " +
                                             std::to_string(kSampleAlignment) +
                                             " past the shard header");
    uint64_t extent_end = 0;
    if (!CheckedAdd(r.offset, r.stored_size, &extent_end) || extent_end > shard.file_size)
      return BadSample(i, kRecordOffset, "bytes [" + std::to_string(r.offset) + ", +" +
                                             std::to_string(r.stored_size) +
                                             ") extend past the end of " + shard.name + " (" +
                                             std::to_string(shard.file_size) + " bytes)");
    if (r.stored_size > kMaxSampleBytes || r.raw_size > kMaxSampleBytes)
      return BadSample(i, kRecordStoredSize, "stored_size " + std::to_string(r.stored_size) +
                                                 " or raw_size " + std::to_string(r.raw_size) +
                                                 " exceeds the limit");
    if (r.flags & ~kKnownSampleFlags)
      return BadSample(i, kRecordFlags, "unknown flag bits 0x" +
                                            Hex16(r.flags & ~kKnownSampleFlags).substr(8));
    if ((r.flags & kFlagByteShuffle) && !(r.flags & kFlagZstd))
      return BadSample(i, kRecordFlags, "byte-shuffle flag without zstd");
    if (!(r.flags & kFlagZstd) && r.stored_size != r.raw_size)
      return BadSample(i, kRecordStoredSize, "uncompressed but stored_size " +
                                                 std::to_string(r.stored_size) + " != raw_size " +
                                                 std::to_string(r.raw_size));
    if ((r.flags & kFlagZstd) && r.stored_size == 0)
      return BadSample(i, kRecordStoredSize, "empty zstd frame");
    const std::byte* p = h_ + RecordAt(i);
    for (uint64_t k = kRecordReserved; k < kSampleRecordSize; ++k)
      if (p[k] != std::byte{0}) return BadSample(i, k, "reserved bytes are not zero");
    if (r.meta_size > kMaxMetadataBytes || !BlobRangeOk(r.meta_offset, r.meta_size))
      return BadSample(i, kRecordMetaOffset, "metadata range (" + std::to_string(r.meta_offset) +
                                                 ", " + std::to_string(r.meta_size) +
                                                 ") is too long or outside the blob");
    if (r.source_size > kMaxSourcePathBytes || !BlobRangeOk(r.source_offset, r.source_size))
      return BadSample(i, kRecordSourceOffset,
                       "source path range (" + std::to_string(r.source_offset) + ", " +
                           std::to_string(r.source_size) + ") is too long or outside the blob");
    // As in the current index (§3.8.5): a path never holds a NUL byte, so a version 1 index
    // `libshard upgrade` accepts always rewrites as one the current reader accepts.
    if (v_.source_path(i).find('\0') != std::string_view::npos)
      return BadSample(i, kRecordSourceOffset, "source path contains a NUL byte");
    Status ms = DecodeMetadata(v_.blob(r.meta_offset, r.meta_size), nullptr);
    if (!ms.ok()) return BadSample(i, kRecordMetaOffset, ms.message());
    return Status::OK();
  }

  // Sample i's tensor entries and dims (§3.3): nbytes from the shape and dtype, offsets the
  // canonical layout (§4.1), raw_size its end, length from the length field's shape.
  Status CheckTensorsAndDims(uint64_t i, const SampleRecord& r) {
    for (uint64_t j = 0; j < dims_.size(); ++j) dims_[j] = v_.dim(i, j);
    Status ls = ComputeLayout(v_.schema_, dims_, &layout_);
    if (!ls.ok()) return BadSample(i, kRecordOffset, ls.message());
    for (uint32_t f = 0; f < f_count_; ++f) {
      const Field& field = v_.schema_.fields[f];
      const uint64_t off = v_.tensor_offset(i, f), nbytes = v_.tensor_nbytes(i, f);
      const std::span<const uint64_t> shape(dims_.data() + v_.field_dim_start_[f], field.rank);
      const std::string which = file_ + ": sample " + std::to_string(i) + ": tensor '" +
                                field.name + "' ";
      if (nbytes != layout_.sizes[f])
        return Status::Corruption(which + "nbytes " + std::to_string(nbytes) + " != shape " +
                                  ShapeString(shape) + " x " + std::string(DTypeName(field.dtype)) +
                                  " = " + std::to_string(layout_.sizes[f]) + " bytes" + kDamaged);
      if (off != layout_.offsets[f])
        return Status::Corruption(which + "offset " + std::to_string(off) +
                                  " != canonical offset " + std::to_string(layout_.offsets[f]) +
                                  " (FORMAT.md §4.1)" + kDamaged);
    }
    if (r.raw_size != layout_.raw_size)
      return BadSample(i, kRecordRawSize, "raw_size " + std::to_string(r.raw_size) +
                                              " != end of the last tensor " +
                                              std::to_string(layout_.raw_size));
    const int32_t lf = v_.schema_.length_field;
    const uint64_t length =
        lf >= 0 ? dims_[v_.field_dim_start_[lf] + v_.schema_.fields[lf].seq_dim] : 0;
    if (r.length != length)
      return BadSample(i, kRecordLength, "length " + std::to_string(r.length) + " != " +
                                             std::to_string(length) +
                                             " from the shape of the length field");
    return Status::OK();
  }

  // §3.7 last: each shard's sample_count equals the number of records pointing into it.
  Status CheckShardSampleCounts() {
    for (uint32_t k = 0; k < s_count_; ++k)
      if (counts_[k] != v_.shards_[k].sample_count)
        return Corrupt(ShardAt(k) + kV1ShardSampleCount,
                       "shard " + std::to_string(k) + " records " +
                           std::to_string(v_.shards_[k].sample_count) + " samples but " +
                           std::to_string(counts_[k]) + " sample records point into it");
    return Status::OK();
  }

  const std::span<const std::byte> bytes_;
  const std::byte* const h_;
  const std::string& file_;
  IndexV1View v_;
  // Header values, valid once the step that reads them has succeeded.
  uint64_t n_ = 0;
  uint32_t f_count_ = 0;
  uint32_t s_count_ = 0;
  uint64_t uids_offset_ = 0;
  uint64_t fields_offset_ = 0;
  uint64_t shards_offset_ = 0;
  uint64_t blob_size_ = 0;
  // Scratch of CheckSamples, reused across samples.
  std::vector<uint64_t> counts_;  // records per shard
  std::vector<uint64_t> dims_;
  PayloadLayout layout_;
};

Result<IndexV1View> IndexV1View::Parse(std::span<const std::byte> bytes, const std::string& file) {
  return IndexV1Parser(bytes, file).Run();
}

}  // namespace libshard::format::legacy
