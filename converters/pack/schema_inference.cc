#include "pack/schema_inference.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "libshard_support/text.h"

namespace libshard::convert {
namespace {

int32_t ConventionalSeqDim(const Shape& shape) {
  if (shape.size() == 1) return 0;
  if (shape.size() >= 2 && shape[0] == 1) return 1;
  if (shape.size() == 2) return 0;
  return -1;
}

int32_t ChooseSeqDim(const Shape& shape, std::optional<uint64_t> length) {
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

}  // namespace

namespace {

std::string Printable(std::string_view s) { return PrintableBytes(s, 200); }

std::string KeyList(const std::vector<SourceTensor>& tensors) {
  std::string out;
  for (const auto& t : tensors) out += (out.empty() ? "" : ", ") + Printable(t.name);
  return out.empty() ? "(no tensors)" : out;
}

}  // namespace

std::string ShapeString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Result<ReferenceSchema> InferSchema(const std::vector<SourceTensor>& tensors,
                                    const std::vector<std::string>& keep,
                                    const std::string& file) {
  ReferenceSchema ref;
  ref.file = file;
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) by_name.emplace(tensors[i].name, i);
  for (const std::string& k : keep) {
    if (!by_name.count(k)) {
      return Status::InvalidArgument("--fields names '" + k + "', but the first source " + file +
                                     " has no such tensor; its tensors are: " + KeyList(tensors));
    }
  }
  std::optional<uint64_t> length;
  // The token ids give the reference length: `input_ids` (SpecForge, ModelOpt), else `token_ids`
  // (vLLM's and speculators' hidden-states files).
  for (const char* ids : {"input_ids", "token_ids"}) {
    if (auto it = by_name.find(ids); it != by_name.end() && tensors[it->second].shape.size() == 1) {
      length = tensors[it->second].shape[0];
      break;
    }
  }
  for (const SourceTensor& t : tensors) {
    if (!keep.empty() && std::find(keep.begin(), keep.end(), t.name) == keep.end()) continue;
    // Field names are UTF-8 (FORMAT.md §3.2); they are also JSON strings of the manifest, where
    // other bytes cannot be represented (a writer would have to replace them, and the manifest's
    // schema would then disagree with the index's).
    if (!IsValidUtf8(t.name)) {
      return Status::InvalidArgument("source " + file + ": tensor name '" + Printable(t.name) +
                                     "' is not valid UTF-8; dataset field names must be UTF-8 "
                                     "(FORMAT.md §3.2): rename the key (e.g. decode it with "
                                     "errors='replace') before torch.save");
    }
    if (t.shape.size() > kMaxRank) {
      return Status::Unsupported("source " + file + ": tensor '" + t.name + "' has rank " +
                                 std::to_string(t.shape.size()) + "; at most " +
                                 std::to_string(kMaxRank) + " is supported");
    }
    Field f;
    f.name = t.name;
    f.dtype = t.dtype;
    f.rank = static_cast<uint32_t>(t.shape.size());
    f.seq_dim = ChooseSeqDim(t.shape, length);
    ref.schema.fields.push_back(std::move(f));
    ref.shapes.push_back(t.shape);
  }
  if (ref.schema.fields.empty()) {
    return Status::InvalidArgument("the first source " + file +
                                   " has no tensors to pack; every sample needs at least one");
  }
  ref.schema.length_field = -1;
  if (auto i = ref.schema.Find("input_ids"); i && ref.schema.fields[*i].seq_dim >= 0) {
    ref.schema.length_field = static_cast<int32_t>(*i);
  } else if (auto k = ref.schema.Find("token_ids"); k && ref.schema.fields[*k].seq_dim >= 0) {
    ref.schema.length_field = static_cast<int32_t>(*k);
  } else {
    for (size_t i = 0; i < ref.schema.fields.size(); ++i) {
      if (ref.schema.fields[i].seq_dim >= 0) {
        ref.schema.length_field = static_cast<int32_t>(i);
        break;
      }
    }
  }
  LIBSHARD_RETURN_IF_ERROR(ref.schema.Validate().WithContext("schema of the first source " + file));
  return ref;
}

Result<ReferenceSchema> ReferenceFromSchema(const Schema& schema,
                                            const std::vector<SourceTensor>& tensors,
                                            const std::string& file, bool allow_extra_tensors) {
  ReferenceSchema ref;
  ref.schema = schema;
  ref.file = "the existing dataset";
  ref.shapes.resize(schema.fields.size());
  // Shapes are not yet known: match dtypes and ranks only, then adopt this file's shapes.
  LIBSHARD_ASSIGN_OR_RETURN(std::vector<size_t> map,
                            MatchSchema(ref, tensors, file, allow_extra_tensors, true));
  for (size_t f = 0; f < map.size(); ++f) ref.shapes[f] = tensors[map[f]].shape;
  ref.file = file;
  return ref;
}

Result<std::vector<size_t>> MatchSchema(const ReferenceSchema& ref,
                                        const std::vector<SourceTensor>& tensors,
                                        const std::string& file, bool allow_extra_tensors,
                                        bool allow_varying_dims) {
  const auto mismatch = [&](const std::string& what) {
    return Status::InvalidArgument("schema mismatch in " + file + ": " + what + " (the schema comes from " +
                                   ref.file + "); fix or remove the file, or pass --on-error skip");
  };
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) by_name.emplace(tensors[i].name, i);
  std::vector<size_t> map(ref.schema.fields.size());
  for (size_t f = 0; f < ref.schema.fields.size(); ++f) {
    const Field& field = ref.schema.fields[f];
    auto it = by_name.find(field.name);
    if (it == by_name.end()) {
      return mismatch("tensor '" + field.name + "' is missing; this file has: " + KeyList(tensors));
    }
    const SourceTensor& t = tensors[it->second];
    if (t.dtype != field.dtype) {
      return mismatch("tensor '" + field.name + "' is " + std::string(DTypeName(t.dtype)) +
                      ", expected " + std::string(DTypeName(field.dtype)));
    }
    if (t.shape.size() != field.rank) {
      return mismatch("tensor '" + field.name + "' has rank " + std::to_string(t.shape.size()) +
                      " (shape " + ShapeString(t.shape) + "), expected rank " +
                      std::to_string(field.rank) +
                      (ref.shapes[f].size() == field.rank ? " (shape " + ShapeString(ref.shapes[f]) + ")" : ""));
    }
    if (!allow_varying_dims) {
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (static_cast<int32_t>(d) == field.seq_dim) continue;
        if (t.shape[d] != ref.shapes[f][d]) {
          return mismatch("tensor '" + field.name + "' has shape " + ShapeString(t.shape) + ", " +
                          ShapeString(ref.shapes[f]) + " expected: dim " + std::to_string(d) +
                          " differs but only the sequence dim (" +
                          (field.seq_dim < 0 ? std::string("none") : std::to_string(field.seq_dim)) +
                          ") may vary; pass --allow-varying-dims to accept it");
        }
      }
    }
    map[f] = it->second;
  }
  if (!allow_extra_tensors && tensors.size() != ref.schema.fields.size()) {
    for (const SourceTensor& t : tensors) {
      if (!ref.schema.Find(t.name)) {
        return mismatch("tensor '" + Printable(t.name) +
                        "' is not in the schema; pass --fields to select tensors");
      }
    }
    return mismatch("duplicate tensor names");
  }
  return map;
}

}  // namespace libshard::convert
