// WriterImpl::Encode: a sample's payload, its field codecs or zstd frame, checksums and row
// blocks (FORMAT.md §3.8, §3.9, §3.10, §4.2, §4.3).
#include "libshard/writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "codec/field_codec.h"
#include "codec/row_blocks.h"
#include "format/block_table.h"
#include "format/index.h"
#include "io/direct_io.h"
#include "io/file.h"
#include "io/filesystem.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index_common.h"
#include "format/journal.h"
#include "format/manifest.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"
#include "libshard/dataset.h"
#include "writer/buffer_pool.h"
#include "writer/commit.h"
#include "writer/writer_impl.h"

namespace libshard::writer_internal {

Result<EncodedSample> WriterImpl::Encode(const SampleInput& sample) const {
  const std::string where = sample.source.path.empty()
                                ? std::string("sample")
                                : "source '" + sample.source.path + "'";
  const size_t f_count = schema_.fields.size();
  std::vector<const TensorInput*> by_field(f_count, nullptr);
  for (const TensorInput& t : sample.tensors) {
    auto f = schema_.Find(t.name);
    if (!f)
      return Status::InvalidArgument(where + ": tensor '" + t.name +
                                     "' is not a field of the dataset's schema");
    if (by_field[*f])
      return Status::InvalidArgument(where + ": tensor '" + t.name + "' is given twice");
    by_field[*f] = &t;
  }
  EncodedSample out;
  out.dims.reserve(schema_.DimsPerSample());
  for (size_t f = 0; f < f_count; ++f) {
    const Field& field = schema_.fields[f];
    const TensorInput* t = by_field[f];
    const std::string fw = where + ": field '" + field.name + "'";
    if (!t) return Status::InvalidArgument(fw + " is missing");
    if (t->dtype != field.dtype)
      return Status::InvalidArgument(fw + ": dtype " + std::string(DTypeName(t->dtype)) +
                                     " != schema dtype " + std::string(DTypeName(field.dtype)));
    if (t->shape.size() != field.rank)
      return Status::InvalidArgument(fw + ": rank " + std::to_string(t->shape.size()) +
                                     " != schema rank " + std::to_string(field.rank));
    // An empty tensor needs neither (an empty std::vector's data() may be null).
    if ((t->data != nullptr && t->fill) ||
        (t->data == nullptr && !t->fill && NumElements(t->shape) != 0))
      return Status::InvalidArgument(fw + ": exactly one of TensorInput.data and .fill must be set");
    out.dims.insert(out.dims.end(), t->shape.begin(), t->shape.end());
  }
  if (sample.source.path.size() > kMaxSourcePathBytes)
    return Status::InvalidArgument(where + ": source path longer than " +
                                   std::to_string(kMaxSourcePathBytes) + " bytes");
  {
    std::string encoded;
    Status st = format::EncodeMetadata(sample.metadata, &encoded);
    if (!st.ok()) return st.WithContext(where);
  }
  format::PayloadLayout layout;
  {
    Status st = format::ComputeLayout(schema_, out.dims, &layout);
    if (!st.ok()) return st.WithContext(where);
  }
  const uint64_t raw_size = layout.raw_size;
  const uint64_t padded = format::AlignUp(raw_size, kSampleAlignment);
  std::shared_ptr<std::byte[]> raw = buffers_->Acquire(raw_size);
  if (!raw)
    return Status::ResourceExhausted(where + ": cannot allocate " + std::to_string(raw_size) +
                                     " bytes for the sample");
  // Zero the gaps between tensors and the padding; the tensors are written once, by the caller.
  uint64_t pos = 0;
  for (size_t f = 0; f < f_count; ++f) {
    std::memset(raw.get() + pos, 0, layout.offsets[f] - pos);
    pos = layout.offsets[f] + layout.sizes[f];
  }
  std::memset(raw.get() + pos, 0, std::max<uint64_t>(padded, kSampleAlignment) - pos);
  for (size_t f = 0; f < f_count; ++f) {
    const TensorInput* t = by_field[f];
    std::byte* dst = raw.get() + layout.offsets[f];
    if (!t->fill) {
      if (layout.sizes[f]) std::memcpy(dst, t->data, layout.sizes[f]);
    } else {
      Status st = t->fill(std::span<std::byte>(dst, layout.sizes[f]));
      if (!st.ok()) return st.WithContext(where + ": field '" + schema_.fields[f].name + "'");
    }
  }
  out.tensor_offsets = layout.offsets;
  out.tensor_sizes = layout.sizes;
  out.raw_size = raw_size;
  // Field checksums (FORMAT.md §3.9): over the tensors of the raw payload, which are the stored
  // regions of a raw sample and what a whole-sample zstd sample decodes to; EncodeFields
  // replaces them by the stored regions' for field codecs.
  out.field_checksums.resize(f_count);
  for (size_t f = 0; f < f_count; ++f)
    out.field_checksums[f] = format::FieldChecksum(raw.get() + layout.offsets[f], layout.sizes[f]);
  out.stored_buffer = raw;
  out.stored_size = raw_size;
  if (!codecs_.empty()) {
    Status st = EncodeFields(layout, out.dims, raw.get(), &out);
    if (!st.ok()) return st.WithContext(where);
  } else if (options_.compression == Compression::kZstd && raw_size > 0) {
    std::shared_ptr<std::byte[]> shuffled;
    const std::byte* src = raw.get();
    if (shuffle_) {
      shuffled = internal::AllocateAligned(raw_size, kTensorAlignment);
      if (!shuffled) return Status::ResourceExhausted(where + ": cannot allocate a shuffle buffer");
      format::ShufflePayload(schema_, layout, raw.get(), shuffled.get(), /*inverse=*/false);
      src = shuffled.get();
    }
    const uint64_t bound = format::ZstdBound(raw_size);
    std::shared_ptr<std::byte[]> comp = internal::AllocateAligned(bound, kSampleAlignment);
    if (!comp) return Status::ResourceExhausted(where + ": cannot allocate a compression buffer");
    uint64_t frame = 0;
    Status st = format::ZstdCompress({src, raw_size}, {comp.get(), bound}, options_.zstd_level,
                                     &frame);
    if (!st.ok()) return st.WithContext(where);
    // Keep the frame only when it saves at least 3% (FORMAT.md §4.2).
    if (frame * 100 <= raw_size * 97) {
      std::memset(comp.get() + frame, 0, format::AlignUp(frame, kSampleAlignment) - frame);
      out.stored_buffer = std::move(comp);
      out.stored_size = frame;
      out.flags = format::kFlagZstd | (shuffle_ ? format::kFlagByteShuffle : 0);
    }
  }
  out.checksum = format::Xxh3(out.stored_buffer.get(), out.stored_size);
  // Row blocks of the raw fields (FORMAT.md §3.10.2, §3.10.5); EncodeFields made those of the
  // coded fields. A whole-sample zstd sample has none: it is read whole.
  if (codecs_.empty() && !(out.flags & format::kFlagZstd)) {
    const std::vector<format::FieldRows> rows = format::SampleFieldRows(schema_, out.dims, {});
    format::BlockTable table;
    table.fields.resize(f_count);
    for (size_t f = 0; f < f_count; ++f)
      table.fields[f] = codec::RawFieldBlocks(
          {raw.get() + layout.offsets[f], layout.sizes[f]}, rows[f],
          codec::WriterBlockRows(rows[f].rows, rows[f].row_bytes()));
    out.block_table = format::EncodeBlockTable(table);
  }
  if (schema_.length_field >= 0) {
    uint64_t start = 0;
    for (int32_t f = 0; f < schema_.length_field; ++f) start += schema_.fields[f].rank;
    out.length = out.dims[start + schema_.fields[schema_.length_field].seq_dim];
  }
  out.metadata = sample.metadata;
  out.source = sample.source;
  return out;
}

Status WriterImpl::EncodeFields(const format::PayloadLayout& layout,
                                const std::vector<uint64_t>& dims, const std::byte* raw,
                                EncodedSample* out) const {
  // Encoder output, one per thread and field (reused: pack encodes on its worker threads).
  thread_local std::vector<std::vector<std::byte>> regions;
  const size_t f_count = schema_.fields.size();
  if (regions.size() < f_count) regions.resize(f_count);
  out->field_stored_sizes.assign(f_count, 0);
  std::vector<uint64_t> stored_sizes(f_count, 0);
  // Row blocks (FORMAT.md §3.10.5): a coded field's chunks are its blocks.
  const std::vector<format::FieldRows> rows = format::SampleFieldRows(schema_, dims, {});
  format::BlockTable table;
  table.fields.resize(f_count);
  size_t dim = 0;
  for (size_t f = 0; f < f_count; ++f) {
    const Field& field = schema_.fields[f];
    std::span<const uint64_t> shape(dims.data() + dim, field.rank);
    dim += field.rank;
    const uint32_t block_rows = codec::WriterBlockRows(rows[f].rows, rows[f].row_bytes());
    if (codecs_[f] == 0) {
      table.fields[f] =
          codec::RawFieldBlocks({raw + layout.offsets[f], layout.sizes[f]}, rows[f], block_rows);
      continue;
    }
    LIBSHARD_ASSIGN_OR_RETURN(codec::FieldGeometry g,
                              codec::GeometryOf(field.dtype, shape, field.seq_dim));
    codec::EncodeOptions eo;
    eo.chunk_rows = block_rows > 0 ? block_rows : std::max<uint64_t>(g.rows, 1);
    regions[f].clear();
    Status st = codec::Encode(static_cast<codec::CodecId>(codecs_[f]), g,
                              {raw + layout.offsets[f], layout.sizes[f]}, eo, &regions[f]);
    if (!st.ok()) return st.WithContext("field '" + field.name + "'");
    if (!regions[f].empty()) {
      Result<format::FieldBlocks> blocks = codec::CodedFieldBlocks(
          regions[f], static_cast<codec::CodecId>(codecs_[f]), g);
      if (!blocks.ok()) return blocks.status().WithContext("field '" + field.name + "'");
      table.fields[f] = std::move(blocks).value();
    }
    stored_sizes[f] = regions[f].size();
    out->field_stored_sizes[f] = regions[f].size();
  }
  out->block_table = format::EncodeBlockTable(table);
  std::vector<format::FieldCodec> fc;
  for (uint8_t c : codecs_) fc.push_back(format::FieldCodec{c, {}});
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  if (!format::ComputeStoredLayout(fc, layout.sizes, stored_sizes, &offsets, &total) ||
      total > kMaxSampleBytes)
    return Status::InvalidArgument("stored sample exceeds " + std::to_string(kMaxSampleBytes) +
                                   " bytes");
  const uint64_t padded = std::max<uint64_t>(format::AlignUp(total, kSampleAlignment),
                                             kSampleAlignment);
  std::shared_ptr<std::byte[]> stored = buffers_->Acquire(padded);
  if (!stored)
    return Status::ResourceExhausted("cannot allocate " + std::to_string(padded) +
                                     " bytes for the stored sample");
  uint64_t pos = 0;
  for (size_t f = 0; f < f_count; ++f) {
    std::memset(stored.get() + pos, 0, offsets[f] - pos);
    const uint64_t n = codecs_[f] == 0 ? layout.sizes[f] : stored_sizes[f];
    const std::byte* src = codecs_[f] == 0 ? raw + layout.offsets[f] : regions[f].data();
    if (n) std::memcpy(stored.get() + offsets[f], src, n);
    out->field_checksums[f] = format::FieldChecksum(src, n);  // FORMAT.md §3.9: stored region
    pos = offsets[f] + n;
  }
  std::memset(stored.get() + pos, 0, padded - pos);
  out->stored_buffer = std::move(stored);
  out->stored_size = total;
  return Status::OK();
}


}  // namespace libshard::writer_internal

namespace libshard {

std::vector<uint8_t> ChooseFieldCodecs(const Schema& schema, FieldCodecPolicy policy,
                                       bool store_fp8) {
  std::vector<uint8_t> out(schema.fields.size(), 0);
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const Field& field = schema.fields[f];
    const bool half = field.dtype == DType::kBFloat16 || field.dtype == DType::kFloat16;
    if (store_fp8 && half && field.seq_dim >= 0 && field.rank >= 2) {
      // With compression, codec 6 (FORMAT.md §4.3.8), not codec 4: the same codes and values,
      // with only the exponent bits entropy-coded, which decodes several times faster.
      out[f] = static_cast<uint8_t>(policy == FieldCodecPolicy::kNone ? codec::CodecId::kFp8
                                                                     : codec::CodecId::kFp8Planes);
    } else if (policy == FieldCodecPolicy::kNone) {
      out[f] = 0;
    } else if (half) {
      // Codec 5 unless codec 2 was asked for by name: its exponent plane decodes faster for
      // ~1% more bytes (FORMAT.md §4.3.7).
      out[f] = static_cast<uint8_t>(policy == FieldCodecPolicy::kPlanes ? codec::CodecId::kPlanes
                                                                        : codec::CodecId::kPlanes2);
    } else if (policy == FieldCodecPolicy::kAuto &&
               codec::CodecAccepts(codec::CodecId::kZstd, field.dtype)) {
      out[f] = static_cast<uint8_t>(codec::CodecId::kZstd);
    }
  }
  return out;
}


}  // namespace libshard
