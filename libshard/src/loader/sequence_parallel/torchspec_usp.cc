// sequence_parallel rule "torchspec-usp": TorchSpec's EAGLE-3 with attention_backend: usp
// (TorchSpec#93).
//
// torchspec/utils/usp.py split_usp_batch, with L = min(max_len, S), chunk = ceil(L / N),
// T = ttt_length, U = N / sp_ring_size, ring_rank = r / U (get_usp_rank_coords):
//   rows     those of specforge-usp: [r·chunk, r·chunk + chunk + T) ∩ [0, L) of input_ids,
//            loss_mask, hidden_states and target/last_hidden_states, zero-padded to chunk + T;
//   loss_mask as stored (no row set to 0);
//   attention_mask 1 on the read rows, 0 on the padding;
//   position_ids ring_rank·chunk·U ... (ring_rank + 1)·chunk·U - 1: the positions of the rank's
//            whole ring chunk, which its Ulysses all-to-all gathers.
// TorchSpec's collate (torchspec/data/utils.py DataCollatorWithPadding, usp_enabled) adds no
// 256-row bucket under USP: the batch of one sample is the slice itself.
#include "loader/sequence_parallel/split_rule.h"

namespace libshard {
namespace {

Status Slice(const SplitInput& in, SequenceSlice* out) {
  const SplitRuleInfo& rule = kTorchSpecUspRule.info;
  LIBSHARD_RETURN_IF_ERROR(split::OverlapRows(in, rule, out));
  out->batch_pad_to = out->pad_to;
  const uint32_t ring_rank = in.sp_rank / in.ulysses_size;
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t ring_chunk,
                            split::Mul(out->chunk, in.ulysses_size, rule, in));
  LIBSHARD_ASSIGN_OR_RETURN(out->position_begin, split::Mul(ring_rank, ring_chunk, rule, in));
  out->position_count = ring_chunk;
  out->position_pad_to = ring_chunk;
  return Status::OK();
}

}  // namespace

constinit const SplitRuleEntry kTorchSpecUspRule = {
    {SplitRule::kTorchSpecUsp, "torchspec-usp", {},
     "TorchSpec EAGLE-3, attention_backend: usp",
     "lightseekorg/TorchSpec torchspec/utils/usp.py split_usp_batch (TorchSpec#93)",
     /*takes_ttt=*/true, /*needs_multiple=*/false, /*packed=*/false,
     /*attention_mask=*/true, /*zero_last_loss=*/false},
    &Slice};

}  // namespace libshard
