// Dataset::Read(i, request): a row-range read (FORMAT.md §3.10), and the defaults of the
// methods it rests on. A dataset that plans slices (PlanSlice: the local DatasetImpl, an s3://
// dataset over its cached copy) has the plan's extents read (pread; an s3:// dataset fetches
// only the cache blocks covering each, healing them on a checksum failure) and finished by
// FinishSlice; one that does not reads the sample whole and cuts it here, so every dataset
// answers the same request with the same tensors.
#include <algorithm>
#include <cstring>

#include "dataset/slice_plan.h"
#include "format/bytes.h"
#include "io/filesystem.h"
#include "remote/shard_filler.h"
#include "libshard/dataset.h"

namespace libshard {
namespace {

constexpr uint64_t kAlign = kTensorAlignment;

// The fields of `request` as indices (every field when it names none).
Result<std::vector<size_t>> RequestFields(const Dataset& d, const ReadRequest& request) {
  std::vector<size_t> out;
  for (const std::string& name : request.fields) {
    std::optional<size_t> f = d.schema().Find(name);
    if (!f)
      return Status::InvalidArgument(d.path() + ": ReadRequest names field '" + name +
                                     "', which is not in the schema");
    out.push_back(*f);
  }
  return out;
}

// Sample i read whole (Read) and cut to `rows` here: the tensors are copied into one buffer.
Result<Sample> CutWholeSample(const Dataset& d, uint64_t i, const std::vector<size_t>& fields,
                              RowRange rows) {
  LIBSHARD_ASSIGN_OR_RETURN(Sample whole, d.Read(i));
  const Schema& schema = d.schema();
  const uint64_t length = d.length(i);
  if (schema.length_field >= 0) {
    rows.start = std::min(rows.start, length);
    rows.stop = std::min(rows.stop, length);
  }
  std::vector<size_t> order = fields;
  if (order.empty())
    for (size_t f = 0; f < schema.fields.size(); ++f) order.push_back(f);
  struct Cut {
    const TensorView* src;
    Shape shape;
    uint64_t outer = 1, seq = 1, token = 0, begin = 0, end = 1, nbytes = 0, at = 0;
  };
  std::vector<Cut> cuts;
  uint64_t total = 0;
  for (size_t f : order) {
    const Field& field = schema.fields[f];
    Cut c;
    c.src = whole.Find(field.name);
    if (c.src == nullptr) return Status::Internal("Read returned no tensor '" + field.name + "'");
    c.shape = c.src->shape;
    c.token = c.src->nbytes;
    if (field.seq_dim >= 0) {
      const auto s = static_cast<size_t>(field.seq_dim);
      c.outer = 1;
      for (size_t k = 0; k < s; ++k) c.outer *= c.shape[k];
      c.seq = c.shape[s];
      c.token = DTypeSize(field.dtype);
      for (size_t k = s + 1; k < c.shape.size(); ++k) c.token *= c.shape[k];
      c.begin = std::min(rows.start, c.seq);
      c.end = std::min(rows.stop, c.seq);
      c.shape[s] = c.end - c.begin;
    }
    c.nbytes = c.outer * (c.end - c.begin) * c.token;
    c.at = format::AlignUp(total, kAlign);
    total = c.at + c.nbytes;
    cuts.push_back(std::move(c));
  }
  std::shared_ptr<std::byte[]> buffer = internal::AllocateAligned(std::max<uint64_t>(total, 1), kAlign);
  if (!buffer)
    return Status::ResourceExhausted(d.path() + ": sample " + std::to_string(i) +
                                     ": cannot allocate " + std::to_string(total) + " bytes");
  std::vector<TensorView> views;
  for (const Cut& c : cuts) {
    const uint64_t run = (c.end - c.begin) * c.token;
    for (uint64_t o = 0; o < c.outer; ++o)
      if (run > 0)
        std::memcpy(buffer.get() + c.at + o * run, c.src->data + (o * c.seq + c.begin) * c.token,
                    run);
    views.push_back(TensorView{c.src->name, c.src->dtype, c.shape, buffer.get() + c.at, c.nbytes});
  }
  Sample out(i, std::move(views), whole.metadata(),
             std::shared_ptr<const void>(buffer, buffer.get()));
  out.set_rows(rows, length);
  return out;
}

}  // namespace

Result<Sample> Dataset::Read(uint64_t i, const ReadRequest& request) const {
  if (i >= size())
    return Status::InvalidArgument(path() + ": sample " + std::to_string(i) +
                                   " out of range (dataset has " + std::to_string(size()) +
                                   " samples)");
  if (!request.rows && request.fields.empty()) return Read(i);  // the whole sample: one read
  LIBSHARD_ASSIGN_OR_RETURN(std::vector<size_t> fields, RequestFields(*this, request));
  const RowRange rows = request.rows.value_or(RowRange{});
  if (rows.start > rows.stop)
    return Status::InvalidArgument(path() + ": sample " + std::to_string(i) + ": row range [" +
                                   std::to_string(rows.start) + ", " + std::to_string(rows.stop) +
                                   ") has its start past its stop");
  Result<std::shared_ptr<const internal::SlicePlan>> planned =
      PlanSlice(i, fields, rows, checks_reads());
  if (!planned.ok() && planned.status().code() == StatusCode::kUnsupported)
    return CutWholeSample(*this, i, fields, rows);
  if (!planned.ok()) return planned.status();
  const internal::SlicePlan& plan = **planned;
  // One buffer: each extent at an address congruent to its stored offset modulo 4096 (so modulo
  // 64, as FinishSlice needs), then the decode buffer.
  std::vector<uint64_t> at(plan.extents.size());
  uint64_t total = 0;
  for (size_t k = 0; k < plan.extents.size(); ++k) {
    const internal::SliceExtent& e = plan.extents[k];
    at[k] = format::AlignUp(total, kSampleAlignment) + e.offset % kSampleAlignment;
    total = at[k] + e.size;
  }
  const uint64_t decoded_at = format::AlignUp(total, kAlign);
  total = decoded_at + plan.decoded_bytes;
  std::shared_ptr<std::byte[]> buffer =
      internal::AllocateAligned(std::max<uint64_t>(total, 1), kSampleAlignment);
  if (!buffer)
    return Status::ResourceExhausted(path() + ": sample " + std::to_string(i) +
                                     ": cannot allocate " + std::to_string(total) + " bytes");
  std::vector<std::byte*> extents(plan.extents.size());
  for (size_t k = 0; k < plan.extents.size(); ++k) extents[k] = buffer.get() + at[k];
  const auto read = [&]() -> Result<Sample> {
    for (size_t k = 0; k < plan.extents.size(); ++k)
      LIBSHARD_RETURN_IF_ERROR(
          ReadStoredRange(i, plan.extents[k].offset, plan.extents[k].size, extents[k]));
    return FinishSlice(plan, extents, plan.decoded_bytes > 0 ? buffer.get() + decoded_at : nullptr,
                       std::shared_ptr<const void>(buffer, buffer.get()));
  };
  Result<Sample> out = read();
  ShardFiller* const filler = shard_filler();
  if (out.ok() || out.status().code() != StatusCode::kCorruption || filler == nullptr) return out;
  // An s3:// dataset: the cached blocks under the extents are fetched again and the extents read
  // and checked again (docs/CACHE.md §7); a second failure blames the bucket's object.
  uint64_t begin = UINT64_MAX, end = 0;
  for (const internal::SliceExtent& e : plan.extents)
    if (e.size > 0) {
      begin = std::min(begin, e.offset);
      end = std::max(end, e.offset + e.size);
    }
  if (begin >= end) return out;
  LIBSHARD_ASSIGN_OR_RETURN(const SampleLocation loc, Locate(i));
  Result<Sample> again = out.status();
  LIBSHARD_RETURN_IF_ERROR(filler->Heal(loc.shard, loc.offset + begin, end - begin, out.status(),
                                        nullptr, [&] {
                                          again = read();
                                          return again.status();
                                        }));
  return again;
}

Result<std::shared_ptr<const internal::SlicePlan>> Dataset::PlanSlice(uint64_t, std::span<const size_t>,
                                                                      RowRange, bool) const {
  return Status::Unsupported(path() + ": this dataset does not plan row-range reads");
}

Result<Sample> Dataset::FinishSlice(const internal::SlicePlan&, std::span<std::byte* const>,
                                    std::byte*, std::shared_ptr<const void>) const {
  return Status::Unsupported(path() + ": this dataset does not plan row-range reads");
}

Status Dataset::ReadStoredRange(uint64_t, uint64_t, uint64_t, std::byte*) const {
  return Status::Unsupported(path() + ": this dataset does not read stored ranges");
}

Status Dataset::ComputeChecks(uint64_t i, std::vector<uint64_t>* field_checksums,
                              std::string* block_table) const {
  LIBSHARD_ASSIGN_OR_RETURN(*field_checksums, ComputeFieldChecksums(i));
  block_table->clear();
  return Status::Unsupported(path() + ": this dataset does not compute block tables");
}

}  // namespace libshard
