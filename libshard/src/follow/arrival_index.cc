#include "follow/arrival_index.h"

#include <algorithm>

#include "format/payload.h"

namespace libshard::follow {
namespace {

// Words of a sample (FORMAT.md §3.3 and §6): the record's offset, stored_size, raw_size,
// checksum, shard | flags << 32, length, source_bytes, source_mtime_ns, source_hash; then the
// dims; then, with codecs, each field's stored size; then, with field checksums, each field's.
constexpr uint64_t kRecordWords = 9;

uint64_t Stride(const format::JournalHeader& h) {
  const uint64_t f = h.schema.fields.size();
  return kRecordWords + h.schema.DimsPerSample() + (h.codecs.empty() ? 0 : f) +
         (h.field_checksums ? f : 0);
}

const uint64_t* Words(const format::JournalHeader& h, const ArrivalChunks& chunks, uint64_t i) {
  const uint64_t stride = Stride(h);
  return chunks[i / ArrivalChunk::kChunkSamples]->words.get() +
         (i % ArrivalChunk::kChunkSamples) * stride;
}

const std::string& String(const ArrivalChunks& chunks, uint64_t i, int which) {
  return chunks[i / ArrivalChunk::kChunkSamples]
      ->strings[3 * (i % ArrivalChunk::kChunkSamples) + which];
}

format::SampleRecord RecordOf(const uint64_t* w) {
  format::SampleRecord r;
  r.offset = w[0];
  r.stored_size = w[1];
  r.raw_size = w[2];
  r.checksum = w[3];
  r.shard = static_cast<uint32_t>(w[4]);
  r.flags = static_cast<uint32_t>(w[4] >> 32);
  r.length = w[5];
  r.source_bytes = w[6];
  r.source_mtime_ns = static_cast<int64_t>(w[7]);
  r.source_hash = w[8];
  return r;
}

}  // namespace

ArrivalStore::ArrivalStore(format::JournalHeader header)
    : header_(std::move(header)), stride_(Stride(header_)) {}

void ArrivalStore::Append(const format::IndexSample& s, uint32_t file) {
  if (size_ % ArrivalChunk::kChunkSamples == 0)
    chunks_.push_back(std::make_shared<ArrivalChunk>(stride_));
  ArrivalChunk& c = *chunks_.back();
  const uint64_t k = size_ % ArrivalChunk::kChunkSamples;
  uint64_t* w = c.words.get() + k * stride_;
  const format::SampleRecord& r = s.record;
  w[0] = r.offset;
  w[1] = r.stored_size;
  w[2] = r.raw_size;
  w[3] = r.checksum;
  w[4] = uint64_t{file} | (uint64_t{r.flags} << 32);
  w[5] = r.length;
  w[6] = r.source_bytes;
  w[7] = static_cast<uint64_t>(r.source_mtime_ns);
  w[8] = r.source_hash;
  uint64_t* p = w + kRecordWords;
  for (uint64_t d : s.dims) *p++ = d;
  const size_t f = header_.schema.fields.size();
  if (!header_.codecs.empty())
    for (size_t j = 0; j < f; ++j) *p++ = j < s.field_stored_sizes.size() ? s.field_stored_sizes[j] : 0;
  if (header_.field_checksums)
    for (size_t j = 0; j < f; ++j) *p++ = j < s.field_checksums.size() ? s.field_checksums[j] : 0;
  c.strings[3 * k] = s.metadata;
  c.strings[3 * k + 1] = s.source_path;
  // Checked against the dims when the journal was read (format/journal.cc).
  if (header_.field_checksums && header_.block_tables && s.block_table)
    c.strings[3 * k + 2] = *s.block_table;
  ++size_;
  raw_bytes_ += r.raw_size;
}

ArrivalChunks ArrivalStore::chunks() const { return ArrivalChunks(chunks_.begin(), chunks_.end()); }

format::IndexSample ArrivalStore::Entry(const format::JournalHeader& h,
                                        const ArrivalChunks& chunks, uint64_t i) {
  const uint64_t* w = Words(h, chunks, i);
  format::IndexSample s;
  s.record = RecordOf(w);
  const uint64_t d = h.schema.DimsPerSample();
  const size_t f = h.schema.fields.size();
  const uint64_t* p = w + kRecordWords;
  s.dims.assign(p, p + d);
  p += d;
  if (!h.codecs.empty()) {
    s.field_stored_sizes.assign(p, p + f);
    p += f;
  }
  if (h.field_checksums) s.field_checksums.assign(p, p + f);
  format::PayloadLayout layout;
  (void)format::ComputeLayout(h.schema, s.dims, &layout);  // checked when the sample arrived
  s.tensor_offsets = std::move(layout.offsets);
  s.tensor_sizes = std::move(layout.sizes);
  s.metadata = String(chunks, i, 0);
  s.source_path = String(chunks, i, 1);
  s.record.meta_size = s.metadata.size();
  s.record.source_size = s.source_path.size();
  return s;
}

ArrivalIndex::ArrivalIndex(const ArrivalStore& store, uint64_t count,
                           std::vector<format::IndexShard> shards, uint64_t total_raw_bytes)
    : header_(store.header()),
      chunks_(store.chunks()),
      count_(std::min(count, store.size())),
      shards_(std::move(shards)),
      raw_bytes_(total_raw_bytes) {
  codecs_.resize(header_.schema.fields.size());
  for (size_t f = 0; f < header_.codecs.size() && f < codecs_.size(); ++f)
    codecs_[f].codec = header_.codecs[f];
}

uint64_t ArrivalIndex::resident_bytes() const {
  return chunks_.size() * ArrivalChunk::kChunkSamples * Stride(header_) * 8;
}

uint64_t ArrivalIndex::length(uint64_t i) const { return Words(header_, chunks_, i)[5]; }

void ArrivalIndex::Lengths(std::vector<uint64_t>* out) const {
  out->resize(count_);
  for (uint64_t i = 0; i < count_; ++i) (*out)[i] = length(i);
}

Status ArrivalIndex::Lookup(uint64_t i, format::SampleRecord* record,
                            std::vector<uint64_t>* dims) const {
  const uint64_t* w = Words(header_, chunks_, i);
  *record = RecordOf(w);
  if (dims) dims->assign(w + kRecordWords, w + kRecordWords + header_.schema.DimsPerSample());
  return Status::OK();
}

Result<std::string> ArrivalIndex::SourcePath(uint64_t i) const { return String(chunks_, i, 1); }

Result<std::string> ArrivalIndex::MetadataBytes(uint64_t i) const { return String(chunks_, i, 0); }

Status ArrivalIndex::FieldStoredSizes(uint64_t i, std::vector<uint64_t>* sizes) const {
  const size_t f = header_.schema.fields.size();
  const uint64_t* p = Words(header_, chunks_, i) + kRecordWords + header_.schema.DimsPerSample();
  if (header_.codecs.empty()) {
    sizes->assign(f, 0);
  } else {
    sizes->assign(p, p + f);
  }
  return Status::OK();
}

Result<format::BlockTable> ArrivalIndex::BlockTable(uint64_t i) const {
  if (!has_block_tables()) return Status::Unsupported("the journal records no block tables");
  const uint64_t* w = Words(header_, chunks_, i);
  const format::SampleRecord r = RecordOf(w);
  const std::vector<uint64_t> dims(w + kRecordWords,
                                   w + kRecordWords + header_.schema.DimsPerSample());
  const std::vector<uint16_t> codecs(header_.codecs.begin(), header_.codecs.end());
  const std::string& bytes = String(chunks_, i, 2);
  return format::ParseBlockTable(
      {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()},
      format::SampleFieldRows(header_.schema, dims, codecs),
      (r.flags & format::kFlagZstd) != 0);
}

Result<std::string> ArrivalIndex::BlockTableBytes(uint64_t i) const {
  if (!has_block_tables()) return Status::Unsupported("the journal records no block tables");
  return String(chunks_, i, 2);
}

Status ArrivalIndex::FieldChecksums(uint64_t i, std::vector<uint64_t>* sums) const {
  const size_t f = header_.schema.fields.size();
  const uint64_t* p = Words(header_, chunks_, i) + kRecordWords + header_.schema.DimsPerSample() +
                      (header_.codecs.empty() ? 0 : f);
  sums->assign(p, p + f);
  return Status::OK();
}

}  // namespace libshard::follow
