// Dataset attributes: what produced a dataset (the contract between the generator of hidden
// states and the trainer), recorded by its writer in the manifest (docs/FORMAT.md §2.2,
// `provenance.attributes`): e.g. target_model, hidden_state_layer_ids, aux_hidden_state_layer_ids,
// hidden_size, tokenizer. Free-form; values are strings or integers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

#include "libshard/status.h"

namespace libshard {

using AttributeValue = std::variant<int64_t, std::string>;
using Attributes = std::map<std::string, AttributeValue>;  // ordered by key

// The value as text: an integer in decimal, a string as is.
std::string AttributeText(const AttributeValue& value);
// "key=value, key=value" (in key order), for messages and `libshard info`.
std::string AttributesText(const Attributes& attributes);

// Checks every key of `expected` against `actual`: InvalidArgument naming `what` (the dataset
// or part), the key, both values and what to do when a key is missing or differs. Keys of
// `actual` that `expected` does not name are not checked.
[[nodiscard]] Status CheckAttributes(const Attributes& actual, const Attributes& expected,
                                     const std::string& what);

// Keys 1..256 bytes without NUL, at most 256 attributes, string values at most 64 KiB, keys and
// string values well-formed UTF-8 (the manifest's JSON holds them; InvalidArgument).
[[nodiscard]] Status ValidateAttributes(const Attributes& attributes);

}  // namespace libshard
