// DatasetImpl::PlanSlice (dataset_impl.h, slice_plan.h): which bytes a row-range read of a
// local dataset's sample reads, and how they are checked (FORMAT.md §3.10.3), from the index
// alone: the record, the dims and, with row blocks (index version 4), the sample's block table.
#include <algorithm>
#include <cstdio>

#include "codec/field_codec.h"
#include "codec/row_blocks.h"
#include "dataset/dataset_impl.h"
#include "dataset/slice_plan.h"
#include "format/bytes.h"
#include "format/index.h"
#include "format/payload.h"

namespace libshard::internal {
namespace {

constexpr uint64_t kAlign = kTensorAlignment;  // 64: every view a reader hands out

uint64_t AlignDown(uint64_t v) { return v / kAlign * kAlign; }

// Appends [offset, offset + size) to the field's extents, merged with the last one when they
// overlap or touch.
void AddExtent(SlicePlan* plan, FieldSlice* fs, uint64_t offset, uint64_t size) {
  if (size == 0) return;
  if (fs->extent_count > 0) {
    SliceExtent& last = plan->extents.back();
    if (offset <= last.offset + last.size) {
      last.size = std::max(last.offset + last.size, offset + size) - last.offset;
      return;
    }
  }
  plan->extents.push_back(SliceExtent{offset, size});
  ++fs->extent_count;
}

}  // namespace

void DatasetImpl::SayOnce(std::atomic<bool>* said, const std::string& text) const {
  if (said->exchange(true, std::memory_order_relaxed)) return;
  std::fprintf(stderr, "libshard: %s: %s\n", (notes_name_.empty() ? dir_ : notes_name_).c_str(),
               text.c_str());
}

Result<std::shared_ptr<const SlicePlan>> DatasetImpl::PlanSlice(uint64_t i,
                                                                std::span<const size_t> fields,
                                                                RowRange rows,
                                                                bool verify) const {
  if (rows.start > rows.stop)
    return Status::InvalidArgument(dir_ + ": sample " + std::to_string(i) + ": row range [" +
                                   std::to_string(rows.start) + ", " +
                                   std::to_string(rows.stop) + ") has its start past its stop");
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  format::PayloadLayout layout;
  LIBSHARD_RETURN_IF_ERROR(format::ComputeLayout(schema(), dims, &layout));  // checked at load
  std::vector<uint64_t> region_offsets, region_sizes;
  LIBSHARD_RETURN_IF_ERROR(Regions(i, r, dims, &region_offsets, &region_sizes));
  const size_t f_count = schema().fields.size();
  std::vector<size_t> order;
  if (fields.empty()) {
    for (size_t f = 0; f < f_count; ++f) order.push_back(f);
  } else {
    for (size_t f : fields) {
      if (f >= f_count)
        return Status::InvalidArgument("PlanSlice: field " + std::to_string(f) + " out of range");
      order.push_back(f);
    }
  }

  auto plan = std::make_shared<SlicePlan>();
  plan->sample = i;
  plan->length = r.length;
  plan->rows = rows;
  if (schema().length_field >= 0) {
    plan->rows.start = std::min(rows.start, r.length);
    plan->rows.stop = std::min(rows.stop, r.length);
  }
  const bool zstd = (r.flags & format::kFlagZstd) != 0;
  plan->whole = zstd || (verify && !has_field_checksums());
  plan->check_sample = plan->whole && verify;

  // Each field's token geometry and the rows it serves.
  bool cut_any = false;
  for (size_t f : order) {
    const Field& field = schema().fields[f];
    FieldSlice fs;
    fs.field = f;
    fs.codec = codecs_.empty() ? 0 : codecs_[f];
    fs.full_nbytes = layout.sizes[f];
    fs.shape = FieldShape(dims, f);
    if (plan->whole) {  // the tensor's place in the payload
      fs.region_offset = layout.offsets[f];
      fs.region_size = layout.sizes[f];
    } else {
      fs.region_offset = region_offsets[f];
      fs.region_size = region_sizes[f];
    }
    if (field.seq_dim >= 0) {
      const auto s = static_cast<size_t>(field.seq_dim);
      for (size_t d = 0; d < s; ++d) fs.outer *= fs.shape[d];
      fs.seq = fs.shape[s];
      fs.token_bytes = DTypeSize(field.dtype);
      for (size_t d = s + 1; d < fs.shape.size(); ++d) fs.token_bytes *= fs.shape[d];
      fs.begin = std::min(plan->rows.start, fs.seq);
      fs.end = std::min(plan->rows.stop, fs.seq);
      fs.shape[s] = fs.end - fs.begin;
      cut_any = cut_any || fs.end - fs.begin < fs.seq;
    } else {  // served whole: one run of one "token"
      fs.seq = 1;
      fs.token_bytes = fs.full_nbytes;
      fs.begin = 0;
      fs.end = 1;
    }
    fs.nbytes = fs.outer * (fs.end - fs.begin) * fs.token_bytes;
    plan->fields.push_back(std::move(fs));
  }

  if (plan->whole) {
    plan->extents.push_back(SliceExtent{0, r.stored_size});
    plan->decode_whole = zstd || !codecs_.empty();
    plan->decoded_bytes = plan->decode_whole ? r.raw_size : 0;
    for (FieldSlice& fs : plan->fields) fs.check = plan->check_sample;
    if (cut_any)
      SayOnce(zstd ? &said_zstd_ : &said_no_blocks_,
              zstd ? "sample " + std::to_string(i) +
                         " is stored with whole-sample zstd (compression zstd), which cannot be "
                         "sliced: a row range reads such a sample whole (pack with --compress auto "
                         "or a field codec to read row ranges)"
                   : "index version " + std::to_string(index_version()) +
                         " has no field checksums or row blocks: a checked row range reads each "
                         "sample whole; " + UpgradeAdvice() +
                         " to read only the rows (FORMAT.md §3.10)");
    return std::shared_ptr<const SlicePlan>(std::move(plan));
  }

  // The sample's block table, when a field is cut (FORMAT.md §3.10.3).
  format::BlockTable table;
  const bool tables = index_->has_block_tables();
  if (tables && cut_any && r.stored_size > 0) {
    Result<format::BlockTable> t = index_->BlockTable(i);
    if (!t.ok()) return t.status().WithContext(dir_);
    table = std::move(t).value();
  }
  bool fell_back = false;
  uint64_t decoded = 0;
  for (FieldSlice& fs : plan->fields) {
    const Field& field = schema().fields[fs.field];
    const bool cut = fs.end - fs.begin < fs.seq;
    const format::FieldBlocks* blocks =
        table.fields.empty() ? nullptr : &table.fields[fs.field];
    const bool has_blocks = blocks != nullptr && blocks->block_rows > 0;
    fs.first_extent = plan->extents.size();
    if (!cut || fs.nbytes == 0) {
      fs.mode = SliceMode::kWhole;  // every row (or none: nothing to read)
    } else if (fs.codec == 0 && (has_blocks || !verify)) {
      fs.mode = SliceMode::kRows;
    } else if (fs.codec != 0 && has_blocks) {
      fs.mode = SliceMode::kCoded;
    } else {
      fs.mode = SliceMode::kWhole;  // no blocks: the field read whole
      fell_back = fell_back || !tables;
    }
    fs.check = verify;
    if (fs.nbytes == 0) continue;  // nothing served: nothing read or checked
    switch (fs.mode) {
      case SliceMode::kWhole:
        AddExtent(plan.get(), &fs, fs.region_offset, fs.region_size);
        fs.in_place = fs.codec == 0;
        break;
      case SliceMode::kRows: {
        const uint64_t rb = fs.token_bytes;
        const uint64_t rows_total = fs.outer * fs.seq;
        if (fs.check) fs.blocks = *blocks;
        for (uint64_t o = 0; o < fs.outer; ++o) {
          const uint64_t r0 = o * fs.seq + fs.begin, r1 = o * fs.seq + fs.end;
          uint64_t begin = r0 * rb, end = r1 * rb;
          if (fs.check) {
            const uint64_t br = fs.blocks.block_rows;
            begin = r0 / br * br * rb;
            end = std::min(rows_total, ((r1 - 1) / br + 1) * br) * rb;
          }
          // From a 64-byte boundary of the region (which starts on one), so that rows can be
          // moved to the extent's start to be aligned.
          const uint64_t start = AlignDown(fs.region_offset + begin);
          AddExtent(plan.get(), &fs, start, fs.region_offset + end - start);
        }
        fs.in_place = fs.outer == 1;
        break;
      }
      case SliceMode::kCoded: {
        fs.blocks = *blocks;
        Result<codec::FieldGeometry> g =
            codec::GeometryOf(field.dtype, FieldShape(dims, fs.field), field.seq_dim);
        if (!g.ok()) return g.status().WithContext(Where(i, r));
        Result<codec::CodedPlaces> places = codec::PlaceCodedBlocks(
            static_cast<codec::CodecId>(fs.codec), *g, fs.region_size, fs.blocks);
        if (!places.ok())
          return Status::Corruption(index_path_ + ": sample " + std::to_string(i) + ": field '" +
                                    field.name + "': " + places.status().message() + kRepack);
        fs.places = std::move(places).value();
        AddExtent(plan.get(), &fs, fs.region_offset, fs.places.head_size);
        const uint64_t br = fs.blocks.block_rows;
        for (uint64_t o = 0; o < fs.outer; ++o) {
          const uint64_t r0 = o * fs.seq + fs.begin, r1 = o * fs.seq + fs.end;
          const uint64_t c0 = r0 / br, c1 = (r1 - 1) / br;
          AddExtent(plan.get(), &fs, fs.region_offset + fs.places.chunk_offset[c0],
                    fs.places.chunk_offset[c1 + 1] - fs.places.chunk_offset[c0]);
        }
        fs.in_place = false;
        break;
      }
    }
    if (!fs.in_place) {
      // Decoded chunks (the rows served), a coded region decoded whole (then cut), or runs of
      // rows gathered.
      fs.decoded_offset = format::AlignUp(decoded, kAlign);
      decoded = fs.decoded_offset +
                (fs.mode == SliceMode::kWhole ? fs.full_nbytes : fs.nbytes);
    }
  }
  plan->decoded_bytes = decoded;
  if (fell_back)
    SayOnce(&said_no_blocks_, "index version " + std::to_string(index_version()) +
                                  " has no row blocks: a checked row range reads each field "
                                  "whole; " + UpgradeAdvice() +
                                  " to read only the rows (FORMAT.md §3.10)");
  return std::shared_ptr<const SlicePlan>(std::move(plan));
}

}  // namespace libshard::internal
