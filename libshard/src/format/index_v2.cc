#include "format/index_v2.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_set>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"

namespace libshard::format {

namespace {

constexpr char kIndexMagic[8] = {'L', 'S', 'H', 'D', 'I', 'D', 'X', '\0'};
constexpr const char* kDamaged = "; the index is damaged, re-run libshard pack";
constexpr uint16_t kMaxKnownCodec = 4;

// Bytes needed for v (0 for 0).
uint8_t WidthOf(uint64_t v) { return static_cast<uint8_t>((std::bit_width(v) + 7) / 8); }

uint64_t GetUN(const std::byte* p, uint8_t width) {
  uint64_t v = 0;
  for (uint8_t k = 0; k < width; ++k) v |= uint64_t{std::to_integer<uint8_t>(p[k])} << (8 * k);
  return v;
}

void PutUN(std::string* out, uint64_t v, uint8_t width) {
  for (uint8_t k = 0; k < width; ++k) out->push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

uint64_t Align8(uint64_t x) { return AlignUp(x, 8); }

// A sample's stored region size for field f (0 when the writer gave none).
uint64_t StoredSize(const IndexSample& s, size_t f) {
  return f < s.field_stored_sizes.size() ? s.field_stored_sizes[f] : 0;
}

}  // namespace

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

Result<uint32_t> PeekIndexVersion(std::span<const std::byte> bytes, const std::string& file) {
  if (bytes.size() < kIndexHeaderSize)
    return Status::Corruption(file + ": " + std::to_string(bytes.size()) +
                              " bytes is too short for an index header (128)" + kDamaged);
  if (std::memcmp(bytes.data(), kIndexMagic, sizeof(kIndexMagic)) != 0)
    return Status::Corruption(file + ": offset 0: bad magic (not a libshard index)" +
                              std::string(kDamaged));
  const uint32_t version = GetU32(bytes.data() + kHeaderVersion);
  if (version != kIndexVersion && version != kIndexVersion2 && version != kIndexVersion3)
    return Status::Unsupported(file + ": offset 8: index version " + std::to_string(version) +
                               " is not supported (this libshard reads versions 1 to 3); the "
                               "dataset was written by a newer libshard, upgrade libshard");
  return version;
}

// ---- Encoder (§3.8) ---------------------------------------------------------------------------

std::string EncodeIndexV2(const Schema& schema, const std::vector<IndexShard>& shards,
                          const std::vector<IndexSample>& samples,
                          std::span<const FieldCodec> codecs, uint32_t block_samples,
                          uint32_t version) {
  const uint64_t n = samples.size();
  const size_t f_count = schema.fields.size();
  bool field_sums = version >= kIndexVersion3;  // §3.9: only when every sample has them
  for (const IndexSample& s : samples)
    field_sums = field_sums && s.field_checksums.size() == f_count;
  const uint64_t d = schema.DimsPerSample();
  std::vector<FieldCodec> codec(f_count);
  for (size_t f = 0; f < f_count && f < codecs.size(); ++f) codec[f] = codecs[f];
  const int32_t lf = schema.length_field;

  // Dims: constant, the length, or a column (§3.8.3).
  std::vector<uint64_t> field_dim_start(f_count);
  int64_t length_dim = -1;
  for (size_t f = 0, j = 0; f < f_count; j += schema.fields[f].rank, ++f) {
    field_dim_start[f] = j;
    if (static_cast<int32_t>(f) == lf) length_dim = static_cast<int64_t>(j) + schema.fields[f].seq_dim;
  }
  std::vector<DimKind> kind(d, DimKind::kConstant);
  std::vector<uint64_t> value(d, 0);
  std::vector<uint8_t> dim_width(d, 0);
  for (uint64_t j = 0; j < d; ++j) {
    if (static_cast<int64_t>(j) == length_dim) {
      kind[j] = DimKind::kLength;
      continue;
    }
    bool constant = true, is_length = lf >= 0;
    for (const IndexSample& s : samples) {
      constant = constant && s.dims[j] == samples.front().dims[j];
      is_length = is_length && s.dims[j] == s.record.length;
      if (!constant && !is_length) break;
    }
    if (constant) {
      value[j] = n ? samples.front().dims[j] : 0;
    } else if (is_length) {
      kind[j] = DimKind::kLength;
    } else {
      kind[j] = DimKind::kColumn;
      for (const IndexSample& s : samples) dim_width[j] = std::max(dim_width[j], WidthOf(s.dims[j]));
    }
  }

  // Column widths: the fewest bytes that hold every sample's value.
  std::array<uint8_t, kBaseColumns> width{};
  width[kColChecksum] = 8;
  std::vector<uint8_t> stored_width(f_count, 0);
  uint8_t length_width = 0;
  bool derived_stored = true;
  PayloadLayout layout;
  for (const IndexSample& s : samples) {
    const SampleRecord& r = s.record;
    width[kColShard] = std::max(width[kColShard], WidthOf(r.shard));
    width[kColOffsetPages] = std::max(width[kColOffsetPages], WidthOf(r.offset / kSampleAlignment));
    width[kColStoredSize] = std::max(width[kColStoredSize], WidthOf(r.stored_size));
    width[kColFlags] = std::max(width[kColFlags], WidthOf(r.flags));
    width[kColSourceBytes] = std::max(width[kColSourceBytes], WidthOf(r.source_bytes));
    width[kColSourceMtime] =
        std::max(width[kColSourceMtime], WidthOf(static_cast<uint64_t>(r.source_mtime_ns)));
    width[kColSourceHash] = std::max(width[kColSourceHash], WidthOf(r.source_hash));
    if (lf >= 0) length_width = std::max(length_width, WidthOf(r.length));
    for (size_t f = 0; f < f_count; ++f)
      if (codec[f].codec != 0)
        stored_width[f] = std::max(stored_width[f], WidthOf(StoredSize(s, f)));
    if (derived_stored) {
      uint64_t total = 0;
      derived_stored = ComputeLayout(schema, s.dims, &layout).ok() &&
                       ComputeStoredLayout(codec, layout.sizes, s.field_stored_sizes, nullptr,
                                           &total) &&
                       total == r.stored_size;
    }
  }
  if (derived_stored) width[kColStoredSize] = 0;
  for (size_t f = 0; f < f_count; ++f)
    if (codec[f].codec != 0) stored_width[f] = std::max<uint8_t>(stored_width[f], 1);

  // Blocks: records, then the path area and the metadata area (§3.8.6). The area end columns'
  // widths need the areas, so the areas are built first.
  const uint64_t k_count = (n + block_samples - 1) / block_samples;
  std::vector<std::string> path_areas(k_count), meta_areas(k_count);
  std::vector<std::vector<uint64_t>> path_ends(k_count), meta_ends(k_count);
  for (uint64_t b = 0; b < k_count; ++b) {
    const uint64_t first = b * block_samples, count = std::min<uint64_t>(block_samples, n - first);
    std::string_view prev;
    for (uint64_t k = 0; k < count; ++k) {
      const IndexSample& s = samples[first + k];
      std::string& pa = path_areas[b];
      if (k % kPathRestartInterval == 0) prev = {};
      if (!s.source_path.empty()) {
        size_t shared = 0;
        const size_t limit = std::min({prev.size(), s.source_path.size() - 1, size_t{65535}});
        while (shared < limit && prev[shared] == s.source_path[shared]) ++shared;
        PutUN(&pa, shared, 2);
        pa.append(s.source_path, shared);
      }
      prev = s.source_path;
      path_ends[b].push_back(pa.size());
      meta_areas[b].append(s.metadata);
      meta_ends[b].push_back(meta_areas[b].size());
      width[kColPathEnd] = std::max(width[kColPathEnd], WidthOf(pa.size()));
      width[kColMetaEnd] = std::max(width[kColMetaEnd], WidthOf(meta_areas[b].size()));
    }
  }

  // Strings: field names, then shard names.
  std::string strings;
  std::vector<uint64_t> name_at(f_count), shard_name_at(shards.size());
  for (size_t f = 0; f < f_count; ++f) {
    name_at[f] = strings.size();
    strings.append(schema.fields[f].name);
  }
  for (size_t k = 0; k < shards.size(); ++k) {
    shard_name_at[k] = strings.size();
    strings.append(shards[k].name);
  }
  std::vector<uint64_t> counts(shards.size(), 0);
  uint64_t total_raw = 0;
  for (const IndexSample& s : samples) {
    if (s.record.shard < counts.size()) ++counts[s.record.shard];
    total_raw += s.record.raw_size;
  }
  bool uids = false;
  for (const IndexShard& sh : shards) uids = uids || sh.uid != 0;

  // Head.
  std::string out(kIndexHeaderSize, '\0');
  ByteWriter w(&out);
  for (size_t f = 0; f < f_count; ++f) {
    const Field& field = schema.fields[f];
    w.U32(static_cast<uint32_t>(field.dtype));
    w.U16(static_cast<uint16_t>(field.rank));
    w.U16(codec[f].codec);
    w.I32(field.seq_dim);
    w.U16(static_cast<uint16_t>(field.name.size()));
    w.U8(stored_width[f]);
    w.U8(0);
    w.U64(name_at[f]);
    for (uint8_t p : codec[f].params) w.U8(codec[f].codec ? p : 0);
  }
  for (uint64_t j = 0; j < d; ++j) {
    w.U8(static_cast<uint8_t>(kind[j]));
    w.U8(dim_width[j]);
    for (int k = 0; k < 6; ++k) w.U8(0);
    w.U64(value[j]);
  }
  for (size_t k = 0; k < shards.size(); ++k) {
    w.U64(shard_name_at[k]);
    w.U64(shards[k].name.size());
    w.U64(shards[k].file_size);
    w.U64(counts[k]);
    w.U64(shards[k].uid);
  }
  const uint64_t directory_at = out.size();
  out.resize(out.size() + kBlockEntrySize * k_count);
  out.append(strings);
  out.resize(Align8(out.size()), '\0');
  const uint64_t head_size = out.size();

  // Lengths.
  for (const IndexSample& s : samples) PutUN(&out, s.record.length, length_width);
  out.resize(Align8(out.size()), '\0');
  const uint64_t lengths_checksum =
      Xxh3(AsBytes(out) + head_size, out.size() - head_size);

  // Blocks.
  for (uint64_t b = 0; b < k_count; ++b) {
    const uint64_t begin = out.size();
    const uint64_t first = b * block_samples, count = std::min<uint64_t>(block_samples, n - first);
    for (uint64_t k = 0; k < count; ++k) {
      const IndexSample& s = samples[first + k];
      const SampleRecord& r = s.record;
      PutUN(&out, r.shard, width[kColShard]);
      PutUN(&out, r.offset / kSampleAlignment, width[kColOffsetPages]);
      PutUN(&out, r.stored_size, width[kColStoredSize]);
      PutUN(&out, r.checksum, width[kColChecksum]);
      PutUN(&out, r.flags, width[kColFlags]);
      PutUN(&out, r.source_bytes, width[kColSourceBytes]);
      PutUN(&out, static_cast<uint64_t>(r.source_mtime_ns), width[kColSourceMtime]);
      PutUN(&out, r.source_hash, width[kColSourceHash]);
      PutUN(&out, path_ends[b][k], width[kColPathEnd]);
      PutUN(&out, meta_ends[b][k], width[kColMetaEnd]);
      for (uint64_t j = 0; j < d; ++j)
        if (kind[j] == DimKind::kColumn) PutUN(&out, s.dims[j], dim_width[j]);
      for (size_t f = 0; f < f_count; ++f)
        if (codec[f].codec != 0) PutUN(&out, StoredSize(s, f), stored_width[f]);
      if (field_sums)
        for (size_t f = 0; f < f_count; ++f)
          PutUN(&out, s.field_checksums[f], kFieldChecksumWidth);
    }
    out.append(path_areas[b]);
    out.append(meta_areas[b]);
    auto* e = reinterpret_cast<std::byte*>(out.data() + directory_at + kBlockEntrySize * b);
    PutU64(e, begin);
    PutU64(e + 8, Xxh3(AsBytes(out) + begin, out.size() - begin));
  }

  auto* h = reinterpret_cast<std::byte*>(out.data());
  std::memcpy(h, kIndexMagic, 8);
  PutU32(h + kHeaderVersion, version >= kIndexVersion3 ? kIndexVersion3 : kIndexVersion2);
  PutU32(h + kHeaderFlags, (uids ? kIndexFlagShardUids : 0) |
                               (field_sums ? kIndexFlagFieldChecksums : 0));
  PutU64(h + kHeaderSampleCount, n);
  PutU32(h + kHeaderFieldCount, static_cast<uint32_t>(f_count));
  PutU32(h + kHeaderShardCount, static_cast<uint32_t>(shards.size()));
  PutU32(h + kV2BlockSamples, block_samples);
  PutI32(h + kV2LengthField, lf);
  PutU64(h + kV2StringsSize, strings.size());
  PutU64(h + kV2LengthsChecksum, lengths_checksum);
  PutU64(h + kV2FileSize, out.size());
  PutU64(h + kV2TotalRawBytes, total_raw);
  h[kV2LengthWidth] = std::byte{length_width};
  for (size_t c = 0; c < kBaseColumns; ++c) h[kV2ColumnWidths + c] = std::byte{width[c]};
  PutU32(h + kV2DimsPerSample, static_cast<uint32_t>(d));
  PutU64(h + kIndexChecksumOffset, Xxh3WithHole({h, head_size}, kIndexChecksumOffset));
  return out;
}

// ---- Parser (§3.8.7) --------------------------------------------------------------------------

namespace {

struct HeadCounts {
  uint32_t version = 0;
  bool field_sums = false;
  uint64_t n = 0, d = 0, k = 0, strings_size = 0;
  uint32_t f = 0, s = 0, b = 0;
  uint8_t length_width = 0;
  uint64_t base_width = 0;
  uint64_t fields_at = 0, dims_at = 0, shards_at = 0, directory_at = 0, strings_at = 0;
  uint64_t head_size = 0, lengths_size = 0;
};

Status HeaderCorrupt(const std::string& file, uint64_t offset, const std::string& what) {
  return Status::Corruption(file + ": offset " + std::to_string(offset) + ": " + what + kDamaged);
}

// §3.8.7 up to the minimal size bound: everything the 128-byte header alone decides.
Result<HeadCounts> CheckHeaderBytes(std::span<const std::byte> bytes, uint64_t file_size,
                                    const std::string& file) {
  LIBSHARD_ASSIGN_OR_RETURN(uint32_t version, PeekIndexVersion(bytes, file));
  if (version != kIndexVersion2 && version != kIndexVersion3)
    return HeaderCorrupt(file, kHeaderVersion, "not version 2 or 3");
  const std::byte* h = bytes.data();
  auto bad = [&](uint64_t at, const std::string& what) { return HeaderCorrupt(file, at, what); };
  if (GetU64(h + kV2FileSize) != file_size)
    return bad(kV2FileSize, "recorded index size " + std::to_string(GetU64(h + kV2FileSize)) +
                                " != actual size " + std::to_string(file_size) +
                                " (truncated or extended)");
  const uint32_t flags = GetU32(h + kHeaderFlags);
  const uint32_t known =
      kKnownIndexFlags | (version >= kIndexVersion3 ? kIndexFlagFieldChecksums : 0);
  if (flags & ~known)
    return bad(kHeaderFlags, "unknown header flags 0x" + Hex16(flags & ~known).substr(8));
  if (h[kV2Reserved83] != std::byte{0}) return bad(kV2Reserved83, "reserved header byte is not zero");
  for (uint64_t k = kV2Reserved; k < kIndexChecksumOffset; ++k)
    if (h[k] != std::byte{0}) return bad(k, "reserved header byte is not zero");
  HeadCounts c;
  c.version = version;
  c.field_sums = (flags & kIndexFlagFieldChecksums) != 0;
  c.n = GetU64(h + kHeaderSampleCount);
  c.f = GetU32(h + kHeaderFieldCount);
  c.s = GetU32(h + kHeaderShardCount);
  c.b = GetU32(h + kV2BlockSamples);
  c.d = GetU32(h + kV2DimsPerSample);
  c.strings_size = GetU64(h + kV2StringsSize);
  c.length_width = std::to_integer<uint8_t>(h[kV2LengthWidth]);
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
    return bad(kV2BlockSamples, "block_samples " + std::to_string(c.b) +
                                    " is not a power of two in 1.." +
                                    std::to_string(kMaxBlockSamples));
  if (c.d > uint64_t{kMaxFields} * kMaxRank)
    return bad(kV2DimsPerSample, "dims_per_sample " + std::to_string(c.d) + " exceeds the limit");
  if (c.length_width > 8) return bad(kV2LengthWidth, "length width exceeds 8");
  for (size_t col = 0; col < kBaseColumns; ++col) {
    const uint8_t wd = std::to_integer<uint8_t>(h[kV2ColumnWidths + col]);
    if (wd > 8 || (col == kColChecksum && wd != 8))
      return bad(kV2ColumnWidths + col, "column " + std::to_string(col) + " width " +
                                            std::to_string(wd) + " is invalid");
    c.base_width += wd;
  }
  if (c.field_sums) c.base_width += kFieldChecksumWidth * uint64_t{c.f};  // §3.9: every record
  // Counts are bounded above, so these products and sums fit in 64 bits except via strings_size.
  c.k = (c.n + c.b - 1) / c.b;
  c.fields_at = kIndexHeaderSize;
  c.dims_at = c.fields_at + kFieldRecordSizeV2 * c.f;
  c.shards_at = c.dims_at + kDimRecordSize * c.d;
  c.directory_at = c.shards_at + kShardRecordSizeV2 * c.s;
  c.strings_at = c.directory_at + kBlockEntrySize * c.k;
  uint64_t total = 0;
  if (!CheckedAdd(c.strings_at, c.strings_size, &c.head_size) ||
      !CheckedAlignUp(c.head_size, 8, &c.head_size) ||
      !CheckedAdd(c.head_size, AlignUp(c.n * c.length_width, 8), &total) ||
      !CheckedAdd(total, c.n * c.base_width, &total) || total > file_size)
    return bad(kHeaderSampleCount, "the head and the records of " + std::to_string(c.n) +
                                       " samples cannot fit in the file's " +
                                       std::to_string(file_size) + " bytes (strings " +
                                       std::to_string(c.strings_size) + " bytes)");
  c.lengths_size = AlignUp(c.n * c.length_width, 8);
  return c;
}

}  // namespace

Result<IndexV2Layout> IndexV2::ParseHeader(std::span<const std::byte> header, uint64_t file_size,
                                           const std::string& file) {
  LIBSHARD_ASSIGN_OR_RETURN(HeadCounts c, CheckHeaderBytes(header, file_size, file));
  return IndexV2Layout{c.head_size, c.head_size, c.lengths_size};
}

class IndexV2Parser {
 public:
  IndexV2Parser(IndexV2* v, const HeadCounts& c) : v_(*v), c_(c), h_(v->head_.data()) {}

  Status Run() {
    for (Status (IndexV2Parser::*step)() :
         {&IndexV2Parser::CheckChecksum, &IndexV2Parser::CheckFields,
          &IndexV2Parser::CheckLengthField, &IndexV2Parser::CheckDims,
          &IndexV2Parser::CheckShards, &IndexV2Parser::CheckDirectory,
          &IndexV2Parser::CheckLengths}) {
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
    v_.checksum_ = GetU64(h_ + kIndexChecksumOffset);
    const uint64_t actual = Xxh3WithHole(v_.head_, kIndexChecksumOffset);
    if (actual != v_.checksum_)
      return Corrupt(kIndexChecksumOffset, "index checksum mismatch: stored " +
                                               Hex16(v_.checksum_) + ", computed " + Hex16(actual));
    v_.has_shard_uids_ = (GetU32(h_ + kHeaderFlags) & kIndexFlagShardUids) != 0;
    v_.total_raw_bytes_ = GetU64(h_ + kV2TotalRawBytes);
    return Status::OK();
  }

  Status CheckFields() {
    std::unordered_set<std::string_view> names;
    uint64_t d = 0;
    v_.codecs_.resize(c_.f);
    v_.stored_width_.resize(c_.f);
    for (uint32_t f = 0; f < c_.f; ++f) {
      const uint64_t at = c_.fields_at + kFieldRecordSizeV2 * f;
      const std::byte* p = h_ + at;
      const std::string which = "field " + std::to_string(f) + ": ";
      Field field;
      const uint32_t dtype = GetU32(p);
      field.rank = GetU16(p + 4);
      const uint16_t codec = GetU16(p + 6);
      field.seq_dim = GetI32(p + 8);
      const uint16_t name_size = GetU16(p + 12);
      const uint8_t stored_width = std::to_integer<uint8_t>(p[14]);
      const uint64_t name_offset = GetU64(p + 16);
      if (!IsValidDType(dtype))
        return Corrupt(at, which + "invalid dtype code " + std::to_string(dtype));
      field.dtype = static_cast<DType>(dtype);
      if (field.rank > kMaxRank)
        return Corrupt(at + 4, which + "rank " + std::to_string(field.rank) + " exceeds the limit");
      if (codec > kMaxKnownCodec)
        return Status::Unsupported(v_.file_ + ": offset " + std::to_string(at + 6) + ": " + which +
                                   "codec " + std::to_string(codec) +
                                   " is not known to this libshard (written by a newer one); "
                                   "upgrade libshard");
      if (field.seq_dim < -1 ||
          (field.seq_dim >= 0 && static_cast<uint32_t>(field.seq_dim) >= field.rank))
        return Corrupt(at + 8, which + "seq_dim " + std::to_string(field.seq_dim) +
                                   " is not -1 or a dimension");
      if ((codec == 0) != (stored_width == 0) || stored_width > 8)
        return Corrupt(at + 14, which + "stored size width " + std::to_string(stored_width) +
                                    " does not fit codec " + std::to_string(codec));
      if (p[15] != std::byte{0}) return Corrupt(at + 15, which + "reserved byte is not zero");
      FieldCodec fc;
      fc.codec = codec;
      for (int k = 0; k < 8; ++k) fc.params[k] = std::to_integer<uint8_t>(p[24 + k]);
      if (codec == 0 && fc != FieldCodec{})
        return Corrupt(at + 24, which + "codec parameters of a raw field are not zero");
      if (name_size == 0 || name_size > kMaxNameBytes || !StringOk(name_offset, name_size))
        return Corrupt(at + 12, which + "name range (" + std::to_string(name_offset) + ", " +
                                    std::to_string(name_size) +
                                    ") is empty, too long or outside the strings");
      const std::string_view name = String(name_offset, name_size);
      if (name.find('\0') != std::string_view::npos)
        return Corrupt(at + 16, which + "name contains a NUL byte");
      if (!names.insert(name).second)
        return Corrupt(at + 16, which + "duplicate name '" + std::string(name) + "'");
      field.name = std::string(name);
      d += field.rank;
      v_.codecs_[f] = fc;
      v_.stored_width_[f] = stored_width;
      v_.any_codec_ = v_.any_codec_ || codec != 0;
      v_.schema_.fields.push_back(std::move(field));
    }
    if (d != c_.d)
      return Corrupt(kV2DimsPerSample, "dims_per_sample " + std::to_string(c_.d) +
                                           " != the sum of the field ranks " + std::to_string(d));
    v_.d_ = d;
    return Status::OK();
  }

  Status CheckLengthField() {
    const int32_t lf = GetI32(h_ + kV2LengthField);
    if (lf < -1 || lf >= static_cast<int64_t>(c_.f) ||
        (lf >= 0 && v_.schema_.fields[lf].seq_dim < 0))
      return Corrupt(kV2LengthField,
                     "length_field " + std::to_string(lf) + " is not -1 or a field with a seq_dim");
    if (lf < 0 && c_.length_width != 0)
      return Corrupt(kV2LengthWidth, "lengths are stored but there is no length field");
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
      v_.width_[c] = std::to_integer<uint8_t>(h_[kV2ColumnWidths + c]);
      v_.column_[c] = col;
      col += v_.width_[c];
    }
    v_.dims_.resize(c_.d);
    for (uint64_t j = 0; j < c_.d; ++j) {
      const uint64_t at = c_.dims_at + kDimRecordSize * j;
      const std::byte* p = h_ + at;
      const uint8_t kind = std::to_integer<uint8_t>(p[0]);
      const uint8_t width = std::to_integer<uint8_t>(p[1]);
      const uint64_t value = GetU64(p + 8);
      const std::string which = "dim " + std::to_string(j) + ": ";
      for (int k = 2; k < 8; ++k)
        if (p[k] != std::byte{0}) return Corrupt(at + k, which + "reserved byte is not zero");
      if (kind > 2) return Corrupt(at, which + "unknown kind " + std::to_string(kind));
      if ((kind != 2 && width != 0) || width > 8)
        return Corrupt(at + 1, which + "width " + std::to_string(width) + " is invalid");
      if (kind != 0 && value != 0) return Corrupt(at + 8, which + "value of a non-constant dim");
      if (kind == 1 && lf < 0) return Corrupt(at, which + "a length dim without a length field");
      if (static_cast<int64_t>(j) == length_dim && kind != 1)
        return Corrupt(at, which + "the length field's sequence dim must be the length");
      IndexV2::DimInfo& di = v_.dims_[j];
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
    v_.record_width_ = col;
    return Status::OK();
  }

  Status CheckShards() {
    const bool uids = v_.has_shard_uids_;
    v_.shards_.reserve(c_.s);
    for (uint32_t k = 0; k < c_.s; ++k) {
      const uint64_t at = c_.shards_at + kShardRecordSizeV2 * k;
      const std::byte* p = h_ + at;
      const std::string which = "shard " + std::to_string(k) + ": ";
      const uint64_t name_offset = GetU64(p), name_size = GetU64(p + 8);
      IndexShard shard;
      shard.file_size = GetU64(p + 16);
      shard.sample_count = GetU64(p + 24);
      shard.uid = GetU64(p + 32);
      if (name_size == 0 || name_size > kMaxShardNameBytes || !StringOk(name_offset, name_size))
        return Corrupt(at, which + "name range outside the strings");
      shard.name = std::string(String(name_offset, name_size));
      if (!IsPlainFileName(shard.name))
        return Corrupt(at, which + "'" + shard.name + "' is not a plain file name");
      if (shard.file_size < kShardHeaderSize)
        return Corrupt(at + 16, which + "file size " + std::to_string(shard.file_size) +
                                    " is smaller than its header");
      if (shard.sample_count > c_.n)
        return Corrupt(at + 24, which + "sample count exceeds the dataset's");
      if (!uids && shard.uid != 0)
        return Corrupt(at + 32, which + "uid is set but the shard-uid flag is not");
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
      if ((b == 0 && offset != v_.blocks_begin_) || offset < expect || offset > v_.file_size_)
        return Corrupt(at, "block " + std::to_string(b) + " offset " + std::to_string(offset) +
                               " is out of order or outside the file");
      expect = offset + count * v_.record_width_;  // bounded: count * R <= 2^16 * 2^16ish
      if (expect > v_.file_size_ || expect < offset)
        return Corrupt(at, "block " + std::to_string(b) + " at offset " + std::to_string(offset) +
                               " has no room for its " + std::to_string(count) + " records");
      v_.blocks_[2 * b] = offset;
      v_.blocks_[2 * b + 1] = GetU64(h_ + at + 8);
    }
    if (c_.k == 0 && v_.blocks_begin_ != v_.file_size_)
      return Corrupt(kV2FileSize, "bytes after the lengths of an empty index");
    return Status::OK();
  }

  Status CheckLengths() {
    const uint64_t sum = Xxh3(v_.lengths_);
    if (sum != GetU64(h_ + kV2LengthsChecksum))
      return Corrupt(c_.head_size, "lengths checksum mismatch: stored " +
                                       Hex16(GetU64(h_ + kV2LengthsChecksum)) + ", computed " +
                                       Hex16(sum));
    return Status::OK();
  }

  IndexV2& v_;
  const HeadCounts& c_;
  const std::byte* h_;
};

Result<IndexV2> IndexV2::Parse(std::vector<std::byte> head, std::vector<std::byte> lengths,
                               uint64_t file_size, const std::string& file) {
  if (head.size() < kIndexHeaderSize)
    return Status::Corruption(file + ": head shorter than the header" + std::string(kDamaged));
  LIBSHARD_ASSIGN_OR_RETURN(HeadCounts c, CheckHeaderBytes({head.data(), kIndexHeaderSize},
                                                           file_size, file));
  if (head.size() != c.head_size || lengths.size() != c.lengths_size)
    return Status::InvalidArgument(file + ": IndexV2::Parse needs the head and lengths that "
                                          "ParseHeader located");
  IndexV2 v;
  v.file_ = file;
  v.head_ = std::move(head);
  v.lengths_ = std::move(lengths);
  v.n_ = c.n;
  v.file_size_ = file_size;
  v.block_samples_ = c.b;
  v.version_ = c.version;
  v.field_checksums_ = c.field_sums;
  LIBSHARD_RETURN_IF_ERROR(IndexV2Parser(&v, c).Run());
  return v;
}

uint64_t IndexV2::block_size(uint64_t b) const {
  const uint64_t end = b + 1 < block_count() ? blocks_[2 * (b + 1)] : file_size_;
  return end - blocks_[2 * b];
}

uint64_t IndexV2::length(uint64_t i) const {
  return GetUN(lengths_.data() + i * length_width_, length_width_);
}

void IndexV2::Lengths(std::vector<uint64_t>* out) const {
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

uint64_t IndexV2::Column(const std::byte* record, size_t c) const {
  return GetUN(record + column_[c], width_[c]);
}

const std::byte* IndexV2::RecordPtr(const IndexV2Block& block, uint64_t i) const {
  return block.bytes_.data() + (i - block.first_) * record_width_;
}

void IndexV2::AreaRange(const IndexV2Block& block, uint64_t k, size_t end_column,
                        uint64_t* begin, uint64_t* end) const {
  const std::byte* r = block.bytes_.data() + k * record_width_;
  *begin = k == 0 ? 0 : Column(r - record_width_, end_column);
  *end = Column(r, end_column);
}

SampleRecord IndexV2::Record(const IndexV2Block& block, uint64_t i) const {
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

void IndexV2::Dims(const IndexV2Block& block, uint64_t i, std::vector<uint64_t>* dims) const {
  const std::byte* p = RecordPtr(block, i);
  dims->resize(d_);
  for (uint64_t j = 0; j < d_; ++j) {
    const DimInfo& di = dims_[j];
    (*dims)[j] = di.kind == DimKind::kConstant ? di.value
                 : di.kind == DimKind::kLength ? length(i)
                                               : GetUN(p + di.column, di.width);
  }
}

void IndexV2::FieldStoredSizes(const IndexV2Block& block, uint64_t i,
                               std::vector<uint64_t>* out) const {
  out->assign(schema_.fields.size(), 0);
  if (!any_codec_) return;
  const std::byte* p = RecordPtr(block, i);
  for (size_t f = 0; f < out->size(); ++f)
    if (stored_width_[f]) (*out)[f] = GetUN(p + stored_column_[f], stored_width_[f]);
}

void IndexV2::FieldChecksums(const IndexV2Block& block, uint64_t i,
                             std::vector<uint64_t>* out) const {
  out->resize(schema_.fields.size());
  const std::byte* p = RecordPtr(block, i) + checksum_column_;
  for (size_t f = 0; f < out->size(); ++f) (*out)[f] = GetU32(p + kFieldChecksumWidth * f);
}

std::string IndexV2::SourcePath(const IndexV2Block& block, uint64_t i) const {
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

std::span<const std::byte> IndexV2::Metadata(const IndexV2Block& block, uint64_t i) const {
  uint64_t begin = 0, end = 0;
  AreaRange(block, i - block.first_, kColMetaEnd, &begin, &end);
  return {block.bytes_.data() + block.meta_area_ + begin, end - begin};
}

IndexSample IndexV2::Entry(const IndexV2Block& block, uint64_t i) const {
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

Status IndexV2::CheckRecord(const IndexV2Block& block, uint64_t k, std::string* prev_path) const {
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

Result<IndexV2Block> IndexV2::ParseBlock(uint64_t b, std::vector<std::byte> bytes) const {
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
  IndexV2Block block;
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
