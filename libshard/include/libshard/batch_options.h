// How a Loader cuts an epoch's order into steps (LoaderOptions' batching settings; docs/ORDER.md
// §2, §2a): the rules' names, their parsers and the bounds ValidateLoaderOptions checks.
#pragma once

#include <cstdint>
#include <string_view>

#include "libshard/status.h"

namespace libshard {

// How max_tokens bounds a batch (LoaderOptions::token_budget; docs/ORDER.md §2).
enum class TokenBudget : uint32_t {
  kAuto = 0,    // kPadded with Collate::kPad, else kSum
  kSum = 1,     // the batch's summed length stays <= max_tokens (packed, varlen attention)
  kPadded = 2,  // samples x longest length stays <= max_tokens: what a padded batch occupies
};

// A sample longer than max_tokens (after max_len clipping): it cannot share a batch.
enum class OversizedSample : uint32_t {
  kOwnBatch = 0,  // it becomes a batch of its own (the one batch that exceeds the budget)
  kError = 1,     // Loader::Create fails naming the sample, its length and what to change
};

// Names: "sum" | "padded" | "auto"; "batch" | "error". Anything else is InvalidArgument.
Result<TokenBudget> ParseTokenBudget(std::string_view name);
Result<OversizedSample> ParseOversizedSample(std::string_view name);

inline constexpr uint32_t kMaxLoaderBatchSize = uint32_t{1} << 24;     // batch_size: 0..2^24
inline constexpr uint64_t kMaxLoaderBucketWindow = uint64_t{1} << 24;  // bucket_window: 0..2^24
// LoaderOptions::bucket_window's default, "auto": kAutoBucketWindowSize samples with padded
// batches (collate kPad, or consumer_pads) of more than one sample, where padding costs GPU
// work; 0 (off) otherwise. Resolved once, by ResolveLoaderOptions.
inline constexpr uint64_t kAutoBucketWindow = UINT64_MAX;
inline constexpr uint64_t kAutoBucketWindowSize = 4096;

// What the loader's batching makes of a dataset in one epoch, from the index lengths alone (no
// sample is read): for choosing max_tokens, the budget and bucket_window before a run
// (`libshard info --batches`; SummarizeBatching in libshard/loader.h). Counts cover every rank's
// steps, wrap-around repeats included.
struct BatchingSummary {
  uint64_t batches = 0;            // steps of all ranks together
  uint64_t steps_per_rank = 0;
  uint64_t samples = 0;            // samples in those batches
  uint64_t tokens = 0;             // their summed lengths (clipped to max_len)
  uint64_t positions = 0;          // summed batch size x longest length: what padding lays out
  uint64_t padding_positions = 0;  // positions - tokens
  double padding_share = 0;        // padding_positions / positions
  uint64_t largest_positions = 0;  // the largest batch's size x longest length
  uint64_t largest_tokens = 0;     // the largest batch's summed length
  uint64_t oversized_batches = 0;  // single samples longer than max_tokens
};

}  // namespace libshard
