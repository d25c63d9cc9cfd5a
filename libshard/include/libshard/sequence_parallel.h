// Sequence parallelism: which rows of a sample each rank of a sequence-parallel (SP) group gets,
// by the split rule of the trainer it feeds (docs/guide/long-context.md).
//
// An SP group of N ranks trains on one sample at a time; each rank holds only its part of every
// sequence field (input_ids, loss_mask, the hidden states: the fields with a sequence dimension)
// and the whole of the fields without one. How the sample's rows are split, how a rank's part is
// padded, whether neighbouring parts overlap and where a rank's position ids start differ between
// trainers. Each rule below reproduces one trainer's own slicing code, so a rank that reads only
// the rows [start, stop) its rule names and pads them as the rule says holds, bit for bit, what
// the trainer cuts from the whole sample (tests/python/test_sp_rules.py checks each rule against
// the trainer's code).
//
// The rules form a table, like the codec table and the batch recipes: one entry per rule, each
// rule in its own file under src/loader/sequence_parallel/, all behind SliceOf. A rule is decided
// here once; the loader turns a slice into a row-range read plus zero padding, and the bindings
// (libshard._core.sequence_parallel_*) only translate.
//
// Rows are counted along the sequence dimension: dim 0 of input_ids [S] and of hidden states
// stored [S, H], dim 1 of hidden states stored [1, S, H]. Every sequence field of a sample has the
// same length; the rule splits that length.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/status.h"

namespace libshard {

enum class SplitRule : uint8_t {
  // "even": the plain contiguous split. chunk = ceil(L / N); rank r reads rows
  // [r·chunk, (r+1)·chunk) ∩ [0, L) and pads them with zero rows to chunk; positions
  // r·chunk ... r·chunk + chunk - 1. Alias "specforge-dspark": SpecForge's DSpark USP / Ulysses
  // (SpecForge#725, #728, normalize_dspark_offline_sample_usp) is this rule.
  kEven = 0,
  // "specforge-usp": SpecForge's offline EAGLE-3 with attention_backend: usp (SpecForge#454,
  // specforge/data/preprocessing.py OfflineEagle3Dataset.process_data_usp; Ulysses, ring or
  // both). chunk = ceil(L / N); rank r reads [r·chunk, r·chunk + chunk + ttt_length) ∩ [0, L)
  // (its chunk plus the next ttt_length rows, which its right neighbour also holds) and pads to
  // chunk + ttt_length; positions r·chunk ... r·chunk + chunk - 1; loss_mask row L - 1 is 0; the
  // collate rounds the batch length up to a multiple of N (all keys but hidden_state).
  kSpecForgeUsp = 1,
  // "torchspec-usp": TorchSpec's EAGLE-3 USP (TorchSpec#93, torchspec/utils/usp.py
  // split_usp_batch). The rows of specforge-usp; positions are those of the rank's whole ring
  // chunk, ring_rank·chunk·U ... (ring_rank + 1)·chunk·U - 1 with U = ulysses_size and
  // ring_rank = r / U; the loss mask is left as stored; no rounding of the batch length.
  kTorchSpecUsp = 2,
  // "speculators": speculators' Ulysses SP, --sp-size (speculators#871,
  // src/speculators/train/sequence_parallel.py split_batch_for_sp). It splits the packed row of
  // a batch (L = --total-seq-len, all samples of the batch one after another, then padding):
  // L must be a multiple of N; rank r reads rows [r·L/N, (r+1)·L/N), no padding, no generated
  // positions (position_ids is a stored field split like the others); document_ids stays whole.
  // The loader serves it with the recipe that packs the row (collate='speculators-eagle3'):
  // each rank's batch is its part, built from the stored rows of the samples behind it.
  kSpeculators = 3,
};

// What the trainer's collate adds around a rank's slice, per rule (docs/guide/long-context.md,
// "The batch each rank gets").
struct SplitRuleInfo {
  SplitRule rule = SplitRule::kEven;
  std::string_view name;                      // "specforge-usp"
  std::span<const std::string_view> aliases;  // other names of the same rule
  std::string_view trainer;                   // who splits this way, in words
  std::string_view source;                    // the trainer's code: repository, path, function
  bool takes_ttt = false;          // ttt_length is part of the rule (the USP rules' overlap)
  bool needs_multiple = false;     // the split length must be a multiple of sp_size
  bool packed = false;             // splits a batch's packed row, not one sample
  bool attention_mask = false;     // the batch carries attention_mask: 1 on read rows, 0 on pad
  bool zero_last_loss = false;     // loss_mask row full_length - 1 is 0 in every rank holding it
};

struct SplitRequest {
  uint64_t length = 0;   // the sample's rows (speculators: the packed row's, --total-seq-len)
  uint64_t max_len = 0;  // the trainer's truncation before the split; 0: none
  uint32_t sp_size = 1;  // N, the ranks of the SP group (>= 1)
  uint32_t sp_rank = 0;  // this rank's place in its group, 0 .. N - 1
  // The overlap of the USP rules (the trainer's ttt_length); 0 for the other rules.
  uint32_t ttt_length = 0;
  // U, the Ulysses degree inside the group (N = U × ring degree; ranks are numbered Ulysses
  // first, as yunchang's use_ulysses_low layout both USP trainers build). 0 means N (Ulysses
  // only). Must divide N. Only torchspec-usp's positions depend on it.
  uint32_t ulysses_size = 0;
};

// One rank's part of a sample. A slice is turned into tensors as: rows [start, stop) of every
// sequence field, then pad_to - (stop - start) rows of zero bytes; the fields without a sequence
// dimension whole.
struct SequenceSlice {
  uint64_t full_length = 0;  // L = min(length, max_len): the rows the group splits
  uint64_t chunk = 0;        // the rows each rank owns (before any overlap)
  uint64_t start = 0;        // the first row this rank reads
  uint64_t stop = 0;         // one past its last: start <= stop <= full_length
  uint64_t pad_to = 0;       // rows of each of its sequence tensors (>= stop - start)
  // The global index of the rank's first row, sp_rank × chunk: what position ids and the
  // loss's place start from. Above full_length for a rank that holds padding only (L < N).
  uint64_t offset = 0;
  // The position ids the trainer generates for this rank: position_begin, position_begin + 1,
  // ..., position_count of them, then zeros up to position_pad_to (the length of position_ids in
  // the trainer's batch of this one sample). position_count 0: the rule generates none.
  uint64_t position_begin = 0;
  uint64_t position_count = 0;
  uint64_t position_pad_to = 0;
  // The rows of the trainer's batch of this one sample: pad_to rounded up to the collate's
  // multiple (specforge-usp: sp_size, every key but hidden_state, which stays at pad_to).
  uint64_t batch_pad_to = 0;

  uint64_t rows() const { return stop - start; }  // rows read (the rest of pad_to is zeros)
};

// Every rule, in SplitRule order.
std::span<const SplitRuleInfo> SplitRules();
const SplitRuleInfo& SplitRuleInfoOf(SplitRule rule);
std::string_view SplitRuleName(SplitRule rule);

// A rule by its name or an alias ("even", "specforge-dspark", "specforge-usp", "torchspec-usp",
// "speculators"); InvalidArgument listing the names otherwise.
Result<SplitRule> ParseSplitRule(std::string_view name);

// The rows rank request.sp_rank of its group gets under `rule`. InvalidArgument naming the rule
// and the value for: sp_size 0, sp_rank >= sp_size, a ulysses_size that does not divide sp_size,
// a ttt_length for a rule without overlap, a length that is not a multiple of sp_size where the
// rule needs one (speculators), and a length so large that the slice's numbers overflow.
Result<SequenceSlice> SliceOf(SplitRule rule, const SplitRequest& request);

// For a rule that splits a packed row (speculators): the samples of a batch lie one after
// another in the row, `lengths[k]` rows each (after the trainer's per-sample shift and
// truncation), then padding. PackedParts says which rows of which sample fall in the row range
// [start, stop), in order: sample k's rows [begin, end) land at row `at` of the range. Rows of the
// range past the samples are padding (document_ids -1). InvalidArgument when start > stop or the
// lengths' sum overflows.
struct PackedPart {
  uint64_t sample = 0;  // index into lengths
  uint64_t begin = 0;   // rows of that sample
  uint64_t end = 0;
  uint64_t at = 0;      // where they land, relative to start
};
Result<std::vector<PackedPart>> PackedParts(std::span<const uint64_t> lengths, uint64_t start,
                                            uint64_t stop);

}  // namespace libshard
