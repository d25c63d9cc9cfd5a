// The frozen encoder of index version 1 (index_v1_encoder.h).
#include "testutil/index_v1_encoder.h"

#include <cstring>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/legacy/index_v1.h"

namespace libshard::testing {

std::string EncodeIndexV1(const Schema& schema, const std::vector<format::IndexShard>& shards,
                          const std::vector<format::IndexSample>& samples) {
  using namespace format;          // NOLINT: the encoder as it was in the library
  using namespace format::legacy;  // NOLINT
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
    r.EncodeTo(reinterpret_cast<std::byte*>(out.data() + samples_offset +
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
  PutU32(h + kHeaderVersion, kIndexVersion1);
  PutU32(h + kHeaderFlags, uids ? kIndexFlagShardUids : 0);
  PutU64(h + kV1HeaderShardUids, uids_offset);
  PutU64(h + kHeaderSampleCount, n);
  PutU32(h + kHeaderFieldCount, static_cast<uint32_t>(f_count));
  PutU32(h + kHeaderShardCount, static_cast<uint32_t>(shards.size()));
  PutU64(h + kV1HeaderFieldsOffset, fields_offset);
  PutU64(h + kV1HeaderShardsOffset, shards_offset);
  PutU64(h + kV1HeaderSamplesOffset, samples_offset);
  PutU64(h + kV1HeaderTensorsOffset, tensors_offset);
  PutU64(h + kV1HeaderDimsOffset, dims_offset);
  PutU64(h + kV1HeaderBlobOffset, blob_offset);
  PutU64(h + kV1HeaderBlobSize, blob.size());
  PutU64(h + kV1HeaderFileSize, out.size());
  PutI32(h + kV1HeaderLengthField, schema.length_field);
  PutU64(h + kIndexChecksumOffset,
         Xxh3WithHole({h, out.size()}, kIndexChecksumOffset));
  return out;
}

}  // namespace libshard::testing
