#include "loader/read_layout.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "dataset/dataset_access.h"

namespace libshard {
namespace {

constexpr uint64_t kAlign = 4096;

uint64_t AlignDown(uint64_t v) { return v / kAlign * kAlign; }
uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// How max_len cuts one tensor.
struct Cut {
  bool cut = false;          // shape[seq_dim] > max_len
  uint64_t outer = 1;        // product of the dims before seq_dim
  uint64_t row_bytes = 0;    // bytes of one row: product of the dims after seq_dim x itemsize
  uint64_t rows = 0;         // shape[seq_dim]
  uint64_t kept_bytes = 0;   // bytes after the cut
  bool contiguous = true;    // kept bytes are a prefix of the tensor
};

Cut CutFor(const Field& field, const TensorLocation& t, uint64_t max_len) {
  Cut c;
  c.kept_bytes = t.nbytes;
  if (max_len == 0 || field.seq_dim < 0 || static_cast<size_t>(field.seq_dim) >= t.shape.size()) {
    return c;
  }
  const auto d = static_cast<size_t>(field.seq_dim);
  c.rows = t.shape[d];
  if (c.rows <= max_len) return c;
  c.cut = true;
  c.outer = 1;
  for (size_t k = 0; k < d; ++k) c.outer *= t.shape[k];
  c.row_bytes = DTypeSize(field.dtype);
  for (size_t k = d + 1; k < t.shape.size(); ++k) c.row_bytes *= t.shape[k];
  c.kept_bytes = c.outer * max_len * c.row_bytes;
  c.contiguous = c.outer <= 1;
  return c;
}

std::vector<size_t> AllFields(const Dataset& dataset, std::span<const size_t> fields) {
  if (!fields.empty()) return {fields.begin(), fields.end()};
  std::vector<size_t> all(dataset.schema().fields.size());
  std::iota(all.begin(), all.end(), size_t{0});
  return all;
}

}  // namespace

ReadLayout::SubRead ReadLayout::SubReadAt(uint64_t slot_offset, uint64_t max_length) const {
  if (extents.empty())
    return SubRead{file_offset + slot_offset, std::min(max_length, read_length - slot_offset)};
  // The extent holding slot_offset (they are back to back in the slot).
  auto it = std::upper_bound(extents.begin(), extents.end(), slot_offset,
                             [](uint64_t off, const ReadExtent& e) { return off < e.slot_offset; });
  const ReadExtent& e = *std::prev(it);
  const uint64_t into = slot_offset - e.slot_offset;
  return SubRead{e.file_offset + into, std::min(max_length, e.length - into)};
}

uint64_t ReadLayout::SlotOffsetOf(uint64_t file) const {
  if (extents.empty()) return file - file_offset;
  for (const ReadExtent& e : extents)
    if (file >= e.file_offset && file - e.file_offset < e.length)
      return e.slot_offset + (file - e.file_offset);
  return read_length;  // not a byte of this layout
}

Result<ReadLayout> PlanSliceRead(const Dataset& dataset, uint64_t index,
                                 const SampleLocation& location, std::span<const size_t> fields,
                                 RowRange rows, PartialCheck check) {
  LIBSHARD_ASSIGN_OR_RETURN(
      std::shared_ptr<const internal::SlicePlan> plan,
      internal::DatasetAccess::PlanSlice(dataset, index, fields, rows,
                                         check != PartialCheck::kNone));
  ReadLayout r;
  r.whole = plan->whole;
  r.check_fields = check != PartialCheck::kNone;
  r.decoded_bytes = plan->decoded_bytes;
  // The extents' pages, in file order, merged where they overlap or touch.
  std::vector<std::pair<uint64_t, uint64_t>> pages;  // [begin, end) in the shard
  for (const internal::SliceExtent& e : plan->extents)
    if (e.size > 0)
      pages.emplace_back(AlignDown(location.offset + e.offset),
                         AlignUp(location.offset + e.offset + e.size));
  std::sort(pages.begin(), pages.end());
  uint64_t slot = 0;
  for (const auto& [begin, end] : pages) {
    if (!r.extents.empty()) {
      ReadExtent& last = r.extents.back();
      if (begin <= last.file_offset + last.length) {
        const uint64_t grown = std::max(last.file_offset + last.length, end) - last.file_offset;
        slot += grown - last.length;
        last.length = grown;
        continue;
      }
    }
    r.extents.push_back(ReadExtent{begin, end - begin, slot});
    slot += end - begin;
  }
  if (r.extents.empty()) {
    // Nothing to read (no rows, empty tensors): one page keeps the read path uniform.
    r.extents.push_back(ReadExtent{AlignDown(location.offset), kAlign, 0});
    slot = kAlign;
  }
  r.file_offset = r.extents.front().file_offset;
  r.read_length = slot;
  r.needed = slot;  // every page lies within the shard: a sample's padding reaches a page end
  r.payload_begin = 0;
  r.payload_end = 0;
  r.skew = 0;
  r.slice = std::move(plan);
  return r;
}

Result<Sample> FinishSliceRead(const Dataset& dataset, const SampleLocation& location,
                               const ReadLayout& layout, std::byte* slot, std::byte* decoded,
                               std::shared_ptr<const void> memory) {
  if (!layout.slice) return Status::InvalidArgument("FinishSliceRead of a layout without a plan");
  const internal::SlicePlan& plan = *layout.slice;
  std::vector<std::byte*> extents(plan.extents.size());
  for (size_t k = 0; k < plan.extents.size(); ++k) {
    const uint64_t file = location.offset + plan.extents[k].offset;
    const uint64_t at = layout.SlotOffsetOf(file);
    if (at >= layout.read_length || plan.extents[k].size > layout.read_length - at)
      return Status::Internal("a row-range read's extent is not among its reads");
    extents[k] = slot + at;  // congruent to its stored offset modulo 4096: pages land on pages
  }
  return internal::DatasetAccess::FinishSlice(dataset, plan, extents, decoded, std::move(memory));
}

ReadLayout PlanRead(const Dataset& dataset, uint64_t index, const SampleLocation& location,
                    std::span<const size_t> fields, uint64_t max_len, PartialCheck check) {
  ReadLayout r;
  r.whole = true;
  r.file_offset = location.offset;
  r.read_length = AlignUp(location.stored_size);
  r.needed = location.stored_size;
  r.payload_begin = 0;
  r.payload_end = location.stored_size;
  const bool compressed = SampleNeedsDecode(location.flags);
  r.decoded_bytes = compressed ? std::max<uint64_t>(location.raw_size, 1) : 0;
  const bool partial = !fields.empty() || max_len > 0;
  // With row blocks (FORMAT.md §3.10), a partial read of a local dataset reads only what it
  // serves plus at most a block at the end of each field's prefix, raw or compressed: a row-range
  // read of rows [0, max_len). (An s3:// dataset reads it as below, one range, which its cache
  // heals and reads through whole; a sequence-parallel slice is a row-range read there too.)
  if (partial && check != PartialCheck::kWhole && dataset.has_row_blocks() &&
      (location.flags & kSampleFlagZstd) == 0 &&
      internal::DatasetAccess::shard_filler(dataset) == nullptr && location.stored_size > 0) {
    Result<ReadLayout> slice = PlanSliceRead(
        dataset, index, location, fields,
        RowRange{0, max_len > 0 ? max_len : RowRange::kEnd}, check);
    if (slice.ok()) return std::move(slice).value();
    // A block table that does not read or check: the read below, checked as without one.
  }
  if (compressed || check == PartialCheck::kWhole || !partial) return r;
  // A field checksum covers the field whole (FORMAT.md §3.9): a checked prefix read reads each
  // served field to its end.
  const bool whole_fields = check == PartialCheck::kFields;
  const std::vector<Field>& schema_fields = dataset.schema().fields;
  uint64_t begin = UINT64_MAX;
  uint64_t end = 0;
  for (size_t f : AllFields(dataset, fields)) {
    const TensorLocation t = dataset.tensor(index, f);
    const Cut c = CutFor(schema_fields[f], t, max_len);
    begin = std::min(begin, t.offset);
    end = std::max(end, t.offset + (c.contiguous && !whole_fields ? c.kept_bytes : t.nbytes));
  }
  if (begin >= end) {  // nothing to read (zero-size tensors): one page keeps the code uniform
    begin = 0;
    end = 0;
  }
  r.whole = false;
  r.check_fields = whole_fields;
  r.payload_begin = begin;
  r.payload_end = end;
  r.skew = begin - AlignDown(begin);
  r.file_offset = location.offset + AlignDown(begin);
  r.needed = end - AlignDown(begin);
  r.read_length = std::max<uint64_t>(AlignUp(end) - AlignDown(begin), kAlign);
  return r;
}

Result<Sample> BuildSample(const Dataset& dataset, uint64_t index, std::byte* base,
                           uint64_t base_offset, uint64_t base_size,
                           std::shared_ptr<const void> memory, std::span<const size_t> fields,
                           uint64_t max_len) {
  if (max_len == 0) {
    return internal::DatasetAccess::MakeSample(dataset, index, base, base_offset, base_size,
                                               std::move(memory), fields);
  }
  const Schema& schema = dataset.schema();
  std::vector<TensorView> views;
  for (size_t f : AllFields(dataset, fields)) {
    const TensorLocation t = dataset.tensor(index, f);
    const Field& field = schema.fields[f];
    const Cut c = CutFor(field, t, max_len);
    const uint64_t present = c.contiguous ? c.kept_bytes : t.nbytes;
    if (t.offset < base_offset || t.offset - base_offset > base_size ||
        present > base_size - (t.offset - base_offset)) {
      return Status::Corruption(dataset.path() + ": sample " + std::to_string(index) +
                                ": tensor '" + field.name + "' [" + std::to_string(t.offset) +
                                ", +" + std::to_string(present) +
                                ") lies outside the bytes read; the index is damaged");
    }
    std::byte* data = base + (t.offset - base_offset);
    TensorView v{field.name, field.dtype, t.shape, data, t.nbytes};
    if (c.cut) {
      if (!c.contiguous) {
        // Row block o moves from o*rows to o*max_len (destination never after the source).
        const uint64_t block = max_len * c.row_bytes;
        for (uint64_t o = 1; o < c.outer; ++o) {
          std::memmove(data + o * block, data + o * c.rows * c.row_bytes, block);
        }
      }
      v.shape[static_cast<size_t>(field.seq_dim)] = max_len;
      v.nbytes = c.kept_bytes;
    }
    views.push_back(std::move(v));
  }
  LIBSHARD_ASSIGN_OR_RETURN(Metadata meta, dataset.metadata(index));
  Sample sample(index, std::move(views), std::move(meta), std::move(memory));
  const uint64_t length = dataset.length(index);
  sample.set_rows(RowRange{0, ClippedLength(length, max_len)}, length);
  return sample;
}

}  // namespace libshard
