// DatasetAccess: the loader's plumbing on a Dataset (its private virtuals, libshard/dataset.h),
// kept out of the public API. The streaming loader (loader/) and the tests call these; they
// forward to the dataset's implementation (dataset/dataset_impl.h, remote/remote_dataset_impl.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "libshard/dataset.h"

namespace libshard::internal {

class DatasetAccess {
 public:
  // Non-null for an s3:// dataset: call its Ensure before reading its shard files directly.
  static ShardFiller* shard_filler(const Dataset& d) { return d.shard_filler(); }
  // Checks the field checksums of `fields` (all when empty) of sample i against stored bytes
  // [base_offset, base_offset + base_size) held at `base` (Dataset::VerifyFields).
  static Status VerifyFields(const Dataset& d, uint64_t i, const std::byte* base,
                             uint64_t base_offset, uint64_t base_size,
                             std::span<const size_t> fields) {
    return d.VerifyFields(i, base, base_offset, base_size, fields);
  }
  // Per field, where sample i's stored region lies within its stored bytes.
  static Status FieldRegions(const Dataset& d, uint64_t i, std::vector<uint64_t>* offsets,
                             std::vector<uint64_t>* sizes) {
    return d.FieldRegions(i, offsets, sizes);
  }
  // Decodes sample i's stored bytes (exactly location(i).stored_size) into `raw`.
  static Status Decode(const Dataset& d, uint64_t i, std::span<const std::byte> stored,
                       std::span<std::byte> raw) {
    return d.Decode(i, stored, raw);
  }
  // Decode of what a reader of `fields` (all when empty) cut to `max_len` rows (0: all) uses.
  static Status DecodeSelected(const Dataset& d, uint64_t i, std::span<const std::byte> stored,
                               std::span<std::byte> raw, std::span<const size_t> fields,
                               uint64_t max_len) {
    return d.DecodeSelected(i, stored, raw, fields, max_len);
  }
  // Row-range reads (FORMAT.md §3.10, dataset/slice_plan.h): the plan of a read of `fields`
  // (all when empty) cut to `rows`, checked when `verify`; then its Sample from the extents read.
  static Result<std::shared_ptr<const SlicePlan>> PlanSlice(const Dataset& d, uint64_t i,
                                                            std::span<const size_t> fields,
                                                            RowRange rows, bool verify) {
    return d.PlanSlice(i, fields, rows, verify);
  }
  static Result<Sample> FinishSlice(const Dataset& d, const SlicePlan& plan,
                                    std::span<std::byte* const> extents, std::byte* decoded,
                                    std::shared_ptr<const void> memory) {
    return d.FinishSlice(plan, extents, decoded, std::move(memory));
  }
  // `size` bytes at `offset` of sample i's stored extent into `dst` (for s3://: through the cache).
  static Status ReadStoredRange(const Dataset& d, uint64_t i, uint64_t offset, uint64_t size,
                                std::byte* dst) {
    return d.ReadStoredRange(i, offset, size, dst);
  }
  // Sample i's block table as the index stores it; nullopt without row blocks (merge, append).
  static Result<std::optional<std::string>> BlockTableBytes(const Dataset& d, uint64_t i) {
    return d.BlockTableBytes(i);
  }
  // Sample i read whole and checked, its field checksums and block table computed (upgrade).
  static Status ComputeChecks(const Dataset& d, uint64_t i, std::vector<uint64_t>* sums,
                              std::string* table) {
    return d.ComputeChecks(i, sums, table);
  }
  // A Sample of views over decoded payload bytes kept alive by `memory` (Dataset::MakeSample).
  static Result<Sample> MakeSample(const Dataset& d, uint64_t i, const std::byte* base,
                                   uint64_t base_offset, uint64_t base_size,
                                   std::shared_ptr<const void> memory,
                                   std::span<const size_t> fields = {}) {
    return d.MakeSample(i, base, base_offset, base_size, std::move(memory), fields);
  }
};

}  // namespace libshard::internal
