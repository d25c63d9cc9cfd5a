// sequence_parallel rule "even" (alias "specforge-dspark"): the plain contiguous split.
//
//   chunk = ceil(L / N); rank r reads rows [r·chunk, (r+1)·chunk) ∩ [0, L) and pads them with
//   zero rows to chunk, so every rank's tensors have the same shape (the Ulysses all-to-all
//   needs it); positions r·chunk, ..., r·chunk + chunk - 1 (past L for the padding rows).
//
// SpecForge's DSpark offline and online USP split this way (SpecForge#725 / #728,
// specforge/algorithms/common/dflash_family_data.py normalize_dspark_offline_sample_usp, after
// normalize_dspark_offline_sample's [:max_len]), with an attention_mask of 1 on the read rows and
// 0 on the padding and (#728) the positions as position_ids.
#include <algorithm>

#include "loader/sequence_parallel/split_rule.h"

namespace libshard {
namespace {

constexpr std::string_view kAliases[] = {"specforge-dspark"};

Status Slice(const SplitInput& in, SequenceSlice* out) {
  const SplitRuleInfo& rule = kEvenRule.info;
  const uint64_t length = in.full_length;
  const uint64_t chunk = split::CeilDiv(length, in.sp_size);
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t offset, split::Mul(in.sp_rank, chunk, rule, in));
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t end, split::Add(offset, chunk, rule, in));
  out->full_length = length;
  out->chunk = chunk;
  out->offset = offset;
  out->start = std::min(offset, length);
  out->stop = std::min(end, length);
  out->pad_to = chunk;
  out->position_begin = offset;
  out->position_count = chunk;
  out->position_pad_to = chunk;
  out->batch_pad_to = chunk;
  return Status::OK();
}

}  // namespace

constinit const SplitRuleEntry kEvenRule = {
    {SplitRule::kEven, "even", kAliases,
     "the plain contiguous split; SpecForge DSpark with attention_backend: usp",
     "sgl-project/SpecForge specforge/algorithms/common/dflash_family_data.py "
     "normalize_dspark_offline_sample_usp (SpecForge#725, #728)",
     /*takes_ttt=*/false, /*needs_multiple=*/false, /*packed=*/false,
     /*attention_mask=*/true, /*zero_last_loss=*/false},
    &Slice};

}  // namespace libshard
