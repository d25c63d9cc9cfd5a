// Decoding a local dataset's samples (dataset_impl.h): whole-sample zstd and field codecs
// (FORMAT.md §4.2, §4.3), selected fields and row prefixes, and Samples over decoded bytes.
#include <algorithm>
#include <cstring>

#include "codec/field_codec.h"
#include "codec/plane_kernel_select.h"
#include "dataset/dataset_impl.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "io/direct_io.h"
#include "io/file.h"
#include "io/filesystem.h"

namespace libshard::internal {

Status DatasetImpl::DecodeSelected(uint64_t i, std::span<const std::byte> stored,
                                   std::span<std::byte> raw, std::span<const size_t> fields,
                                   uint64_t max_len) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  if (stored.size() != r.stored_size || raw.size() < r.raw_size)
    return Status::InvalidArgument(Where(i, r) + ": Decode needs " + std::to_string(r.stored_size) +
                                   " stored bytes and room for " + std::to_string(r.raw_size) +
                                   " raw bytes");
  raw = raw.first(r.raw_size);
  if (!codecs_.empty()) return DecodeFields(i, r, dims, stored, raw, fields, max_len);
  if (!(r.flags & format::kFlagZstd)) {
    if (stored.data() != raw.data() && r.raw_size > 0)
      std::memmove(raw.data(), stored.data(), r.raw_size);
    return Status::OK();
  }
  const auto* s0 = stored.data();
  const auto* r0 = raw.data();
  if (s0 < r0 + raw.size() && r0 < s0 + stored.size())
    return Status::InvalidArgument(Where(i, r) + ": compressed sample: stored and raw overlap");
  auto damaged = [&](const Status& st) {
    return Status::Corruption(Where(i, r) + ": " + st.message() +
                              "; the shard is damaged, re-run libshard pack");
  };
  if (!(r.flags & format::kFlagByteShuffle)) {
    Status st = format::ZstdDecompress(stored, raw);
    return st.ok() ? st : damaged(st);
  }
  // The shuffled bytes go to a scratch this thread keeps and reuses (a loader worker decodes
  // sample after sample): a fresh buffer per sample was fresh pages, zeroed by the kernel, for
  // every decoded byte. One above kKeptScratchBytes is freed after use, so a thread keeps at
  // most that much.
  constexpr uint64_t kKeptScratchBytes = uint64_t{64} << 20;
  thread_local std::shared_ptr<std::byte[]> kept;
  thread_local uint64_t kept_size = 0;
  std::shared_ptr<std::byte[]> scratch;
  if (kept != nullptr && kept_size >= r.raw_size) {
    scratch = kept;
  } else {
    scratch = internal::AllocateAligned(r.raw_size, kTensorAlignment);
    if (!scratch)
      return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                       std::to_string(r.raw_size) + " bytes");
    if (r.raw_size <= kKeptScratchBytes) {
      kept = scratch;
      kept_size = r.raw_size;
    }
  }
  Status st = format::ZstdDecompress(stored, {scratch.get(), r.raw_size});
  if (!st.ok()) return damaged(st);
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // validated at Open
  format::ShufflePayload(schema(), layout, scratch.get(), raw.data(), /*inverse=*/true);
  return Status::OK();
}

Status DatasetImpl::DecodeFields(uint64_t i, const format::SampleRecord& r,
                                 const std::vector<uint64_t>& dims,
                                 std::span<const std::byte> stored,
                                 std::span<std::byte> raw, std::span<const size_t> fields,
                                 uint64_t max_len) const {
  const auto* s0 = stored.data();
  const auto* r0 = raw.data();
  if (r.raw_size > 0 && s0 < r0 + raw.size() && r0 < s0 + stored.size())
    return Status::InvalidArgument(Where(i, r) + ": sample with field codecs: stored and raw "
                                   "overlap");
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // validated at load
  // Each field's stored region (FORMAT.md §3.8.4), checked against the stored size.
  std::vector<uint64_t> offsets, stored_sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &stored_sizes));
  // One decoder per thread (the loader decodes on its worker threads).
  thread_local codec::Decoder decoder;
  const bool everything = fields.empty() && max_len == 0;
  std::vector<bool> wanted(codecs_.size(), fields.empty());
  for (size_t f : fields)
    if (f < wanted.size()) wanted[f] = true;
  uint64_t pos = 0;
  for (size_t f = 0; f < codecs_.size(); ++f) {
    const Field& field = schema().fields[f];
    if (!wanted[f]) continue;
    if (everything) std::memset(raw.data() + pos, 0, layout.offsets[f] - pos);  // gaps
    std::span<std::byte> dst = raw.subspan(layout.offsets[f], layout.sizes[f]);
    pos = layout.offsets[f] + layout.sizes[f];
    if (codecs_[f] == 0) {
      if (!dst.empty()) std::memcpy(dst.data(), stored.data() + offsets[f], dst.size());
      continue;
    }
    const Shape shape = FieldShape(dims, f);
    Result<codec::FieldGeometry> g = codec::GeometryOf(field.dtype, shape, field.seq_dim);
    if (!g.ok()) return g.status().WithContext(Where(i, r));
    uint64_t rows = g->rows;
    if (max_len > 0 && field.seq_dim >= 0 && max_len < rows) {
      // The first max_len tokens are the first max_len rows when the dims before seq_dim are 1
      // (EAGLE-3's [1, L, H]; FORMAT.md §4.3.1); otherwise everything is decoded.
      uint64_t outer = 1;
      for (int32_t d = 0; d < field.seq_dim; ++d) outer *= shape[static_cast<size_t>(d)];
      if (outer == 1) {
        rows = max_len;
        dst = dst.first(codec::DecodedBytes(*g, rows));
      }
    }
    // A plane kernel forced by LIBSHARD_PLANES_KERNEL that this CPU cannot run is the machine's
    // error, not the shard's (codec/plane_kernel_select.h): said as it is, not as damage.
    LIBSHARD_RETURN_IF_ERROR(codec::ActivePlaneKernel().status());
    Status st = decoder.Decode(stored.subspan(offsets[f], stored_sizes[f]),
                               static_cast<codec::CodecId>(codecs_[f]), *g, rows, dst);
    if (!st.ok()) {
      auto path = index_->SourcePath(i);
      const std::string source = path.ok() ? *path : std::string();
      return Status::Corruption(
          Where(i, r) + ": field '" + field.name + "' (" +
          std::string(codec::CodecName(static_cast<codec::CodecId>(codecs_[f]))) +
          " region of " + std::to_string(stored_sizes[f]) + " bytes at shard offset " +
          std::to_string(r.offset + offsets[f]) + "): " + st.message() +
          (source.empty() ? "" : " (source '" + source + "')") +
          "; the shard is damaged, re-run libshard pack");
    }
  }
  if (everything) std::memset(raw.data() + pos, 0, raw.size() - pos);
  return Status::OK();
}

Result<Sample> DatasetImpl::MakeSample(uint64_t i, const std::byte* base, uint64_t base_offset,
                                       uint64_t base_size, std::shared_ptr<const void> memory,
                                       std::span<const size_t> fields) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // checked at load
  const size_t f_count = schema().fields.size();
  std::vector<size_t> all;
  if (fields.empty()) {
    all.resize(f_count);
    for (size_t f = 0; f < f_count; ++f) all[f] = f;
    fields = all;
  }
  uint64_t base_end = 0;
  if (!format::CheckedAdd(base_offset, base_size, &base_end))
    return Status::InvalidArgument("MakeSample: base range overflows");
  std::vector<TensorView> views;
  views.reserve(fields.size());
  for (size_t f : fields) {
    if (f >= f_count)
      return Status::InvalidArgument("MakeSample: field " + std::to_string(f) + " out of range");
    const uint64_t off = layout.offsets[f], nbytes = layout.sizes[f];
    const Field& field = schema().fields[f];
    if (off < base_offset || off + nbytes > base_end)
      return Status::InvalidArgument(dir_ + ": sample " + std::to_string(i) + ": tensor '" +
                                     field.name + "' bytes [" + std::to_string(off) + ", +" +
                                     std::to_string(nbytes) + ") are outside the buffer [" +
                                     std::to_string(base_offset) + ", +" +
                                     std::to_string(base_size) + ")");
    views.push_back(TensorView{field.name, field.dtype, FieldShape(dims, f),
                               base + (off - base_offset), nbytes});
  }
  LIBSHARD_ASSIGN_OR_RETURN(Metadata meta, metadata(i));
  Sample sample(i, std::move(views), std::move(meta), std::move(memory));
  sample.set_rows(RowRange{0, r.length}, r.length);
  return sample;
}

}  // namespace libshard::internal
