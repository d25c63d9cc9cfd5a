// DatasetImpl::FinishSlice (dataset_impl.h, slice_plan.h): the bytes a row-range read's plan
// named, checked (the sample checksum, a field checksum, or each row block and chunk against the
// sample's block table, FORMAT.md §3.10.3), decoded where stored under a codec, and cut to the
// rows served, as a Sample.
#include <algorithm>
#include <cstring>

#include "codec/field_codec.h"
#include "codec/row_blocks.h"
#include "dataset/dataset_impl.h"
#include "dataset/slice_plan.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index.h"
#include "format/payload.h"

namespace libshard::internal {
namespace {

constexpr uint64_t kAlign = kTensorAlignment;

bool Aligned(const std::byte* p) { return reinterpret_cast<uintptr_t>(p) % kAlign == 0; }

// The rows a field serves, cut within its own whole tensor at `tensor` (64-byte aligned): a view
// in place when they are one aligned run, else the runs moved to the tensor's start (each
// destination at or before its source, so one pass of memmove does it).
std::byte* CutInPlace(std::byte* tensor, const FieldSlice& fs) {
  const uint64_t run = (fs.end - fs.begin) * fs.token_bytes;
  if (fs.outer == 1) {
    std::byte* p = tensor + fs.begin * fs.token_bytes;
    if (Aligned(p) || run == 0) return p;
    std::memmove(tensor, p, run);
    return tensor;
  }
  for (uint64_t o = 0; o < fs.outer; ++o)
    std::memmove(tensor + o * run, tensor + (o * fs.seq + fs.begin) * fs.token_bytes, run);
  return tensor;
}

}  // namespace

Result<Sample> DatasetImpl::FinishSlice(const SlicePlan& plan,
                                        std::span<std::byte* const> extents, std::byte* decoded,
                                        std::shared_ptr<const void> memory) const {
  const uint64_t i = plan.sample;
  format::SampleRecord r;
  std::vector<uint64_t> dims;
  LIBSHARD_RETURN_IF_ERROR(Lookup(i, &r, &dims));
  if (extents.size() != plan.extents.size() || (plan.decoded_bytes > 0 && decoded == nullptr))
    return Status::InvalidArgument(Where(i, r) + ": FinishSlice needs the " +
                                   std::to_string(plan.extents.size()) +
                                   " extents of its plan and its decode buffer");
  auto source = [&] {
    auto path = index_->SourcePath(i);
    return path.ok() && !path->empty() ? " (source '" + *path + "')" : std::string();
  };
  // The bytes [offset, offset + size) of the stored extent among the field's extents.
  auto bytes_at = [&](const FieldSlice& fs, uint64_t offset, uint64_t size) -> Result<std::byte*> {
    for (size_t k = fs.first_extent; k < fs.first_extent + fs.extent_count; ++k) {
      const SliceExtent& e = plan.extents[k];
      if (offset >= e.offset && offset - e.offset <= e.size && size <= e.size - (offset - e.offset))
        return extents[k] + (offset - e.offset);
    }
    return Status::InvalidArgument(Where(i, r) + ": stored bytes [" + std::to_string(offset) +
                                   ", +" + std::to_string(size) + ") are not among the extents "
                                   "the plan of field " + std::to_string(fs.field) + " read");
  };
  // A block (or chunk, or codec head) of a field failed its checksum.
  auto damaged = [&](const FieldSlice& fs, const std::string& what, uint64_t offset,
                     uint64_t size, uint64_t actual, uint64_t expected) {
    return Status::Corruption(Where(i, r) + ": field '" + schema().fields[fs.field].name +
                              "' " + what + " (" + std::to_string(size) +
                              " bytes at shard offset " + std::to_string(r.offset + offset) +
                              "): checksum mismatch: " + format::Hex16(actual).substr(8) +
                              " != " + format::Hex16(expected).substr(8) +
                              " recorded in the index" + source() +
                              "; the shard is damaged, re-run libshard pack");
  };
  // The geometry rows [a, b) of the field as its tokens, for messages.
  auto rows_text = [](const FieldSlice& fs, uint64_t a, uint64_t b) {
    return fs.outer == 1 ? "rows [" + std::to_string(a) + ", " + std::to_string(b) + ")"
                         : "rows [" + std::to_string(a) + ", " + std::to_string(b) +
                               ") of its " + std::to_string(fs.outer) + " x " +
                               std::to_string(fs.seq) + " (dims up to seq_dim)";
  };
  alignas(kAlign) static constexpr std::byte kNone[kAlign] = {};
  const std::byte* const empty = kNone;  // the data of a tensor of 0 bytes

  std::vector<TensorView> views;
  views.reserve(plan.fields.size());
  thread_local codec::Decoder decoder;
  if (plan.whole) {
    std::byte* stored = extents[0];
    if (plan.check_sample) LIBSHARD_RETURN_IF_ERROR(CheckChecksum(i, r, stored));
    std::byte* payload = stored;
    if (plan.decode_whole) {
      std::vector<size_t> selected;
      for (const FieldSlice& fs : plan.fields) selected.push_back(fs.field);
      LIBSHARD_RETURN_IF_ERROR(
          DecodeSelected(i, {stored, r.stored_size}, {decoded, r.raw_size}, selected, 0));
      payload = decoded;
    }
    for (const FieldSlice& fs : plan.fields) {
      const Field& field = schema().fields[fs.field];
      const std::byte* data =
          fs.nbytes == 0 ? empty : CutInPlace(payload + fs.region_offset, fs);
      views.push_back(TensorView{field.name, field.dtype, fs.shape, data, fs.nbytes});
    }
  } else {
    for (const FieldSlice& fs : plan.fields) {
      const Field& field = schema().fields[fs.field];
      if (fs.nbytes == 0) {
        views.push_back(TensorView{field.name, field.dtype, fs.shape, empty, 0});
        continue;
      }
      std::byte* data = nullptr;
      switch (fs.mode) {
        case SliceMode::kWhole: {
          LIBSHARD_ASSIGN_OR_RETURN(std::byte* region,
                                    bytes_at(fs, fs.region_offset, fs.region_size));
          if (fs.check) {
            std::vector<uint64_t> offsets(schema().fields.size(), 0), sizes(offsets.size(), 0);
            offsets[fs.field] = fs.region_offset;
            sizes[fs.field] = fs.region_size;
            const size_t one[] = {fs.field};
            LIBSHARD_RETURN_IF_ERROR(CheckFieldChecksums(i, r, offsets, sizes, region,
                                                         fs.region_offset, fs.region_size, one));
          }
          if (fs.codec == 0) {
            data = CutInPlace(region, fs);
            break;
          }
          std::byte* tensor = decoded + fs.decoded_offset;
          Result<codec::FieldGeometry> g =
              codec::GeometryOf(field.dtype, FieldShape(dims, fs.field), field.seq_dim);
          if (!g.ok()) return g.status().WithContext(Where(i, r));
          Status st = decoder.Decode({region, fs.region_size},
                                     static_cast<codec::CodecId>(fs.codec), *g, g->rows,
                                     {tensor, fs.full_nbytes});
          if (!st.ok())
            return Status::Corruption(Where(i, r) + ": field '" + field.name + "' (" +
                                      std::to_string(fs.region_size) + " bytes at shard offset " +
                                      std::to_string(r.offset + fs.region_offset) + "): " +
                                      st.message() + source() + kRepack);
          data = CutInPlace(tensor, fs);
          break;
        }
        case SliceMode::kRows: {
          const uint64_t rb = fs.token_bytes, rows_total = fs.outer * fs.seq;
          if (fs.check) {  // every block covering the rows (FORMAT.md §3.10.3)
            const uint64_t br = fs.blocks.block_rows;
            uint64_t next = 0;  // blocks before it are checked (runs are in order)
            for (uint64_t o = 0; o < fs.outer; ++o) {
              const uint64_t r0 = o * fs.seq + fs.begin, r1 = o * fs.seq + fs.end;
              for (uint64_t b = std::max(next, r0 / br); b <= (r1 - 1) / br; ++b) {
                const uint64_t a = b * br, z = std::min(rows_total, a + br);
                const uint64_t off = fs.region_offset + a * rb, size = (z - a) * rb;
                LIBSHARD_ASSIGN_OR_RETURN(std::byte* p, bytes_at(fs, off, size));
                const uint64_t actual = format::FieldChecksum(p, size);
                if (actual != fs.blocks.checksums[b])
                  return damaged(fs, rows_text(fs, a, z) + " (row block " + std::to_string(b) +
                                         ")",
                                 off, size, actual, fs.blocks.checksums[b]);
                next = b + 1;
              }
            }
          }
          if (fs.outer == 1) {
            LIBSHARD_ASSIGN_OR_RETURN(
                std::byte* p, bytes_at(fs, fs.region_offset + fs.begin * rb, fs.nbytes));
            if (!Aligned(p)) {  // to the extent's start, 64-byte aligned (slice_plan.cc)
              std::memmove(extents[fs.first_extent], p, fs.nbytes);
              p = extents[fs.first_extent];
            }
            data = p;
          } else {
            const uint64_t run = (fs.end - fs.begin) * rb;
            data = decoded + fs.decoded_offset;
            for (uint64_t o = 0; o < fs.outer; ++o) {
              LIBSHARD_ASSIGN_OR_RETURN(
                  std::byte* p,
                  bytes_at(fs, fs.region_offset + (o * fs.seq + fs.begin) * rb, run));
              std::memcpy(data + o * run, p, run);
            }
          }
          break;
        }
        case SliceMode::kCoded: {
          const auto id = static_cast<codec::CodecId>(fs.codec);
          Result<codec::FieldGeometry> g =
              codec::GeometryOf(field.dtype, FieldShape(dims, fs.field), field.seq_dim);
          if (!g.ok()) return g.status().WithContext(Where(i, r));
          const uint64_t head_size = fs.places.head_size;
          LIBSHARD_ASSIGN_OR_RETURN(std::byte* head, bytes_at(fs, fs.region_offset, head_size));
          const uint64_t br = fs.blocks.block_rows;
          if (fs.check) {
            const uint64_t actual = format::FieldChecksum(head, head_size);
            if (actual != fs.blocks.head_checksum)
              return damaged(fs, "codec region head", fs.region_offset, head_size, actual,
                             fs.blocks.head_checksum);
            uint64_t next = 0;
            for (uint64_t o = 0; o < fs.outer; ++o) {
              const uint64_t r0 = o * fs.seq + fs.begin, r1 = o * fs.seq + fs.end;
              for (uint64_t c = std::max(next, r0 / br); c <= (r1 - 1) / br; ++c) {
                const uint64_t off = fs.region_offset + fs.places.chunk_offset[c];
                const uint64_t size = fs.places.chunk_offset[c + 1] - fs.places.chunk_offset[c];
                LIBSHARD_ASSIGN_OR_RETURN(std::byte* p, bytes_at(fs, off, size));
                const uint64_t actual = format::FieldChecksum(p, size);
                if (actual != fs.blocks.checksums[c])
                  return damaged(fs,
                                 rows_text(fs, c * br, std::min(g->rows, (c + 1) * br)) +
                                     " (chunk " + std::to_string(c) + ")",
                                 off, size, actual, fs.blocks.checksums[c]);
                next = c + 1;
              }
            }
          }
          // The head must agree with the table that placed the chunks (both checked, but
          // written by a writer that may lie): chunk rows, count and sizes, and the head's size.
          auto bad = [&](const std::string& what) {
            return Status::Corruption(Where(i, r) + ": field '" + field.name + "' (" +
                                      std::string(codec::CodecName(id)) + " region of " +
                                      std::to_string(fs.region_size) + " bytes at shard offset " +
                                      std::to_string(r.offset + fs.region_offset) + "): " + what +
                                      source() + kRepack);
          };
          Result<codec::RegionInfo> info =
              codec::ParseRegionHead({head, head_size}, fs.region_size, id, *g);
          if (!info.ok()) return bad(info.status().message());
          if (info->chunks_offset != head_size || info->chunk_rows != br ||
              info->chunk_count != fs.blocks.blocks())
            return bad("its head does not match the index's block table (" +
                       std::to_string(info->chunk_count) + " chunks of " +
                       std::to_string(info->chunk_rows) + " rows, head of " +
                       std::to_string(info->chunks_offset) + " bytes)");
          const std::vector<codec::ChunkPlace> places =
              codec::ChunkPlaces({head, head_size}, *info, *g);
          for (size_t c = 0; c < places.size(); ++c)
            if (places[c].coded_size != fs.blocks.coded_sizes[c])
              return bad("chunk " + std::to_string(c) + "'s coded size " +
                         std::to_string(places[c].coded_size) + " != " +
                         std::to_string(fs.blocks.coded_sizes[c]) + " in the index's block table");
          const uint64_t run = (fs.end - fs.begin) * fs.token_bytes;
          data = decoded + fs.decoded_offset;
          for (uint64_t o = 0; o < fs.outer; ++o) {
            const uint64_t r0 = o * fs.seq + fs.begin, r1 = o * fs.seq + fs.end;
            const uint64_t c0 = r0 / br, c1 = (r1 - 1) / br;
            const uint64_t body_at = fs.places.chunk_offset[c0];
            const uint64_t body_size = fs.places.chunk_offset[c1 + 1] - body_at;
            LIBSHARD_ASSIGN_OR_RETURN(std::byte* body,
                                      bytes_at(fs, fs.region_offset + body_at, body_size));
            Status st = decoder.DecodeRows({head, head_size}, fs.region_size, {body, body_size},
                                           body_at, id, *g, r0, r1, {data + o * run, run});
            if (!st.ok()) return bad(st.message());
          }
          break;
        }
      }
      views.push_back(TensorView{field.name, field.dtype, fs.shape, data, fs.nbytes});
    }
  }
  LIBSHARD_ASSIGN_OR_RETURN(Metadata meta, metadata(i));
  Sample sample(i, std::move(views), std::move(meta), std::move(memory));
  sample.set_rows(plan.rows, plan.length);
  return sample;
}

}  // namespace libshard::internal
