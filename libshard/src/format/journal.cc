#include "format/journal.h"

#include <cstring>

#include "format/block_table.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/index.h"

namespace libshard::format {

namespace {

constexpr uint32_t kEntryMagic = 0x454A534C;  // "LSJE"
constexpr uint32_t kKindHeader = 1;
constexpr uint32_t kKindSamples = 2;
constexpr char kJournalMagic[8] = {'L', 'S', 'H', 'D', 'J', 'N', 'L', '\0'};
constexpr uint32_t kJournalVersion1 = 1;  // every field raw
constexpr uint32_t kJournalVersion2 = 2;  // field codecs (§6)
constexpr uint32_t kJournalFlagFieldChecksums = 1u << 0;  // §6 header flags
constexpr uint32_t kJournalFlagBlockTables = 1u << 1;     // only with bit 0

bool AnyCodec(std::span<const uint8_t> codecs) {
  for (uint8_t c : codecs)
    if (c != 0) return true;
  return false;
}
constexpr uint64_t kRecordPrefix = 104;  // §6: the non-reserved bytes of an index record

std::string Entry(uint32_t kind, const std::string& payload) {
  std::string e;
  ByteWriter w(&e);
  w.U32(kEntryMagic);
  w.U32(kind);
  w.U64(payload.size());
  w.Bytes(payload);
  w.U64(Xxh3(e.data(), e.size()));
  return e;
}

// The entry of kind `kind` at the start of `bytes` (§6): its size and payload, or 0 when it is
// incomplete, of another kind or magic, or fails its checksum.
uint64_t EntryAt(std::span<const std::byte> bytes, uint32_t kind, std::string_view* payload) {
  ByteReader r(bytes.data(), bytes.size());
  uint32_t magic = 0, got_kind = 0;
  uint64_t size = 0, checksum = 0;
  if (!r.U32(&magic) || !r.U32(&got_kind) || !r.U64(&size) || magic != kEntryMagic ||
      got_kind != kind || !r.Bytes(size, payload) || !r.U64(&checksum) ||
      checksum != Xxh3(bytes.data(), 16 + size))
    return 0;
  return r.position();
}

}  // namespace

std::string EncodeJournalHeader(const Schema& schema, std::span<const uint8_t> codecs,
                                bool field_checksums, bool block_tables) {
  const bool v2 = AnyCodec(codecs);
  std::string p;
  ByteWriter w(&p);
  w.Bytes(std::string_view(kJournalMagic, 8));
  w.U32(v2 ? kJournalVersion2 : kJournalVersion1);
  w.U32((field_checksums ? kJournalFlagFieldChecksums : 0) |
        (field_checksums && block_tables ? kJournalFlagBlockTables : 0));
  w.U32(static_cast<uint32_t>(schema.fields.size()));
  w.I32(schema.length_field);
  for (const Field& f : schema.fields) {
    w.U32(static_cast<uint32_t>(f.dtype));
    w.U32(f.rank);
    w.I32(f.seq_dim);
    w.U32(static_cast<uint32_t>(f.name.size()));
    w.Bytes(f.name);
  }
  if (v2)
    for (size_t f = 0; f < schema.fields.size(); ++f) w.U8(codecs[f]);
  return Entry(kKindHeader, p);
}

std::string EncodeJournalSamples(const Schema& schema, uint64_t first,
                                 std::span<const IndexSample> samples,
                                 std::span<const uint8_t> codecs, bool field_checksums,
                                 bool block_tables) {
  const bool v2 = AnyCodec(codecs);
  std::string p;
  ByteWriter w(&p);
  w.U64(first);
  w.U32(static_cast<uint32_t>(samples.size()));
  w.U32(0);
  std::byte rec[kSampleRecordSize];
  for (const IndexSample& s : samples) {
    SampleRecord r = s.record;
    r.meta_offset = r.meta_size = r.source_offset = r.source_size = 0;
    r.EncodeTo(rec);
    w.Bytes(std::string_view(reinterpret_cast<const char*>(rec), kRecordPrefix));
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      w.U64(s.tensor_offsets[f]);
      w.U64(s.tensor_sizes[f]);
    }
    for (uint64_t d : s.dims) w.U64(d);
    if (v2)
      for (size_t f = 0; f < schema.fields.size(); ++f)
        if (codecs[f] != 0) w.U64(s.field_stored_sizes[f]);
    if (field_checksums)
      for (size_t f = 0; f < schema.fields.size(); ++f)
        w.U64(f < s.field_checksums.size() ? s.field_checksums[f] : 0);
    w.U32(static_cast<uint32_t>(s.metadata.size()));
    w.Bytes(s.metadata);
    w.U32(static_cast<uint32_t>(s.source_path.size()));
    w.Bytes(s.source_path);
    if (field_checksums && block_tables) {
      const std::string_view table = s.block_table ? *s.block_table : std::string_view();
      w.U32(static_cast<uint32_t>(table.size()));
      w.Bytes(table);
    }
  }
  return Entry(kKindSamples, p);
}

Result<uint64_t> ParseJournalHeaderEntry(std::span<const std::byte> bytes, const std::string& file,
                                         JournalHeader* out) {
  std::string_view payload;
  const uint64_t size = EntryAt(bytes, kKindHeader, &payload);
  if (size == 0) return uint64_t{0};
  ByteReader p(AsBytes(payload), payload.size());
  JournalHeader h;
  std::string_view jm;
  uint32_t journal_version = 0, flags = 0, f_count = 0;
  int32_t length_field = 0;
  if (!p.Bytes(8, &jm) || jm != std::string_view(kJournalMagic, 8) || !p.U32(&journal_version) ||
      !p.U32(&flags) || !p.U32(&f_count) || !p.I32(&length_field))
    return uint64_t{0};
  if (journal_version != kJournalVersion1 && journal_version != kJournalVersion2)
    return Status::Unsupported(file + ": journal version " + std::to_string(journal_version) +
                               " is not supported");
  if ((flags & ~(kJournalFlagFieldChecksums | kJournalFlagBlockTables)) != 0)
    return Status::Unsupported(file + ": journal flags " + std::to_string(flags) +
                               " are not known to this libshard (written by a newer one)");
  if ((flags & kJournalFlagBlockTables) && !(flags & kJournalFlagFieldChecksums))
    return uint64_t{0};  // bit 1 only with bit 0: not a header this libshard wrote
  h.field_checksums = (flags & kJournalFlagFieldChecksums) != 0;
  h.block_tables = (flags & kJournalFlagBlockTables) != 0;
  if (f_count == 0 || f_count > kMaxFields) return uint64_t{0};
  bool ok = true;
  for (uint32_t f = 0; ok && f < f_count; ++f) {
    uint32_t dtype = 0, rank = 0, name_size = 0;
    int32_t seq_dim = 0;
    std::string_view name;
    ok = p.U32(&dtype) && p.U32(&rank) && p.I32(&seq_dim) && p.U32(&name_size) &&
         p.Bytes(name_size, &name);
    if (ok)
      h.schema.fields.push_back(Field{std::string(name), static_cast<DType>(dtype), rank, seq_dim});
  }
  h.schema.length_field = length_field;
  if (ok && journal_version == kJournalVersion2) {
    h.codecs.resize(f_count);
    for (uint32_t f = 0; ok && f < f_count; ++f) ok = p.U8(&h.codecs[f]);
    ok = ok && AnyCodec(h.codecs) && p.remaining() == 0;
  }
  if (!ok || !h.schema.Validate().ok()) return uint64_t{0};
  *out = std::move(h);
  return size;
}

uint64_t ParseJournalSamplesEntry(std::span<const std::byte> bytes, const JournalHeader& header,
                                  uint64_t next, std::vector<IndexSample>* out) {
  std::string_view payload;
  const uint64_t size = EntryAt(bytes, kKindSamples, &payload);
  if (size == 0) return 0;
  ByteReader p(AsBytes(payload), payload.size());
  uint64_t first = 0;
  uint32_t count = 0, reserved = 0;
  if (!p.U64(&first) || !p.U32(&count) || !p.U32(&reserved) || first != next) return 0;
  const uint64_t f_count = header.schema.fields.size();
  const uint64_t dims_per_sample = header.schema.DimsPerSample();
  // Each described sample takes at least this many bytes; bounds `count` before reserving.
  const uint64_t min_size = kRecordPrefix + 16 * f_count + 8 * dims_per_sample + 8 +
                            (header.field_checksums ? 8 * f_count : 0) +
                            (header.block_tables ? 4 : 0);
  if (count > p.remaining() / min_size) return 0;
  std::vector<IndexSample> batch;
  batch.reserve(count);
  bool ok = true;
  for (uint32_t k = 0; ok && k < count; ++k) {
    IndexSample s;
    std::string_view rec, meta, path;
    uint32_t meta_size = 0, path_size = 0;
    ok = p.Bytes(kRecordPrefix, &rec);
    if (!ok) break;
    std::byte full[kSampleRecordSize] = {};
    std::memcpy(full, rec.data(), kRecordPrefix);
    s.record = SampleRecord::DecodeFrom(full);
    s.tensor_offsets.resize(f_count);
    s.tensor_sizes.resize(f_count);
    for (uint64_t f = 0; ok && f < f_count; ++f)
      ok = p.U64(&s.tensor_offsets[f]) && p.U64(&s.tensor_sizes[f]);
    s.dims.resize(dims_per_sample);
    for (uint64_t j = 0; ok && j < dims_per_sample; ++j) ok = p.U64(&s.dims[j]);
    if (!header.codecs.empty()) {
      s.field_stored_sizes.assign(f_count, 0);
      for (uint64_t f = 0; ok && f < f_count; ++f)
        if (header.codecs[f] != 0) ok = p.U64(&s.field_stored_sizes[f]);
    }
    if (header.field_checksums) {
      s.field_checksums.resize(f_count);
      for (uint64_t f = 0; ok && f < f_count; ++f) ok = p.U64(&s.field_checksums[f]);
    }
    ok = ok && p.U32(&meta_size) && p.Bytes(meta_size, &meta) && p.U32(&path_size) &&
         p.Bytes(path_size, &path);
    if (ok && header.block_tables) {
      uint32_t table_size = 0;
      std::string_view table;
      ok = p.U32(&table_size) && p.Bytes(table_size, &table);
      if (ok) s.block_table = std::string(table);
    }
    if (!ok) break;
    s.metadata = std::string(meta);
    s.source_path = std::string(path);
    s.record.meta_size = meta_size;
    s.record.source_size = path_size;
    batch.push_back(std::move(s));
  }
  if (!ok || p.remaining() != 0) return 0;
  for (IndexSample& s : batch) out->push_back(std::move(s));
  return size;
}

Status CheckJournalSample(const JournalHeader& header, const IndexSample& s) {
  const Schema& schema = header.schema;
  const SampleRecord& r = s.record;
  auto bad = [](const std::string& what) { return Status::Corruption(what); };
  if (r.offset < kSampleAlignment || r.offset % kSampleAlignment != 0)
    return bad("offset " + std::to_string(r.offset) + " is not a multiple of " +
               std::to_string(kSampleAlignment) + " past the shard header");
  if (r.shard >= kMaxShards) return bad("shard " + std::to_string(r.shard) + " exceeds the limit");
  if (r.flags & ~kKnownSampleFlags) return bad("unknown flag bits " + std::to_string(r.flags));
  if ((r.flags & kFlagByteShuffle) && !(r.flags & kFlagZstd))
    return bad("byte-shuffle flag without zstd");
  if ((r.flags & kFlagZstd) && !header.codecs.empty())
    return bad("whole-sample zstd in a dataset with field codecs");
  if (s.dims.size() != schema.DimsPerSample() || s.tensor_offsets.size() != schema.fields.size() ||
      s.tensor_sizes.size() != schema.fields.size())
    return bad("dims or tensor entries do not match the schema");
  PayloadLayout layout;
  if (Status st = ComputeLayout(schema, s.dims, &layout); !st.ok()) return bad(st.message());
  if (s.tensor_offsets != layout.offsets || s.tensor_sizes != layout.sizes)
    return bad("tensor entries are not the canonical layout of the dims (FORMAT.md §4.1)");
  if (r.raw_size != layout.raw_size)
    return bad("raw_size " + std::to_string(r.raw_size) + " != " +
               std::to_string(layout.raw_size) + " from the dims");
  uint64_t length = 0;
  if (schema.length_field >= 0) {
    size_t at = 0;
    for (int32_t f = 0; f < schema.length_field; ++f) at += schema.fields[f].rank;
    length = s.dims[at + static_cast<size_t>(schema.fields[schema.length_field].seq_dim)];
  }
  if (r.length != length)
    return bad("length " + std::to_string(r.length) + " != " + std::to_string(length) +
               " from the dims");
  uint64_t stored_layout = layout.raw_size;
  if (!header.codecs.empty()) {
    if (s.field_stored_sizes.size() != schema.fields.size())
      return bad("field stored sizes do not match the schema");
    std::vector<FieldCodec> codecs;
    for (uint8_t c : header.codecs) codecs.push_back(FieldCodec{c, {}});
    if (!ComputeStoredLayout(codecs, layout.sizes, s.field_stored_sizes, nullptr, &stored_layout))
      return bad("stored layout overflows");
  }
  if (r.stored_size > kMaxSampleBytes || stored_layout > kMaxSampleBytes)
    return bad("stored size exceeds the limit (FORMAT.md §5)");
  if (!(r.flags & kFlagZstd) && r.stored_size != stored_layout)
    return bad("stored_size " + std::to_string(r.stored_size) + " != " +
               std::to_string(stored_layout) + " from the layout");
  if ((r.flags & kFlagZstd) && r.stored_size == 0) return bad("empty zstd frame");
  uint64_t end = 0;
  if (!CheckedAdd(r.offset, r.stored_size, &end)) return bad("extent overflows");
  if (header.field_checksums && s.field_checksums.size() != schema.fields.size())
    return bad("field checksums do not match the schema");
  if (header.block_tables) {  // §3.10.2, against the dims
    if (!s.block_table) return bad("block table missing");
    std::vector<uint16_t> codecs(header.codecs.begin(), header.codecs.end());
    Result<BlockTable> t =
        ParseBlockTable({AsBytes(*s.block_table), s.block_table->size()},
                        SampleFieldRows(schema, s.dims, codecs), (r.flags & kFlagZstd) != 0);
    if (!t.ok()) return bad(t.status().message());
  }
  if (s.source_path.size() > kMaxSourcePathBytes ||
      s.source_path.find('\0') != std::string::npos)
    return bad("source path too long or holds a NUL byte");
  if (s.metadata.size() > kMaxMetadataBytes) return bad("metadata exceeds the limit");
  Metadata m;
  if (Status st = DecodeMetadata({reinterpret_cast<const std::byte*>(s.metadata.data()),
                                  s.metadata.size()},
                                 &m);
      !st.ok())
    return bad("metadata: " + st.message());
  return Status::OK();
}

Result<JournalContents> ParseJournal(std::span<const std::byte> bytes, const std::string& file) {
  JournalContents out;
  JournalHeader header;
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t pos, ParseJournalHeaderEntry(bytes, file, &header));
  if (pos == 0)
    return Status::Corruption(file + ": no valid journal header; the interrupted write cannot be "
                              "resumed, delete the directory and pack again");
  while (pos < bytes.size()) {
    const uint64_t n =
        ParseJournalSamplesEntry(bytes.subspan(pos), header, out.samples.size(), &out.samples);
    if (n == 0) break;  // torn or corrupt tail
    pos += n;
  }
  out.schema = std::move(header.schema);
  out.codecs = std::move(header.codecs);
  out.field_checksums = header.field_checksums;
  out.block_tables = header.block_tables;
  out.valid_size = pos;
  return out;
}

}  // namespace libshard::format
