#include "format/journal.h"

#include <cstring>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/metadata_codec.h"

namespace libshard::format {

namespace {

constexpr uint32_t kEntryMagic = 0x454A534C;  // "LSJE"
constexpr uint32_t kKindHeader = 1;
constexpr uint32_t kKindSamples = 2;
constexpr char kJournalMagic[8] = {'L', 'S', 'H', 'D', 'J', 'N', 'L', '\0'};
constexpr uint32_t kJournalVersion1 = 1;  // every field raw
constexpr uint32_t kJournalVersion2 = 2;  // field codecs (§6)
constexpr uint32_t kJournalFlagFieldChecksums = 1u << 0;  // §6 header flags

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

}  // namespace

std::string EncodeJournalHeader(const Schema& schema, std::span<const uint8_t> codecs,
                                bool field_checksums) {
  const bool v2 = AnyCodec(codecs);
  std::string p;
  ByteWriter w(&p);
  w.Bytes(std::string_view(kJournalMagic, 8));
  w.U32(v2 ? kJournalVersion2 : kJournalVersion1);
  w.U32(field_checksums ? kJournalFlagFieldChecksums : 0);
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
                                 std::span<const uint8_t> codecs, bool field_checksums) {
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
  }
  return Entry(kKindSamples, p);
}

Result<JournalContents> ParseJournal(std::span<const std::byte> bytes, const std::string& file) {
  JournalContents out;
  ByteReader r(bytes.data(), bytes.size());
  bool have_header = false;
  uint64_t dims_per_sample = 0;
  while (r.remaining() > 0) {
    const size_t start = r.position();
    uint32_t magic = 0, kind = 0;
    uint64_t size = 0, checksum = 0;
    std::string_view payload;
    if (!r.U32(&magic) || !r.U32(&kind) || !r.U64(&size) || magic != kEntryMagic ||
        !r.Bytes(size, &payload) || !r.U64(&checksum) ||
        checksum != Xxh3(bytes.data() + start, 16 + size))
      break;  // torn or corrupt tail
    ByteReader p(AsBytes(payload), payload.size());
    if (!have_header) {
      if (kind != kKindHeader) break;
      std::string_view jm;
      uint32_t journal_version = 0, flags = 0, f_count = 0;
      int32_t length_field = 0;
      if (!p.Bytes(8, &jm) || jm != std::string_view(kJournalMagic, 8) ||
          !p.U32(&journal_version) || !p.U32(&flags) || !p.U32(&f_count) ||
          !p.I32(&length_field))
        break;
      if (journal_version != kJournalVersion1 && journal_version != kJournalVersion2)
        return Status::Unsupported(file + ": journal version " + std::to_string(journal_version) +
                                   " is not supported");
      if (flags & ~kJournalFlagFieldChecksums)
        return Status::Unsupported(file + ": journal flags " + std::to_string(flags) +
                                   " are not known to this libshard (written by a newer one)");
      out.field_checksums = (flags & kJournalFlagFieldChecksums) != 0;
      if (f_count == 0 || f_count > kMaxFields) break;
      bool ok = true;
      for (uint32_t f = 0; ok && f < f_count; ++f) {
        uint32_t dtype = 0, rank = 0, name_size = 0;
        int32_t seq_dim = 0;
        std::string_view name;
        ok = p.U32(&dtype) && p.U32(&rank) && p.I32(&seq_dim) && p.U32(&name_size) &&
             p.Bytes(name_size, &name);
        if (ok)
          out.schema.fields.push_back(
              Field{std::string(name), static_cast<DType>(dtype), rank, seq_dim});
      }
      out.schema.length_field = length_field;
      if (ok && journal_version == kJournalVersion2) {
        out.codecs.resize(f_count);
        for (uint32_t f = 0; ok && f < f_count; ++f) ok = p.U8(&out.codecs[f]);
        ok = ok && AnyCodec(out.codecs) && p.remaining() == 0;
      }
      if (!ok || !out.schema.Validate().ok()) break;
      dims_per_sample = out.schema.DimsPerSample();
      have_header = true;
      out.valid_size = r.position();
      continue;
    }
    if (kind != kKindSamples) break;
    uint64_t first = 0;
    uint32_t count = 0, reserved = 0;
    if (!p.U64(&first) || !p.U32(&count) || !p.U32(&reserved) || first != out.samples.size())
      break;
    const uint64_t f_count = out.schema.fields.size();
    // Each described sample takes at least this many bytes; bounds `count` before reserving.
    const uint64_t min_size = kRecordPrefix + 16 * f_count + 8 * dims_per_sample + 8 +
                              (out.field_checksums ? 8 * f_count : 0);
    if (count > p.remaining() / min_size) break;
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
      if (!out.codecs.empty()) {
        s.field_stored_sizes.assign(f_count, 0);
        for (uint64_t f = 0; ok && f < f_count; ++f)
          if (out.codecs[f] != 0) ok = p.U64(&s.field_stored_sizes[f]);
      }
      if (out.field_checksums) {
        s.field_checksums.resize(f_count);
        for (uint64_t f = 0; ok && f < f_count; ++f) ok = p.U64(&s.field_checksums[f]);
      }
      ok = ok && p.U32(&meta_size) && p.Bytes(meta_size, &meta) && p.U32(&path_size) &&
           p.Bytes(path_size, &path);
      if (!ok) break;
      s.metadata = std::string(meta);
      s.source_path = std::string(path);
      s.record.meta_size = meta_size;
      s.record.source_size = path_size;
      batch.push_back(std::move(s));
    }
    if (!ok || p.remaining() != 0) break;
    for (IndexSample& s : batch) out.samples.push_back(std::move(s));
    out.valid_size = r.position();
  }
  if (!have_header)
    return Status::Corruption(file + ": no valid journal header; the interrupted write cannot be "
                              "resumed, delete the directory and pack again");
  return out;
}

}  // namespace libshard::format
