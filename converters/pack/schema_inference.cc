#include "pack/schema_inference.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "libshard/schema_inference.h"
#include "libshard_support/text.h"
#include "pack/option_parsing.h"

namespace libshard::convert {

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
                                    const std::string& file, OptionSpelling spelling) {
  ReferenceSchema ref;
  ref.file = file;
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) by_name.emplace(tensors[i].name, i);
  for (const std::string& k : keep) {
    if (!by_name.count(k)) {
      return Status::InvalidArgument(PackOptionName("fields", spelling) + " names '" + k +
                                     "', but the first source " + file +
                                     " has no such tensor; its tensors are: " + KeyList(tensors));
    }
  }
  // The library's one rule (libshard/schema_inference.h), which libshard.Writer uses too.
  std::vector<TensorDescription> described;
  described.reserve(tensors.size());
  for (const SourceTensor& t : tensors) described.push_back(TensorDescription{t.name, t.dtype, t.shape});
  LIBSHARD_ASSIGN_OR_RETURN(ref.schema,
                            ::libshard::InferSchema(described, keep, "source " + file));
  for (const Field& f : ref.schema.fields) ref.shapes.push_back(tensors[by_name.at(f.name)].shape);
  return ref;
}

Result<ReferenceSchema> ReferenceFromSchema(const Schema& schema,
                                            const std::vector<SourceTensor>& tensors,
                                            const std::string& file, bool allow_extra_tensors,
                                            OptionSpelling spelling) {
  ReferenceSchema ref;
  ref.schema = schema;
  ref.file = "the existing dataset";
  ref.shapes.resize(schema.fields.size());
  // Shapes are not yet known: match dtypes and ranks only, then adopt this file's shapes.
  LIBSHARD_ASSIGN_OR_RETURN(std::vector<size_t> map,
                            MatchSchema(ref, tensors, file, allow_extra_tensors, true, spelling));
  for (size_t f = 0; f < map.size(); ++f) ref.shapes[f] = tensors[map[f]].shape;
  ref.file = file;
  return ref;
}

Result<std::vector<size_t>> MatchSchema(const ReferenceSchema& ref,
                                        const std::vector<SourceTensor>& tensors,
                                        const std::string& file, bool allow_extra_tensors,
                                        bool allow_varying_dims, OptionSpelling spelling) {
  const auto flag = [spelling](std::string_view n) { return PackOptionName(n, spelling); };
  const auto mismatch = [&](const std::string& what) {
    return Status::InvalidArgument("schema mismatch in " + file + ": " + what + " (the schema comes from " +
                                   ref.file + "); fix or remove the file, or pass " +
                                   flag("on_error") + " skip");
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
                          ") may vary; pass " + flag("allow_varying_dims") + " to accept it");
        }
      }
    }
    map[f] = it->second;
  }
  if (!allow_extra_tensors && tensors.size() != ref.schema.fields.size()) {
    for (const SourceTensor& t : tensors) {
      if (!ref.schema.Find(t.name)) {
        return mismatch("tensor '" + Printable(t.name) +
                        "' is not in the schema; pass " + flag("fields") + " to select tensors");
      }
    }
    return mismatch("duplicate tensor names");
  }
  return map;
}

}  // namespace libshard::convert
