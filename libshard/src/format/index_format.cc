#include "format/index_format.h"

#include <cstring>
#include <unordered_set>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "libshard/sample.h"

namespace libshard::format {

namespace {

constexpr char kIndexMagic[8] = {'L', 'S', 'H', 'D', 'I', 'D', 'X', '\0'};

// Header field offsets (§3.1).
enum : size_t {
  kHVersion = 8, kHFlags = 12, kHSampleCount = 16, kHFieldCount = 24, kHShardCount = 28,
  kHFieldsOffset = 32, kHShardsOffset = 40, kHSamplesOffset = 48, kHTensorsOffset = 56,
  kHDimsOffset = 64, kHBlobOffset = 72, kHBlobSize = 80, kHFileSize = 88, kHLengthField = 96,
  kHShardUidsOffset = 100, kHReserved = 108,
};

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

void EncodeSampleRecord(const SampleRecord& r, std::byte* p) {
  std::memset(p, 0, kSampleRecordSize);
  PutU64(p + 0, r.offset);
  PutU64(p + 8, r.stored_size);
  PutU64(p + 16, r.raw_size);
  PutU64(p + 24, r.checksum);
  PutU32(p + 32, r.shard);
  PutU32(p + 36, r.flags);
  PutU64(p + 40, r.length);
  PutU64(p + 48, r.meta_offset);
  PutU64(p + 56, r.meta_size);
  PutU64(p + 64, r.source_offset);
  PutU64(p + 72, r.source_size);
  PutU64(p + 80, r.source_bytes);
  PutI64(p + 88, r.source_mtime_ns);
  PutU64(p + 96, r.source_hash);
}

SampleRecord DecodeSampleRecord(const std::byte* p) {
  SampleRecord r;
  r.offset = GetU64(p + 0);
  r.stored_size = GetU64(p + 8);
  r.raw_size = GetU64(p + 16);
  r.checksum = GetU64(p + 24);
  r.shard = GetU32(p + 32);
  r.flags = GetU32(p + 36);
  r.length = GetU64(p + 40);
  r.meta_offset = GetU64(p + 48);
  r.meta_size = GetU64(p + 56);
  r.source_offset = GetU64(p + 64);
  r.source_size = GetU64(p + 72);
  r.source_bytes = GetU64(p + 80);
  r.source_mtime_ns = GetI64(p + 88);
  r.source_hash = GetU64(p + 96);
  return r;
}

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxShardNameBytes && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

std::string EncodeIndex(const Schema& schema, const std::vector<IndexShard>& shards,
                        const std::vector<IndexSample>& samples) {
  const uint64_t n = samples.size();
  const uint64_t f_count = schema.fields.size();
  const uint64_t d = schema.DimsPerSample();

  std::string blob;
  auto add_blob = [&](std::string_view s) {
    uint64_t off = blob.size();
    blob.append(s);
    return off;
  };
  std::vector<uint64_t> counts(shards.size(), 0);
  for (const IndexSample& s : samples)
    if (s.record.shard < counts.size()) ++counts[s.record.shard];

  std::string out(kIndexHeaderSize, '\0');
  ByteWriter w(&out);
  const uint64_t fields_offset = kIndexHeaderSize;
  for (const Field& f : schema.fields) {
    w.U32(static_cast<uint32_t>(f.dtype));
    w.U32(f.rank);
    w.I32(f.seq_dim);
    w.U32(0);
    w.U64(add_blob(f.name));
    w.U64(f.name.size());
  }
  const uint64_t shards_offset = out.size();
  for (size_t k = 0; k < shards.size(); ++k) {
    w.U64(add_blob(shards[k].name));
    w.U64(shards[k].name.size());
    w.U64(shards[k].file_size);
    w.U64(counts[k]);
  }
  const uint64_t samples_offset = out.size();
  out.resize(samples_offset + kSampleRecordSize * n);
  for (uint64_t i = 0; i < n; ++i) {
    SampleRecord r = samples[i].record;
    r.meta_size = samples[i].metadata.size();
    r.meta_offset = r.meta_size ? add_blob(samples[i].metadata) : 0;
    r.source_size = samples[i].source_path.size();
    r.source_offset = r.source_size ? add_blob(samples[i].source_path) : 0;
    EncodeSampleRecord(r, reinterpret_cast<std::byte*>(out.data() + samples_offset +
                                                       kSampleRecordSize * i));
  }
  const uint64_t tensors_offset = out.size();
  for (const IndexSample& s : samples)
    for (uint64_t f = 0; f < f_count; ++f) {
      w.U64(s.tensor_offsets[f]);
      w.U64(s.tensor_sizes[f]);
    }
  const uint64_t dims_offset = out.size();
  for (const IndexSample& s : samples)
    for (uint64_t j = 0; j < d; ++j) w.U64(s.dims[j]);
  // Shard uids (§3.4): an 8-byte aligned array of S u64 at the end of the blob.
  bool uids = false;
  for (const IndexShard& sh : shards) uids = uids || sh.uid != 0;
  uint64_t uids_offset = 0;
  if (uids) {
    blob.resize(AlignUp(blob.size(), 8), '\0');
    uids_offset = blob.size();
    std::string arr;
    ByteWriter uw(&arr);
    for (const IndexShard& sh : shards) uw.U64(sh.uid);
    blob.append(arr);
  }
  const uint64_t blob_offset = out.size();
  out.append(blob);

  auto* h = reinterpret_cast<std::byte*>(out.data());
  std::memcpy(h, kIndexMagic, 8);
  PutU32(h + kHVersion, kIndexVersion);
  PutU32(h + kHFlags, uids ? kIndexFlagShardUids : 0);
  PutU64(h + kHShardUidsOffset, uids_offset);
  PutU64(h + kHSampleCount, n);
  PutU32(h + kHFieldCount, static_cast<uint32_t>(f_count));
  PutU32(h + kHShardCount, static_cast<uint32_t>(shards.size()));
  PutU64(h + kHFieldsOffset, fields_offset);
  PutU64(h + kHShardsOffset, shards_offset);
  PutU64(h + kHSamplesOffset, samples_offset);
  PutU64(h + kHTensorsOffset, tensors_offset);
  PutU64(h + kHDimsOffset, dims_offset);
  PutU64(h + kHBlobOffset, blob_offset);
  PutU64(h + kHBlobSize, blob.size());
  PutU64(h + kHFileSize, out.size());
  PutI32(h + kHLengthField, schema.length_field);
  PutU64(h + kIndexChecksumOffset,
         Xxh3WithHole({h, out.size()}, kIndexChecksumOffset));
  return out;
}

Result<IndexView> IndexView::Parse(std::span<const std::byte> bytes, const std::string& file) {
  auto corrupt = [&](uint64_t offset, const std::string& what) {
    return Status::Corruption(file + ": offset " + std::to_string(offset) + ": " + what + kDamaged);
  };
  if (bytes.size() < kIndexHeaderSize)
    return Status::Corruption(file + ": " + std::to_string(bytes.size()) +
                              " bytes is too short for an index header (128)" + kDamaged);
  const std::byte* h = bytes.data();
  if (std::memcmp(h, kIndexMagic, 8) != 0)
    return corrupt(0, "bad magic (not a libshard index)");
  const uint32_t version = GetU32(h + kHVersion);
  if (version != kIndexVersion)
    return Status::Unsupported(file + ": offset 8: index version " + std::to_string(version) +
                               " is not supported (this libshard reads version 1); the dataset "
                               "was written by a newer libshard, upgrade it");
  IndexView v;
  v.bytes_ = bytes;
  v.checksum_ = GetU64(h + kIndexChecksumOffset);
  const uint64_t actual = Xxh3WithHole(bytes, kIndexChecksumOffset);
  if (actual != v.checksum_)
    return corrupt(kIndexChecksumOffset, "index checksum mismatch: stored " + Hex16(v.checksum_) +
                                             ", computed " + Hex16(actual));
  const uint32_t flags = GetU32(h + kHFlags);
  if (flags & ~kKnownIndexFlags)
    return corrupt(kHFlags, "unknown header flags 0x" + Hex16(flags & ~kKnownIndexFlags).substr(8));
  v.has_shard_uids_ = (flags & kIndexFlagShardUids) != 0;
  const uint64_t uids_offset = GetU64(h + kHShardUidsOffset);
  if (!v.has_shard_uids_ && uids_offset != 0)
    return corrupt(kHShardUidsOffset, "shard uids offset is set but the shard-uid flag is not");
  for (size_t k = kHReserved; k < kIndexChecksumOffset; ++k)
    if (h[k] != std::byte{0}) return corrupt(k, "reserved header byte is not zero");

  const uint64_t n = GetU64(h + kHSampleCount);
  const uint32_t f_count = GetU32(h + kHFieldCount);
  const uint32_t s_count = GetU32(h + kHShardCount);
  if (n > kMaxSamples)
    return corrupt(kHSampleCount, "sample count " + std::to_string(n) + " exceeds the limit " +
                                      std::to_string(kMaxSamples));
  if (f_count == 0 || f_count > kMaxFields)
    return corrupt(kHFieldCount, "field count " + std::to_string(f_count) + " is not in 1.." +
                                     std::to_string(kMaxFields));
  if (s_count > kMaxShards)
    return corrupt(kHShardCount, "shard count " + std::to_string(s_count) + " exceeds the limit " +
                                     std::to_string(kMaxShards));
  if (s_count == 0 && n != 0) return corrupt(kHShardCount, "samples but no shards");

  // Section offsets follow from the counts (§3.1); the field table must fit before the ranks are
  // read, and the dims section size is checked only once they are.
  const uint64_t size = bytes.size();
  const uint64_t fields_offset = kIndexHeaderSize;
  const uint64_t shards_offset = fields_offset + kFieldRecordSize * f_count;
  if (GetU64(h + kHFieldsOffset) != fields_offset)
    return corrupt(kHFieldsOffset, "field table offset is not " + std::to_string(fields_offset));
  if (GetU64(h + kHShardsOffset) != shards_offset)
    return corrupt(kHShardsOffset, "shard table offset is not " + std::to_string(shards_offset));
  const uint64_t samples_offset = shards_offset + kShardRecordSize * s_count;
  if (GetU64(h + kHSamplesOffset) != samples_offset)
    return corrupt(kHSamplesOffset, "sample records offset is not " +
                                        std::to_string(samples_offset));
  if (GetU64(h + kHFileSize) != size)
    return corrupt(kHFileSize, "recorded index size " + std::to_string(GetU64(h + kHFileSize)) +
                                   " != actual size " + std::to_string(size) +
                                   " (truncated or extended)");
  if (samples_offset > size)
    return corrupt(kHShardCount, "field and shard tables extend past the end of the file");

  // Fields (§3.2). Ranks are bounded, so D <= 16 * 4096.
  v.field_dim_start_.reserve(f_count);
  v.schema_.fields.reserve(f_count);
  uint64_t d = 0;
  struct NameRef { uint64_t at, offset, size; };
  std::vector<NameRef> field_names;
  field_names.reserve(f_count);
  for (uint32_t f = 0; f < f_count; ++f) {
    const uint64_t at = fields_offset + kFieldRecordSize * f;
    const std::byte* p = h + at;
    Field field;
    const uint32_t dtype = GetU32(p);
    field.rank = GetU32(p + 4);
    field.seq_dim = GetI32(p + 8);
    if (!IsValidDType(dtype)) return corrupt(at, "field " + std::to_string(f) + ": invalid dtype code " + std::to_string(dtype));
    field.dtype = static_cast<DType>(dtype);
    if (field.rank > kMaxRank)
      return corrupt(at + 4, "field " + std::to_string(f) + ": rank " + std::to_string(field.rank) +
                                 " exceeds the limit " + std::to_string(kMaxRank));
    if (field.seq_dim < -1 || (field.seq_dim >= 0 && static_cast<uint32_t>(field.seq_dim) >= field.rank))
      return corrupt(at + 8, "field " + std::to_string(f) + ": seq_dim " +
                                 std::to_string(field.seq_dim) + " is not -1 or a dimension");
    if (GetU32(p + 12) != 0) return corrupt(at + 12, "field " + std::to_string(f) + ": reserved bytes are not zero");
    field_names.push_back({at + 16, GetU64(p + 16), GetU64(p + 24)});
    v.field_dim_start_.push_back(d);
    d += field.rank;
    v.schema_.fields.push_back(std::move(field));
  }
  v.dims_per_sample_ = d;
  const int32_t length_field = GetI32(h + kHLengthField);
  if (length_field < -1 || length_field >= static_cast<int64_t>(f_count) ||
      (length_field >= 0 && v.schema_.fields[length_field].seq_dim < 0))
    return corrupt(kHLengthField, "length_field " + std::to_string(length_field) +
                                      " is not -1 or a field with a seq_dim");
  v.schema_.length_field = length_field;

  uint64_t tensors_offset = 0, dims_offset = 0, blob_offset = 0, t_bytes = 0, d_bytes = 0;
  uint64_t nf = 0, nd = 0;
  if (!CheckedMul(n, kSampleRecordSize, &t_bytes) || !CheckedAdd(samples_offset, t_bytes, &tensors_offset) ||
      !CheckedMul(n, f_count, &nf) || !CheckedMul(nf, kTensorEntrySize, &t_bytes) ||
      !CheckedAdd(tensors_offset, t_bytes, &dims_offset) || !CheckedMul(n, d, &nd) ||
      !CheckedMul(nd, 8, &d_bytes) || !CheckedAdd(dims_offset, d_bytes, &blob_offset))
    return corrupt(kHSampleCount, "section sizes overflow (sample count " + std::to_string(n) + ")");
  if (GetU64(h + kHTensorsOffset) != tensors_offset)
    return corrupt(kHTensorsOffset, "tensor entries offset is not " + std::to_string(tensors_offset));
  if (GetU64(h + kHDimsOffset) != dims_offset)
    return corrupt(kHDimsOffset, "dims offset is not " + std::to_string(dims_offset));
  if (GetU64(h + kHBlobOffset) != blob_offset)
    return corrupt(kHBlobOffset, "blob offset is not " + std::to_string(blob_offset));
  const uint64_t blob_size = GetU64(h + kHBlobSize);
  uint64_t end = 0;
  if (!CheckedAdd(blob_offset, blob_size, &end) || end != size)
    return corrupt(kHBlobSize, "sections (sample count " + std::to_string(n) + ", blob " +
                                   std::to_string(blob_size) + " bytes) do not add up to the file size " +
                                   std::to_string(size));
  v.sample_count_ = n;
  v.samples_offset_ = samples_offset;
  v.tensors_offset_ = tensors_offset;
  v.dims_offset_ = dims_offset;
  v.blob_offset_ = blob_offset;

  auto blob_ok = [&](uint64_t off, uint64_t len) {
    uint64_t e = 0;
    return CheckedAdd(off, len, &e) && e <= blob_size;
  };
  std::unordered_set<std::string_view> names;
  for (uint32_t f = 0; f < f_count; ++f) {
    const NameRef& r = field_names[f];
    if (r.size == 0 || r.size > kMaxNameBytes || !blob_ok(r.offset, r.size))
      return corrupt(r.at, "field " + std::to_string(f) + ": name range (" + std::to_string(r.offset) +
                               ", " + std::to_string(r.size) + ") is empty, too long or outside the blob");
    auto s = v.blob(r.offset, r.size);
    std::string_view name(reinterpret_cast<const char*>(s.data()), s.size());
    if (name.find('\0') != std::string_view::npos)
      return corrupt(r.at, "field " + std::to_string(f) + ": name contains a NUL byte");
    if (!names.insert(name).second)
      return corrupt(r.at, "field " + std::to_string(f) + ": duplicate name '" + std::string(name) + "'");
    v.schema_.fields[f].name = std::string(name);
  }

  // Shards (§3.5).
  v.shards_.reserve(s_count);
  for (uint32_t k = 0; k < s_count; ++k) {
    const uint64_t at = shards_offset + kShardRecordSize * k;
    const std::byte* p = h + at;
    const uint64_t name_offset = GetU64(p), name_size = GetU64(p + 8);
    IndexShard shard;
    shard.file_size = GetU64(p + 16);
    shard.sample_count = GetU64(p + 24);
    if (name_size == 0 || name_size > kMaxShardNameBytes || !blob_ok(name_offset, name_size))
      return corrupt(at, "shard " + std::to_string(k) + ": name range outside the blob");
    auto s = v.blob(name_offset, name_size);
    shard.name.assign(reinterpret_cast<const char*>(s.data()), s.size());
    if (!IsPlainFileName(shard.name))
      return corrupt(at, "shard " + std::to_string(k) + ": '" + shard.name + "' is not a plain file name");
    if (shard.file_size < 4096)
      return corrupt(at + 16, "shard " + std::to_string(k) + ": file size " +
                                  std::to_string(shard.file_size) + " is smaller than its header");
    v.shards_.push_back(std::move(shard));
  }

  // Shard uids (§3.4): S u64, 8-byte aligned within the blob.
  if (v.has_shard_uids_) {
    if (uids_offset % 8 != 0 || !blob_ok(uids_offset, uint64_t{8} * s_count))
      return corrupt(kHShardUidsOffset, "shard uids at blob offset " + std::to_string(uids_offset) +
                                            " (" + std::to_string(s_count) +
                                            " x 8 bytes) are unaligned or outside the blob");
    const std::byte* uids = h + blob_offset + uids_offset;
    for (uint32_t k = 0; k < s_count; ++k) v.shards_[k].uid = GetU64(uids + uint64_t{8} * k);
  }

  // Samples (§3.3).
  std::vector<uint64_t> counts(s_count, 0);
  PayloadLayout layout;
  std::vector<uint64_t> dims(d);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t at = samples_offset + kSampleRecordSize * i;
    const std::byte* p = h + at;
    const SampleRecord r = DecodeSampleRecord(p);
    auto bad = [&](uint64_t field_at, const std::string& what) {
      return Status::Corruption(file + ": sample " + std::to_string(i) + " (record at offset " +
                                std::to_string(at + field_at) + "): " + what + kDamaged);
    };
    for (size_t k = 104; k < kSampleRecordSize; ++k)
      if (p[k] != std::byte{0}) return bad(k, "reserved bytes are not zero");
    if (r.flags & ~kKnownSampleFlags)
      return bad(36, "unknown flag bits 0x" + Hex16(r.flags & ~kKnownSampleFlags).substr(8));
    if ((r.flags & kFlagByteShuffle) && !(r.flags & kFlagZstd))
      return bad(36, "byte-shuffle flag without zstd");
    if (r.shard >= s_count)
      return bad(32, "shard " + std::to_string(r.shard) + " out of range (" +
                         std::to_string(s_count) + " shards)");
    const IndexShard& shard = v.shards_[r.shard];
    if (r.offset % kSampleAlignment != 0 || r.offset < 4096)
      return bad(0, "offset " + std::to_string(r.offset) + " in " + shard.name +
                        " is not a multiple of 4096 past the shard header");
    if (r.stored_size > kMaxSampleBytes || r.raw_size > kMaxSampleBytes)
      return bad(8, "stored_size " + std::to_string(r.stored_size) + " or raw_size " +
                        std::to_string(r.raw_size) + " exceeds the limit");
    uint64_t extent_end = 0;
    if (!CheckedAdd(r.offset, r.stored_size, &extent_end) || extent_end > shard.file_size)
      return bad(0, "bytes [" + std::to_string(r.offset) + ", +" + std::to_string(r.stored_size) +
                        ") extend past the end of " + shard.name + " (" +
                        std::to_string(shard.file_size) + " bytes)");
    if (!(r.flags & kFlagZstd) && r.stored_size != r.raw_size)
      return bad(8, "uncompressed but stored_size " + std::to_string(r.stored_size) +
                        " != raw_size " + std::to_string(r.raw_size));
    if ((r.flags & kFlagZstd) && r.stored_size == 0) return bad(8, "empty zstd frame");
    if (r.meta_size > kMaxMetadataBytes || !blob_ok(r.meta_offset, r.meta_size))
      return bad(48, "metadata range (" + std::to_string(r.meta_offset) + ", " +
                         std::to_string(r.meta_size) + ") is too long or outside the blob");
    if (r.source_size > kMaxSourcePathBytes || !blob_ok(r.source_offset, r.source_size))
      return bad(64, "source path range (" + std::to_string(r.source_offset) + ", " +
                         std::to_string(r.source_size) + ") is too long or outside the blob");
    Status ms = DecodeMetadata(v.blob(r.meta_offset, r.meta_size), nullptr);
    if (!ms.ok()) return bad(48, ms.message());
    ++counts[r.shard];

    for (uint64_t j = 0; j < d; ++j) dims[j] = v.dim(i, j);
    Status ls = ComputeLayout(v.schema_, dims, &layout);
    if (!ls.ok()) return bad(0, ls.message());
    for (uint32_t f = 0; f < f_count; ++f) {
      const Field& field = v.schema_.fields[f];
      const uint64_t off = v.tensor_offset(i, f), nbytes = v.tensor_nbytes(i, f);
      const std::span<const uint64_t> shape(dims.data() + v.field_dim_start_[f], field.rank);
      if (nbytes != layout.sizes[f])
        return Status::Corruption(file + ": sample " + std::to_string(i) + ": tensor '" +
                                  field.name + "' nbytes " + std::to_string(nbytes) +
                                  " != shape " + ShapeString(shape) + " x " +
                                  std::string(DTypeName(field.dtype)) + " = " +
                                  std::to_string(layout.sizes[f]) + " bytes" + kDamaged);
      if (off != layout.offsets[f])
        return Status::Corruption(file + ": sample " + std::to_string(i) + ": tensor '" +
                                  field.name + "' offset " + std::to_string(off) +
                                  " != canonical offset " + std::to_string(layout.offsets[f]) +
                                  " (FORMAT.md §4.1)" + kDamaged);
    }
    if (r.raw_size != layout.raw_size)
      return bad(16, "raw_size " + std::to_string(r.raw_size) + " != end of the last tensor " +
                         std::to_string(layout.raw_size));
    uint64_t length = 0;
    if (length_field >= 0)
      length = dims[v.field_dim_start_[length_field] + v.schema_.fields[length_field].seq_dim];
    if (r.length != length)
      return bad(40, "length " + std::to_string(r.length) + " != " + std::to_string(length) +
                         " from the shape of the length field");
    if (!CheckedAdd(v.total_raw_bytes_, r.raw_size, &v.total_raw_bytes_))
      return bad(16, "total raw bytes overflow");
  }
  for (uint32_t k = 0; k < s_count; ++k)
    if (counts[k] != v.shards_[k].sample_count)
      return corrupt(shards_offset + kShardRecordSize * k + 24,
                     "shard " + std::to_string(k) + " records " +
                         std::to_string(v.shards_[k].sample_count) + " samples but " +
                         std::to_string(counts[k]) + " sample records point into it");
  return v;
}

SampleRecord IndexView::record(uint64_t i) const {
  return DecodeSampleRecord(bytes_.data() + samples_offset_ + kSampleRecordSize * i);
}

uint64_t IndexView::tensor_offset(uint64_t i, size_t f) const {
  return GetU64(bytes_.data() + tensors_offset_ +
                kTensorEntrySize * (i * schema_.fields.size() + f));
}

uint64_t IndexView::tensor_nbytes(uint64_t i, size_t f) const {
  return GetU64(bytes_.data() + tensors_offset_ +
                kTensorEntrySize * (i * schema_.fields.size() + f) + 8);
}

uint64_t IndexView::dim(uint64_t i, uint64_t j) const {
  return GetU64(bytes_.data() + dims_offset_ + 8 * (i * dims_per_sample_ + j));
}

std::vector<uint64_t> IndexView::shape(uint64_t i, size_t f) const {
  std::vector<uint64_t> s(schema_.fields[f].rank);
  for (size_t k = 0; k < s.size(); ++k) s[k] = dim(i, field_dim_start_[f] + k);
  return s;
}

std::span<const std::byte> IndexView::blob(uint64_t offset, uint64_t size) const {
  return bytes_.subspan(blob_offset_ + offset, size);
}

std::string_view IndexView::source_path(uint64_t i) const {
  SampleRecord r = record(i);
  auto s = blob(r.source_offset, r.source_size);
  return {reinterpret_cast<const char*>(s.data()), s.size()};
}

std::span<const std::byte> IndexView::metadata_bytes(uint64_t i) const {
  SampleRecord r = record(i);
  return blob(r.meta_offset, r.meta_size);
}

IndexSample IndexView::Entry(uint64_t i) const {
  IndexSample s;
  s.record = record(i);
  s.dims.resize(dims_per_sample_);
  for (uint64_t j = 0; j < dims_per_sample_; ++j) s.dims[j] = dim(i, j);
  for (size_t f = 0; f < schema_.fields.size(); ++f) {
    s.tensor_offsets.push_back(tensor_offset(i, f));
    s.tensor_sizes.push_back(tensor_nbytes(i, f));
  }
  auto m = metadata_bytes(i);
  s.metadata.assign(reinterpret_cast<const char*>(m.data()), m.size());
  s.source_path = std::string(source_path(i));
  return s;
}

}  // namespace libshard::format
