// Batches assembled by the loader (LoaderOptions::collate): the layouts, their names, and the
// batch a Loader hands out with one.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard {

// One tensor per field in one pinned arena region, so a consumer touches one object per step.
//
// Memory: with a collate, 1/4 of memory_budget (up to 1/2 when two of the largest batches,
// estimated from the index at Create, need more; a log line says when even that holds fewer
// than two) becomes a second arena of batch regions, pinned like the read arena, which gets the
// rest. Each batch is copied (once, on the consumer's thread,
// in Next()) from its samples' read slots into one region, and the read slots are released right
// after the copy, so read-ahead and the batches the consumer holds never wait on each other (no
// deadlock). Only the consumer's own batches hold regions: when none is free, Next() waits, logs
// a warning after 1 s and returns ResourceExhausted once nothing was released for
// max(1, 2 x slow_wait_warning_seconds) s; the batch is kept and the next Next() delivers it. A
// batch larger than the whole batch arena is ResourceExhausted at once, naming its size and the
// memory_budget it needs. state(), stats() and on_error behave as without a collate (a batch
// that lost samples to kSkip is collated smaller; single samples are batches of one).
enum class Collate : uint32_t {
  kNone = 0,  // Batch::samples, one zero-copy Sample each
  kPad = 1,   // every field padded at the end of its sequence dimension to the batch's longest
  kPack = 2,  // every field concatenated along its sequence dimension, with cu_seqlens
  // Batch recipes: a trainer's own batch, built in C++ bit for bit as the trainer's Python
  // collate builds it from the same samples in the same order (the trainer's keys, dtypes,
  // shapes and bytes; docs/guide/trainers.md). Each needs recipe_len, the trainer's length
  // setting, and the fields its trainer stores; the rules are in loader/recipes/.
  kSpecForgeEagle3 = 3,    // SpecForge 0.2 offline EAGLE-3 (normalize + DataCollatorWithPadding);
                           // recipe_len = max_len
  kModelOptEagle = 4,      // ModelOpt 0.47 offline EAGLE (OfflineSupervisedDataset +
                           // EagleOfflineDataCollator); recipe_len = train_len; the stored
                           // loss_mask is used when it is read (answer_only_loss), else ones
  kSpeculatorsEagle3 = 5,  // speculators 0.9 EAGLE-3 (shift_batch + packing CollateFn, the loss
                           // mask left to the caller); recipe_len = total_seq_len
};
inline constexpr Collate kLastCollate = Collate::kSpeculatorsEagle3;

// "none" | "pad" | "pack" | "specforge-eagle3" | "modelopt-eagle" | "speculators-eagle3".
// Anything else is InvalidArgument.
Result<Collate> ParseCollate(std::string_view name);

// A batch the loader assembled, in one arena region that `memory` keeps alive (like
// Sample::memory_owner()).
//   kPad:  a field with a sequence dimension d becomes [B, ..., L_max (at d), ...] padded with its
//          padding value; a field whose dim 0 has size 1 in every sample and is not d
//          ([1, L, H]) becomes [B, L_max, H] (concatenated along dim 0); fields without a
//          sequence dimension are stacked along a new dim 0.
//   kPack: a field with sequence dimension d is concatenated along d ([1, sum L, H], [sum L]);
//          others are stacked along a new dim 0. cu_seqlens is filled.
//   a recipe: the trainer's batch, one tensor per key in the trainer's order ("/" joins the
//          keys of a nested dict); lengths as the recipe documents; cu_seqlens empty.
// lengths come from the schema's length field when it is read, else from the first field read
// that has a sequence dimension, else are 1. Every field's tensor starts 64-byte aligned. Samples
// that differ in a dimension other than the sequence one cannot be batched: Next() returns
// InvalidArgument naming the field, the samples and the dataset.
// (The same layouts as the Python pad_collate / pack_collate.)
struct CollatedBatch {
  std::vector<TensorView> tensors;     // one per field read, in schema order
  std::vector<uint64_t> indices;       // dataset index of each sample, in batch order
  std::vector<Metadata> metadata;      // each sample's metadata, in batch order
  std::vector<int64_t> lengths;        // each sample's length before padding / packing
  std::vector<int32_t> cu_seqlens;     // kPack: B + 1 cumulative lengths from 0; else empty
  int64_t max_seqlen = 0;
  std::shared_ptr<const void> memory;
};

}  // namespace libshard
