// InferSchema: the schema of a dataset from the tensors of its first sample. The one rule: what
// `libshard pack` infers from its first source file and what libshard.Writer infers from its
// first sample (without a given schema) is the same schema.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/dtype.h"
#include "libshard/sample.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard {

// A tensor as the inference sees it: its name (a dict key), dtype and shape.
struct TensorDescription {
  std::string name;
  DType dtype = DType::kUInt8;
  Shape shape;  // empty for a 0-d tensor
};

// The reference length L: dim 0 of `input_ids` when it is rank 1 (EAGLE-3 dumps), else of
// `token_ids` (vLLM / speculators files) when rank 1, else unknown.
std::optional<uint64_t> InferLength(std::span<const TensorDescription> tensors);

// A field's seq_dim: its unique dim equal to L; on a tie, or when L is unknown, the convention
// decides: rank 1 -> 0, rank >= 2 with a leading 1 (a batch dim, hidden_state [1, L, H]) -> 1,
// rank 2 -> 0, else none (-1). A field with no dim equal to a known L has none (fixed size).
int32_t InferSeqDim(const Shape& shape, std::optional<uint64_t> length);

// The schema: the tensors named in `keep` (all when empty; names not among `tensors` are
// ignored: callers check them with their own wording), in the order of `tensors`, with
// InferSeqDim over InferLength (computed over all `tensors`). length_field = `input_ids` when it
// has a seq_dim, else `token_ids` when it has one, else the first field that has one, else -1.
// Errors name `what` ("source FILE", "sample 'KEY'"): a name that is not UTF-8 (FORMAT.md §3.2),
// a rank over kMaxRank (Unsupported), no tensor at all, or a schema that does not validate.
Result<Schema> InferSchema(std::span<const TensorDescription> tensors,
                           const std::vector<std::string>& keep, std::string_view what);

}  // namespace libshard
