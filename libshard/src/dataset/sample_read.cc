// Reading a local dataset's samples (dataset_impl.h): Read, Verify, and the sample and field
// checksums (FORMAT.md §3.3, §3.9) over the stored regions (§3.8.4), and the row blocks of the
// block tables (§3.10) that Verify checks and `libshard upgrade` computes.
#include <algorithm>
#include <cstring>

#include "codec/field_codec.h"
#include "codec/row_blocks.h"
#include "format/block_table.h"
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

Status DatasetImpl::ReadStoredRange(uint64_t i, uint64_t offset, uint64_t size,
                                    std::byte* dst) const {
  format::SampleRecord r;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r));
  uint64_t end = 0;
  if (!format::CheckedAdd(offset, size, &end) || end > r.stored_size)
    return Status::InvalidArgument(Where(i, r) + ": bytes [" + std::to_string(offset) + ", +" +
                                   std::to_string(size) + ") are not within its " +
                                   std::to_string(r.stored_size) + " stored bytes");
  if (size == 0) return Status::OK();
  Status st = shard_files_[r.shard].PReadExact(dst, size, r.offset + offset);
  return st.ok() ? st : st.WithContext("sample " + std::to_string(i));
}

namespace {

// Sample i's block table from its stored bytes (FORMAT.md §3.10.2): raw fields with
// `raw_block_rows(f)` rows a block, coded fields by their regions' chunks.
template <typename RawBlockRows>
Result<format::BlockTable> BlockTableOf(const Schema& schema, const std::vector<uint8_t>& codecs,
                                        const std::vector<uint64_t>& dims,
                                        const std::vector<uint64_t>& offsets,
                                        const std::vector<uint64_t>& sizes,
                                        const std::byte* stored, RawBlockRows raw_block_rows) {
  const std::vector<format::FieldRows> rows = format::SampleFieldRows(schema, dims, {});
  format::BlockTable table;
  table.fields.resize(schema.fields.size());
  size_t dim = 0;
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const Field& field = schema.fields[f];
    std::span<const uint64_t> shape(dims.data() + dim, field.rank);
    dim += field.rank;
    const uint8_t codec = codecs.empty() ? 0 : codecs[f];
    if (codec == 0) {
      table.fields[f] = codec::RawFieldBlocks({stored + offsets[f], sizes[f]}, rows[f],
                                              raw_block_rows(f, rows[f]));
      continue;
    }
    if (sizes[f] == 0) continue;  // no elements: no region
    LIBSHARD_ASSIGN_OR_RETURN(codec::FieldGeometry g,
                              codec::GeometryOf(field.dtype, shape, field.seq_dim));
    Result<format::FieldBlocks> blocks = codec::CodedFieldBlocks(
        {stored + offsets[f], sizes[f]}, static_cast<codec::CodecId>(codec), g);
    if (!blocks.ok())
      return blocks.status().WithContext("field '" + field.name + "'");
    table.fields[f] = std::move(blocks).value();
  }
  return table;
}

}  // namespace

Status DatasetImpl::CheckBlockTable(uint64_t i, const format::SampleRecord& r,
                                    const std::vector<uint64_t>& dims,
                                    const std::byte* stored) const {
  LIBSHARD_ASSIGN_OR_RETURN(format::BlockTable recorded, index_->BlockTable(i));
  if (r.flags & format::kFlagZstd) return Status::OK();  // no blocks (CheckTable)
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  auto computed = BlockTableOf(schema(), codecs_, dims, offsets, sizes, stored,
                               [&](size_t f, const format::FieldRows&) {
                                 return recorded.fields[f].block_rows;
                               });
  if (!computed.ok())
    return Status::Corruption(Where(i, r) + ": " + computed.status().message() + kRepack);
  for (size_t f = 0; f < recorded.fields.size(); ++f) {
    const format::FieldBlocks& want = recorded.fields[f];
    const format::FieldBlocks& got = computed->fields[f];
    if (want == got) continue;
    const std::string name = schema().fields[f].name;
    if (want.block_rows != got.block_rows || want.coded_sizes != got.coded_sizes)
      return Status::Corruption(Where(i, r) + ": field '" + name + "': its chunks do not match "
                                "the index's block table" + kRepack);
    if (want.head_checksum != got.head_checksum)
      return Status::Corruption(Where(i, r) + ": field '" + name + "': codec region head: row "
                                "block checksum mismatch" + kRepack);
    for (size_t b = 0; b < want.checksums.size(); ++b)
      if (want.checksums[b] != got.checksums[b])
        return Status::Corruption(
            Where(i, r) + ": field '" + name + "' rows [" +
            std::to_string(b * uint64_t{want.block_rows}) + ", " +
            std::to_string((b + 1) * uint64_t{want.block_rows}) + ") (" +
            (want.coded_sizes.empty() ? "row block " : "chunk ") + std::to_string(b) +
            "): row block checksum mismatch: " + format::Hex16(got.checksums[b]).substr(8) +
            " != " + format::Hex16(want.checksums[b]).substr(8) +
            " recorded in the index; the shard is damaged, re-run libshard pack");
  }
  return Status::OK();
}

Status DatasetImpl::ComputeChecks(uint64_t i, std::vector<uint64_t>* field_checksums,
                                  std::string* block_table) const {
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  block_table->clear();
  if (r.flags & format::kFlagZstd) {  // read whole: no blocks (§3.10.2)
    LIBSHARD_ASSIGN_OR_RETURN(*field_checksums, ComputeFieldChecksums(i));
    return Status::OK();
  }
  LIBSHARD_ASSIGN_OR_RETURN(std::shared_ptr<std::byte[]> stored, ReadStored(i, r));
  LIBSHARD_RETURN_IF_ERROR(CheckChecksum(i, r, stored.get()));
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  field_checksums->resize(offsets.size());
  for (size_t f = 0; f < offsets.size(); ++f)
    (*field_checksums)[f] = format::FieldChecksum(stored.get() + offsets[f], sizes[f]);
  // Raw fields by the writer's rule; coded fields by their regions' chunks (§3.10.6).
  auto table = BlockTableOf(schema(), codecs_, dims, offsets, sizes, stored.get(),
                            [](size_t, const format::FieldRows& g) {
                              return codec::WriterBlockRows(g.rows, g.row_bytes());
                            });
  if (!table.ok())
    return Status::Corruption(Where(i, r) + ": " + table.status().message() + kRepack);
  *block_table = format::EncodeBlockTable(*table);
  return Status::OK();
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
  // the decoded tensors of a whole-sample zstd sample; the third (§3.10): every row block.
  std::vector<uint64_t> offsets, sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &offsets, &sizes));
  if (!(r.flags & format::kFlagZstd)) {
    LIBSHARD_RETURN_IF_ERROR(
        CheckFieldChecksums(i, r, offsets, sizes, stored.get(), 0, r.stored_size, {}));
    if (!index_->has_block_tables()) return Status::OK();
    return CheckBlockTable(i, r, dims, stored.get());
  }
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
