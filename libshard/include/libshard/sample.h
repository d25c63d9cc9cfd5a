// What goes into a dataset (SampleInput) and what comes out (Sample: zero-copy tensor views).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "libshard/dtype.h"
#include "libshard/sequence_parallel.h"  // SequenceSlice
#include "libshard/status.h"

namespace libshard {

using Shape = std::vector<uint64_t>;

// Number of elements of `shape` (1 for a scalar), or nullopt-like UINT64_MAX on overflow.
uint64_t NumElements(std::span<const uint64_t> shape);

// Small per-sample metadata (a conversation id, a score, a flag). Kept in order of insertion.
using MetaValue = std::variant<bool, int64_t, double, std::string>;
struct MetaEntry {
  std::string key;
  MetaValue value;
  bool operator==(const MetaEntry&) const = default;
};
using Metadata = std::vector<MetaEntry>;

// The file a sample came from (docs/FORMAT.md §3.4, the per-sample provenance): its path is the
// sample's key. "Provenance" alone is the dataset's (DatasetProvenance, Dataset::provenance()).
struct SourceFileInfo {
  std::string path;           // relative to the source root, '/'-separated, UTF-8
  uint64_t size = 0;          // bytes of the source file
  int64_t mtime_ns = 0;       // modification time of the source file, ns since the epoch
  uint64_t content_hash = 0;  // xxh3-64 of the source file's bytes (0 = not computed)
  bool operator==(const SourceFileInfo&) const = default;
};
// The former name of SourceFileInfo.
using Provenance = SourceFileInfo;

// One tensor handed to Writer. Exactly one of `data` and `fill` is set (an empty tensor may have
// neither).
struct TensorInput {
  std::string name;
  DType dtype = DType::kUInt8;
  Shape shape;
  // C-contiguous bytes, NumElements(shape) * DTypeSize(dtype) long; must stay valid for the call.
  const void* data = nullptr;
  // Called once with a destination of exactly the tensor's byte size; writes the C-contiguous
  // bytes there (lets a reader read straight into the writer's aligned buffer: one copy).
  std::function<Status(std::span<std::byte> dst)> fill;
};

struct SampleInput {
  std::vector<TensorInput> tensors;  // matched to the schema's fields by name; all must be present
  Metadata metadata;
  SourceFileInfo source;
};

// Rows [start, stop) along the sequence dimension (Field::seq_dim) of every field that has one:
// the token slice a sequence-parallel rank reads, or a prefix (Dataset::Read with a
// ReadRequest, FORMAT.md §3.10). A field's rows past its own length are not there: a range is
// clipped to each field's length (a range wholly past the end gives empty tensors).
struct RowRange {
  static constexpr uint64_t kEnd = UINT64_MAX;
  uint64_t start = 0;
  uint64_t stop = kEnd;  // exclusive; kEnd: to the end
  bool operator==(const RowRange&) const = default;
};

// A read-only view of one tensor of a sample. `data` is at least 64-byte aligned.
struct TensorView {
  std::string_view name;  // valid while the Dataset lives
  DType dtype = DType::kUInt8;
  Shape shape;
  const std::byte* data = nullptr;
  uint64_t nbytes = 0;
};

// One sample: tensor views over memory that the Sample keeps alive (an owned aligned buffer or a
// loader arena slot). Copies share that memory; it is released when the last copy (and every
// holder obtained from memory_owner()) is gone. Thread-compatible.
class Sample {
 public:
  Sample() = default;
  Sample(uint64_t index, std::vector<TensorView> tensors, Metadata metadata,
         std::shared_ptr<const void> memory)
      : index_(index), tensors_(std::move(tensors)), metadata_(std::move(metadata)),
        memory_(std::move(memory)) {}

  // Position of the sample in its dataset.
  uint64_t index() const { return index_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // The tensor named `name`, or nullptr.
  const TensorView* Find(std::string_view name) const;
  const Metadata& metadata() const { return metadata_; }
  // Holding a copy keeps every tensor's memory valid (used by the Python and LibTorch adapters).
  const std::shared_ptr<const void>& memory_owner() const { return memory_; }
  // The sample's length (its length field's rows, Dataset::length; 0 without a length field),
  // also when only some of its rows were read, so that positions stay global.
  uint64_t length() const { return length_; }
  // The rows served along every sequence field's seq_dim: [0, length()) for a whole read,
  // [0, max_len) for a loader's max_len cut, the requested range clipped to length() for a
  // row-range read (Dataset::Read with ReadRequest::rows): tensor row k is sample row
  // rows().start + k.
  RowRange rows() const { return rows_; }
  // Set by the readers that make the Sample (a loader adds its dataset, so that the tensors'
  // names, which live in the dataset's schema, last as long as the sample).
  void set_memory_owner(std::shared_ptr<const void> memory) { memory_ = std::move(memory); }
  void set_rows(RowRange rows, uint64_t length) {
    rows_ = rows;
    length_ = length;
  }
  // A sequence-parallel loader's sample (LoaderOptions::sequence_parallel): the slice of the
  // rank that read it, by its group's split rule. The sequence fields' tensors hold rows
  // [slice.start, slice.stop) of the sample (rows() says the same); the trainer's tensors are
  // slice.pad_to rows (zeros after the rows read), its positions start at slice.offset, of
  // slice.full_length rows in all. sp_size 0: not a sequence-parallel sample.
  struct SequenceParallelSlice {
    uint32_t sp_size = 0;
    uint32_t sp_rank = 0;
    SplitRule rule = SplitRule::kEven;
    SequenceSlice slice;
  };
  const SequenceParallelSlice& sequence_slice() const { return sp_; }
  bool has_sequence_slice() const { return sp_.sp_size > 0; }
  void set_sequence_slice(const SequenceParallelSlice& sp) { sp_ = sp; }

 private:
  uint64_t index_ = 0;
  std::vector<TensorView> tensors_;
  Metadata metadata_;
  std::shared_ptr<const void> memory_;
  RowRange rows_{0, 0};
  uint64_t length_ = 0;
  SequenceParallelSlice sp_;
};

}  // namespace libshard
