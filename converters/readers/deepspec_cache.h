// DeepSpec's target cache (deepseek-ai/DeepSpec, deepspec/data/target_cache_dataset.py, cache
// version 2) as a pack source. Written from reading that public code; none of it is copied.
//
// Layout of the directory:
//   manifest.json  {"version": 2, "num_samples": N, "num_shards": S, "target_layer_ids": [..],
//                   "hidden_dtype": "bfloat16" | "float8_e4m3fn" | "float8_e5m2",
//                   "token_dtype": "int32", "mask_dtype": "uint8", "index_record_size": 56,
//                   "hidden_size": H, "shards": [{"shard_id": k, "file_name": "shard-kkkkk.bin"}],
//                   ...the producer's extra keys (target_model_name_or_path, ...)}
//   samples.idx    N records of 56 bytes, little-endian "<QIIQQQQQ": sample_id (== its record
//                  number), shard_id, seq_len L, and the byte offsets in that shard of
//                  input_ids, attention_mask, loss_mask, target_hidden_states,
//                  target_last_hidden_states
//   shard-NNNNN.bin  the tensors' raw bytes, C order, at those offsets
//
// Sample i is served as the tensors DeepSpec's CacheDataset reads, under its names, plus the
// attention_mask it stores: input_ids int32 [L], attention_mask uint8 [L], loss_mask uint8 [L],
// target_hidden_states [L, K*H], target_last_hidden_states [L, H] (K = len(target_layer_ids)),
// the hidden states in the cache's hidden_dtype (its fp8 is a plain cast with no scale; its
// reader casts it to bf16 on read, which is exact: `.to(torch.bfloat16)` of libshard's tensor
// gives the same bytes). Its key is "<shard file>/<i>", e.g. "shard-00003.bin/1234".
//
// Checked at open, before any allocation a count could size: the manifest's fields as DeepSpec's
// validate_target_cache_manifest checks them; samples.idx's size equals N * 56 (so N is backed by
// the file); every record's sample_id, shard_id, seq_len > 0 and every tensor's byte range inside
// its shard (sizes computed without overflow); shard names plain file names.
#pragma once

#include <memory>

#include "readers/cache_source.h"

namespace libshard::convert {

inline constexpr uint64_t kDeepSpecRecordSize = 56;

Result<std::unique_ptr<CacheSource>> OpenDeepSpecCache(std::unique_ptr<CacheDir> dir,
                                                       const SourceOptions& options);

}  // namespace libshard::convert
