// The schema of a pack job: inferred from the first source, checked on every other one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/schema.h"
#include "libshard/status.h"
#include "pack/pack.h"
#include "readers/source_file.h"

namespace libshard::convert {

// The schema plus the shapes of the file it was taken from: what every other source is compared
// against.
struct ReferenceSchema {
  Schema schema;
  std::vector<Shape> shapes;  // per schema field, from `file`
  std::string file;           // relative path of the reference source
};

// Builds the schema from the tensors of the first source with the library's rule
// (libshard::InferSchema, libshard/schema_inference.h: the one libshard.Writer uses). `keep` (may
// be empty = all) selects and must name existing tensors (--fields). Field order is the file's
// (dict) order.
Result<ReferenceSchema> InferSchema(const std::vector<SourceTensor>& tensors,
                                    const std::vector<std::string>& keep,
                                    const std::string& file,
                                    OptionSpelling spelling = OptionSpelling::kCli);

// Reference for a dataset that already has a schema (--resume, --append): `schema` is
// authoritative, `tensors` (of the first source of this run) gives the reference shapes and must
// match it.
Result<ReferenceSchema> ReferenceFromSchema(const Schema& schema,
                                            const std::vector<SourceTensor>& tensors,
                                            const std::string& file, bool allow_extra_tensors,
                                            OptionSpelling spelling = OptionSpelling::kCli);

// Checks `tensors` of source `file` against `ref`; returns, per schema field, the index of the
// matching tensor. Errors (InvalidArgument) name the file, the field and the difference: a
// missing or extra key (extra only matters when `allow_extra_tensors` is false, i.e. no
// --fields), a dtype or rank change, or a size change in any dim other than the field's seq_dim
// unless `allow_varying_dims`.
Result<std::vector<size_t>> MatchSchema(const ReferenceSchema& ref,
                                        const std::vector<SourceTensor>& tensors,
                                        const std::string& file, bool allow_extra_tensors,
                                        bool allow_varying_dims,
                                        OptionSpelling spelling = OptionSpelling::kCli);

// "[1, 128, 64]"
std::string ShapeString(const Shape& shape);

}  // namespace libshard::convert
