// Index version 1 (legacy/index_v1.h): IndexV1View's accessors over the bytes Parse checked.
#include "format/legacy/index_v1.h"

#include "format/bytes.h"

namespace libshard::format::legacy {

SampleRecord IndexV1View::record(uint64_t i) const {
  return SampleRecord::DecodeFrom(bytes_.data() + samples_offset_ + kSampleRecordSize * i);
}

uint64_t IndexV1View::tensor_offset(uint64_t i, size_t f) const {
  return GetU64(bytes_.data() + tensors_offset_ +
                kV1TensorEntrySize * (i * schema_.fields.size() + f) + kV1TensorEntryOffset);
}

uint64_t IndexV1View::tensor_nbytes(uint64_t i, size_t f) const {
  return GetU64(bytes_.data() + tensors_offset_ +
                kV1TensorEntrySize * (i * schema_.fields.size() + f) + kV1TensorEntryNbytes);
}

uint64_t IndexV1View::dim(uint64_t i, uint64_t j) const {
  return GetU64(bytes_.data() + dims_offset_ + kV1DimSize * (i * dims_per_sample_ + j));
}

std::vector<uint64_t> IndexV1View::shape(uint64_t i, size_t f) const {
  std::vector<uint64_t> s(schema_.fields[f].rank);
  for (size_t k = 0; k < s.size(); ++k) s[k] = dim(i, field_dim_start_[f] + k);
  return s;
}

std::span<const std::byte> IndexV1View::blob(uint64_t offset, uint64_t size) const {
  return bytes_.subspan(blob_offset_ + offset, size);
}

std::string_view IndexV1View::source_path(uint64_t i) const {
  SampleRecord r = record(i);
  auto s = blob(r.source_offset, r.source_size);
  return {reinterpret_cast<const char*>(s.data()), s.size()};
}

std::span<const std::byte> IndexV1View::metadata_bytes(uint64_t i) const {
  SampleRecord r = record(i);
  return blob(r.meta_offset, r.meta_size);
}

IndexSample IndexV1View::Entry(uint64_t i) const {
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

}  // namespace libshard::format::legacy
