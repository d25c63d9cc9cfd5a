// NeMo AutoModel's offline speculative-decoding caches (the `nemo-automodel` package,
// nemo_automodel/components/datasets/llm/offline_cache.py with eagle3_cache.py and
// dspark_cache.py) as a pack source. Written from reading that public code; none of it is copied.
//
// Layout of the directory:
//   manifest.json  {"format_version": V, "shard_size": B, "num_samples": N, ...the producer's
//                   run configuration (draft_vocab_size, target_probs_topk, selected_token_ids,
//                   ...)}
//   shard-NNNNNN.safetensors  shards 0..ceil(N/B)-1 (six digits), shard k holding samples
//                  [kB, min(N, (k+1)B)); every tensor of a shard is stacked along dim 0, one row
//                  a sample (EAGLE-3: input_ids, attention_mask, loss_mask, aux_hidden_states,
//                  position_mask, and target_probs or its top-k target_probs_values +
//                  target_probs_indices; DSpark: input_ids, loss_mask, target_hidden_states,
//                  target_last_hidden_states)
//   target_embeddings.safetensors / target_weights.safetensors  not samples; left where they are
//
// Sample i is row i % B of every tensor of shard i / B, as the owner's CachedTensorDataset
// slices it (handle.get_slice(key)[offset]): same names, dtypes, shapes (dim 0 dropped) and bytes.
// A top-k cache is packed as stored (values + indices); libshard.automodel rebuilds the full
// target_probs as the owner's reader does. Its key is "<shard file>/<i>", e.g.
// "shard-000003.safetensors/1234".
//
// Checked at open: the manifest's shard_size >= 1 and num_samples, and no "complete": false (the
// mark of a precompute still running or interrupted); the shard files are exactly
// 0..ceil(N/B)-1 (what the owner's validate_contiguous_shards requires); every shard's
// safetensors header (readers/safetensors_source.h); every tensor of shard k has dim 0 equal to
// its row count and every row at least one byte (so N is backed by the files' bytes). And what
// the owner's reader of the cache's layout (EAGLE-3 or DSpark, told by the shards' tensors)
// refuses, so that a cache libshard.automodel would refuse never becomes a dataset: a
// format_version it does not read (EAGLE-3: 2, DSpark: 1); EAGLE-3's draft_vocab_size missing or
// not a positive integer, a target_probs_topk that is not null or an integer; a shard without a
// tensor the reader reads (its disk keys: for EAGLE-3 the full target_probs, or the top-k values
// and indices when 0 < target_probs_topk < draft_vocab_size); a stored distribution whose width
// is not the manifest's (target_probs: draft_vocab_size; values and indices: target_probs_topk).
// Each refusal names the file, the field and both values.
#pragma once

#include <memory>

#include "readers/cache_source.h"

namespace libshard::convert {

Result<std::unique_ptr<CacheSource>> OpenAutoModelCache(std::unique_ptr<CacheDir> dir,
                                                        const SourceOptions& options);

}  // namespace libshard::convert
