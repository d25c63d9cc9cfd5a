// Reading a local dataset's samples (dataset_impl.h): Read, Verify, and the sample and field
// checksums (FORMAT.md §3.3, §3.9) over the stored regions (§3.8.4).
#include <algorithm>
#include <cstring>

#include "codec/field_codec.h"
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

Result<std::shared_ptr<std::byte[]>> DatasetImpl::ReadStored(uint64_t i,
                                                             const format::SampleRecord& r) const {
  auto buf = internal::AllocateAligned(r.stored_size, kSampleAlignment);
  if (!buf)
    return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                     std::to_string(r.stored_size) + " bytes");
  Status st = shard_files_[r.shard].PReadExact(buf.get(), r.stored_size, r.offset);
  if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
  return buf;
}

Status DatasetImpl::CheckChecksum(uint64_t i, const format::SampleRecord& r,
                                  const std::byte* stored) const {
  const uint64_t actual = format::Xxh3(stored, r.stored_size);
  if (actual == r.checksum) return Status::OK();
  auto path = index_->SourcePath(i);
  const std::string source = path.ok() ? *path : std::string();
  return Status::Corruption(Where(i, r) + " (" + std::to_string(r.stored_size) +
                            " stored bytes): checksum mismatch: xxh3 " + format::Hex16(actual) +
                            " != " + format::Hex16(r.checksum) + " recorded in the index" +
                            (source.empty() ? "" : " (source '" + source + "')") +
                            "; the shard is damaged, re-run libshard pack");
}

Result<Sample> DatasetImpl::Read(uint64_t i) const {
  format::SampleRecord r;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r));
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<std::byte[]> stored, ReadStored(i, r));
  if (options_.verify_checksums) LIBSHARD_RETURN_IF_ERROR(CheckChecksum(i, r, stored.get()));
  std::shared_ptr<std::byte[]> raw = stored;
  if ((r.flags & format::kFlagZstd) || !codecs_.empty()) {
    raw = internal::AllocateAligned(r.raw_size, kSampleAlignment);
    if (!raw)
      return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                       std::to_string(r.raw_size) + " bytes");
    LIBSHARD_RETURN_IF_ERROR(Decode(i, {stored.get(), r.stored_size}, {raw.get(), r.raw_size}));
  }
  const std::byte* base = raw.get();
  return MakeSample(i, base, 0, r.raw_size, std::shared_ptr<const void>(raw, raw.get()), {});
}

Status DatasetImpl::Verify(uint64_t i) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<std::byte[]> stored, ReadStored(i, r));
  LIBSHARD_RETURN_IF_ERROR(CheckChecksum(i, r, stored.get()));
  if (!has_field_checksums()) return Status::OK();
  // The second level (FORMAT.md §3.9): every field checksum, over the stored regions, or over
  // the decoded tensors of a whole-sample zstd sample.
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  if (!(r.flags & format::kFlagZstd))
    return CheckFieldChecksums(i, r, offsets, sizes, stored.get(), 0, r.stored_size, {});
  auto raw = internal::AllocateAligned(std::max<uint64_t>(r.raw_size, 1), kSampleAlignment);
  if (!raw)
    return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                     std::to_string(r.raw_size) + " bytes");
  LIBSHARD_RETURN_IF_ERROR(Decode(i, {stored.get(), r.stored_size}, {raw.get(), r.raw_size}));
  return CheckFieldChecksums(i, r, offsets, sizes, raw.get(), 0, r.raw_size, {});
}

Result<std::vector<uint64_t>> DatasetImpl::ComputeFieldChecksums(uint64_t i) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<std::byte[]> stored, ReadStored(i, r));
  LIBSHARD_RETURN_IF_ERROR(CheckChecksum(i, r, stored.get()));
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  std::shared_ptr<std::byte[]> bytes = stored;
  if (r.flags & format::kFlagZstd) {  // §3.9: over the decoded tensors
    bytes = internal::AllocateAligned(std::max<uint64_t>(r.raw_size, 1), kSampleAlignment);
    if (!bytes)
      return Status::ResourceExhausted(Where(i, r) + ": cannot allocate " +
                                       std::to_string(r.raw_size) + " bytes");
    LIBSHARD_RETURN_IF_ERROR(Decode(i, {stored.get(), r.stored_size}, {bytes.get(), r.raw_size}));
  }
  std::vector<uint64_t> sums(offsets.size());
  for (size_t f = 0; f < sums.size(); ++f)
    sums[f] = format::FieldChecksum(bytes.get() + offsets[f], sizes[f]);
  return sums;
}

Status DatasetImpl::Regions(uint64_t i, const format::SampleRecord& r,
                            const std::vector<uint64_t>& dims, std::vector<uint64_t>* offsets,
                            std::vector<uint64_t>* sizes) const {
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // checked at load
  if (codecs_.empty()) {
    *offsets = layout.offsets;
    *sizes = layout.sizes;
    return Status::OK();
  }
  std::vector<uint64_t> stored_sizes;
  Status st = index_->FieldStoredSizes(i, &stored_sizes);
  if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
  std::vector<format::FieldCodec> fc;
  for (uint8_t c : codecs_) fc.push_back(format::FieldCodec{c, {}});
  uint64_t total = 0;
  if (!format::ComputeStoredLayout(fc, layout.sizes, stored_sizes, offsets, &total) ||
      total != r.stored_size)
    return Status::Corruption(Where(i, r) + ": the field regions' sizes do not add up to the "
                              "stored size " + std::to_string(r.stored_size) + kRepack);
  sizes->resize(codecs_.size());
  for (size_t f = 0; f < codecs_.size(); ++f)
    (*sizes)[f] = codecs_[f] == 0 ? layout.sizes[f] : stored_sizes[f];
  return Status::OK();
}

Status DatasetImpl::FieldRegions(uint64_t i, std::vector<uint64_t>* offsets,
                                 std::vector<uint64_t>* sizes) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  return Regions(i, r, dims, offsets, sizes);
}

Status DatasetImpl::CheckFieldChecksums(uint64_t i, const format::SampleRecord& r,
                                        const std::vector<uint64_t>& offsets,
                                        const std::vector<uint64_t>& sizes,
                                        const std::byte* bytes, uint64_t base_offset,
                                        uint64_t base_size,
                                        std::span<const size_t> fields) const {
  std::vector<uint64_t> sums;
  {
    Status st = index_->FieldChecksums(i, &sums);
    if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
  }
  const size_t f_count = schema().fields.size();
  auto check = [&](size_t f) -> Status {
    if (f >= f_count)
      return Status::InvalidArgument("VerifyFields: field " + std::to_string(f) + " out of range");
    const uint64_t off = offsets[f], size = sizes[f];
    if (off < base_offset || off - base_offset > base_size || size > base_size - (off - base_offset))
      return Status::InvalidArgument(Where(i, r) + ": field '" + schema().fields[f].name +
                                     "' region [" + std::to_string(off) + ", +" +
                                     std::to_string(size) + ") is not within the bytes read [" +
                                     std::to_string(base_offset) + ", +" +
                                     std::to_string(base_size) + ")");
    const uint64_t actual = format::FieldChecksum(bytes + (off - base_offset), size);
    if (actual == sums[f]) return Status::OK();
    auto path = index_->SourcePath(i);
    const std::string source = path.ok() ? *path : std::string();
    const bool zstd = (r.flags & format::kFlagZstd) != 0;
    return Status::Corruption(
        Where(i, r) + ": field '" + schema().fields[f].name + "' (" + std::to_string(size) +
        (zstd ? " decoded bytes at payload offset " + std::to_string(off)
              : " bytes at shard offset " + std::to_string(r.offset + off)) +
        "): field checksum mismatch: " + format::Hex16(actual).substr(8) + " != " +
        format::Hex16(sums[f]).substr(8) + " recorded in the index" + (source.empty() ? "" : " (source '" + source + "')") +
        "; the shard is damaged, re-run libshard pack");
  };
  if (fields.empty()) {
    for (size_t f = 0; f < f_count; ++f) LIBSHARD_RETURN_IF_ERROR(check(f));
  } else {
    for (size_t f : fields) LIBSHARD_RETURN_IF_ERROR(check(f));
  }
  return Status::OK();
}

Status DatasetImpl::VerifyFields(uint64_t i, const std::byte* base, uint64_t base_offset,
                                 uint64_t base_size, std::span<const size_t> fields) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  if (!has_field_checksums())
    return Status::Unsupported(index_path_ + ": the index has no field checksums (index version " +
                               std::to_string(index_->index_version()) +
                               "); check the whole sample, or add them with libshard upgrade");
  if (r.flags & format::kFlagZstd)
    return Status::InvalidArgument(Where(i, r) + ": VerifyFields of a zstd-compressed sample "
                                   "(its field checksums cover the decoded bytes; use Verify)");
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  return CheckFieldChecksums(i, r, offsets, sizes, base, base_offset, base_size, fields);
}

}  // namespace libshard::internal
