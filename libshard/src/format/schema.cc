#include "libshard/schema.h"

#include <string>
#include <unordered_set>

#include "libshard_support/text.h"

namespace libshard {

std::optional<size_t> Schema::Find(std::string_view name) const {
  for (size_t f = 0; f < fields.size(); ++f)
    if (fields[f].name == name) return f;
  return std::nullopt;
}

uint64_t Schema::DimsPerSample() const {
  uint64_t d = 0;
  for (const Field& f : fields) d += f.rank;
  return d;
}

// FORMAT.md §3.2 and §5.
Status Schema::Validate() const {
  if (fields.empty()) return Status::InvalidArgument("schema: a schema needs at least one field");
  if (fields.size() > kMaxFields)
    return Status::InvalidArgument("schema: " + std::to_string(fields.size()) +
                                   " fields exceed the limit of " + std::to_string(kMaxFields));
  std::unordered_set<std::string_view> seen;
  for (size_t k = 0; k < fields.size(); ++k) {
    const Field& f = fields[k];
    std::string where = "schema: field " + std::to_string(k) + " '" + PrintableBytes(f.name) + "'";
    if (f.name.empty() || f.name.size() > kMaxNameBytes)
      return Status::InvalidArgument(where + ": a name must have 1.." +
                                     std::to_string(kMaxNameBytes) + " bytes");
    if (f.name.find('\0') != std::string::npos)
      return Status::InvalidArgument(where + ": a name must not contain a NUL byte");
    if (!IsValidUtf8(f.name))
      return Status::InvalidArgument(where + ": a name must be well-formed UTF-8 (FORMAT.md §3.2)");
    if (!seen.insert(f.name).second)
      return Status::InvalidArgument(where + ": duplicate field name");
    if (!IsValidDType(static_cast<uint32_t>(f.dtype)))
      return Status::InvalidArgument(where + ": invalid dtype code " +
                                     std::to_string(static_cast<uint32_t>(f.dtype)));
    if (f.rank > kMaxRank)
      return Status::InvalidArgument(where + ": rank " + std::to_string(f.rank) +
                                     " exceeds the limit of " + std::to_string(kMaxRank));
    if (f.seq_dim < -1 || (f.seq_dim >= 0 && static_cast<uint32_t>(f.seq_dim) >= f.rank))
      return Status::InvalidArgument(where + ": seq_dim " + std::to_string(f.seq_dim) +
                                     " is not -1 or a dimension of a rank-" +
                                     std::to_string(f.rank) + " tensor");
  }
  if (length_field < -1 || length_field >= static_cast<int64_t>(fields.size()))
    return Status::InvalidArgument("schema: length_field " + std::to_string(length_field) +
                                   " is not -1 or a field index");
  if (length_field >= 0 && fields[length_field].seq_dim < 0)
    return Status::InvalidArgument("schema: length field '" + fields[length_field].name +
                                   "' has no seq_dim");
  return Status::OK();
}

}  // namespace libshard
