// sequence_parallel rule "specforge-usp": SpecForge's offline EAGLE-3 with
// attention_backend: usp (Ulysses, ring or both; SpecForge#454).
//
// specforge/data/preprocessing.py OfflineEagle3Dataset.process_data_usp, per sample, with
// L = min(max_len, S), chunk = ceil(L / N), T = ttt_length:
//   rows     [r·chunk, r·chunk + chunk + T) ∩ [0, L) of input_ids, loss_mask, aux_hidden_state
//            (-> hidden_state) and hidden_state (-> target), zero-padded to chunk + T: a rank
//            also holds the first T rows of its right neighbour, which the TTT steps read;
//   loss_mask row L - 1 set to 0 before the split (in every rank that holds it);
//   attention_mask 1 on the read rows, 0 on the padding;
//   position_ids r·chunk ... r·chunk + chunk - 1 (ring_rank·chunk·U + ulysses_rank·chunk, which
//            is that in the use_ulysses_low layout SpecForge's yunchang groups have).
// Then specforge/data/utils.py DataCollatorWithPadding (USP needs training.batch_size 1) rounds
// the batch length up to a multiple of N (sp_degree): input_ids, attention_mask, loss_mask and
// target are zero-padded to it, hidden_state is not, and position_ids to that length × U.
#include "loader/sequence_parallel/split_rule.h"

namespace libshard {
namespace {

Status Slice(const SplitInput& in, SequenceSlice* out) {
  const SplitRuleInfo& rule = kSpecForgeUspRule.info;
  LIBSHARD_RETURN_IF_ERROR(split::OverlapRows(in, rule, out));
  const uint64_t batch = split::CeilDiv(out->pad_to, in.sp_size);
  LIBSHARD_ASSIGN_OR_RETURN(out->batch_pad_to, split::Mul(batch, in.sp_size, rule, in));
  out->position_begin = out->offset;
  out->position_count = out->chunk;
  LIBSHARD_ASSIGN_OR_RETURN(out->position_pad_to,
                            split::Mul(out->batch_pad_to, in.ulysses_size, rule, in));
  return Status::OK();
}

}  // namespace

constinit const SplitRuleEntry kSpecForgeUspRule = {
    {SplitRule::kSpecForgeUsp, "specforge-usp", {},
     "SpecForge offline EAGLE-3, attention_backend: usp",
     "sgl-project/SpecForge specforge/data/preprocessing.py "
     "OfflineEagle3Dataset.process_data_usp + specforge/data/utils.py DataCollatorWithPadding "
     "(SpecForge#454)",
     /*takes_ttt=*/true, /*needs_multiple=*/false, /*packed=*/false,
     /*attention_mask=*/true, /*zero_last_loss=*/true},
    &Slice};

}  // namespace libshard
