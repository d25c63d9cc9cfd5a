// LayerSplitSource: a source whose stacked-layer tensor is presented as EAGLE-3's two fields.
//
// vLLM's hidden-states extraction (and speculators' `hs_{i}.safetensors`) stores the captured
// layers of one request stacked as one tensor `[L, K, H]`: K-1 auxiliary layers, then the last
// layer. EAGLE-3 trainers (SpecForge's layout) want `aux_hidden_state` `[1, L, (K-1)*H]` (the aux
// layers of each token concatenated in order) and `hidden_state` `[1, L, H]` (the last layer).
// This wrapper replaces the tensor named `name` by those two, at its position, with bytes equal to
// `x[:, :-1].reshape(L, -1)[None]` and `x[:, -1][None]`; every other tensor and the metadata pass
// through unchanged.
#pragma once

#include <memory>
#include <string>

#include "readers/source_file.h"

namespace libshard::convert {

inline constexpr char kSplitAuxName[] = "aux_hidden_state";
inline constexpr char kSplitLastName[] = "hidden_state";

// Wraps `inner`. InvalidArgument naming the file when `name` is missing, is not rank 3 with
// K >= 2 layers, or when the file already has a tensor named like one of the outputs.
Result<std::unique_ptr<SourceFile>> SplitLayers(std::unique_ptr<SourceFile> inner,
                                                const std::string& name);

}  // namespace libshard::convert
