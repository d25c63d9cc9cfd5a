// InferSchema (libshard/schema_inference.h).
#include "libshard/schema_inference.h"

#include <algorithm>

#include "libshard_support/text.h"

namespace libshard {
namespace {

int32_t ConventionalSeqDim(const Shape& shape) {
  if (shape.size() == 1) return 0;
  if (shape.size() >= 2 && shape[0] == 1) return 1;
  if (shape.size() == 2) return 0;
  return -1;
}

}  // namespace

std::optional<uint64_t> InferLength(std::span<const TensorDescription> tensors) {
  // The token ids give the reference length: `input_ids` (SpecForge, ModelOpt), else
  // `token_ids` (vLLM's and speculators' hidden-states files). The first tensor of a name counts.
  for (const char* ids : {"input_ids", "token_ids"}) {
    auto it = std::find_if(tensors.begin(), tensors.end(),
                           [&](const TensorDescription& t) { return t.name == ids; });
    if (it != tensors.end() && it->shape.size() == 1) return it->shape[0];
  }
  return std::nullopt;
}

int32_t InferSeqDim(const Shape& shape, std::optional<uint64_t> length) {
  if (shape.empty()) return -1;
  const int32_t conventional = ConventionalSeqDim(shape);
  if (!length) return conventional;
  std::vector<int32_t> candidates;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] == *length) candidates.push_back(static_cast<int32_t>(d));
  if (candidates.empty()) return -1;
  if (candidates.size() == 1) return candidates[0];
  for (int32_t c : candidates)
    if (c == conventional) return c;
  return candidates[0];
}

Result<Schema> InferSchema(std::span<const TensorDescription> tensors,
                           const std::vector<std::string>& keep, std::string_view what) {
  const std::string where(what);
  const std::optional<uint64_t> length = InferLength(tensors);
  Schema schema;
  for (const TensorDescription& t : tensors) {
    if (!keep.empty() && std::find(keep.begin(), keep.end(), t.name) == keep.end()) continue;
    // Field names are UTF-8 (FORMAT.md §3.2); they are also JSON strings of the manifest, where
    // other bytes cannot be represented (a writer would have to replace them, and the manifest's
    // schema would then disagree with the index's).
    if (!IsValidUtf8(t.name)) {
      return Status::InvalidArgument(where + ": tensor name '" + PrintableBytes(t.name, 200) +
                                     "' is not valid UTF-8; dataset field names must be UTF-8 "
                                     "(FORMAT.md §3.2): rename the key (e.g. decode it with "
                                     "errors='replace') before torch.save");
    }
    if (t.shape.size() > kMaxRank) {
      return Status::Unsupported(where + ": tensor '" + t.name + "' has rank " +
                                 std::to_string(t.shape.size()) + "; at most " +
                                 std::to_string(kMaxRank) + " is supported");
    }
    Field f;
    f.name = t.name;
    f.dtype = t.dtype;
    f.rank = static_cast<uint32_t>(t.shape.size());
    f.seq_dim = InferSeqDim(t.shape, length);
    schema.fields.push_back(std::move(f));
  }
  if (schema.fields.empty())
    return Status::InvalidArgument(where + " has no tensors; every sample needs at least one");
  schema.length_field = -1;
  if (auto i = schema.Find("input_ids"); i && schema.fields[*i].seq_dim >= 0) {
    schema.length_field = static_cast<int32_t>(*i);
  } else if (auto k = schema.Find("token_ids"); k && schema.fields[*k].seq_dim >= 0) {
    schema.length_field = static_cast<int32_t>(*k);
  } else {
    for (size_t i = 0; i < schema.fields.size(); ++i) {
      if (schema.fields[i].seq_dim >= 0) {
        schema.length_field = static_cast<int32_t>(i);
        break;
      }
    }
  }
  LIBSHARD_RETURN_IF_ERROR(schema.Validate().WithContext("schema of " + where));
  return schema;
}

}  // namespace libshard
