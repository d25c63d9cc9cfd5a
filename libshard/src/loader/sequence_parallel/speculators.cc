// sequence_parallel rule "speculators": speculators' Ulysses SP, --sp-size (speculators#871).
//
// src/speculators/train/sequence_parallel.py split_batch_for_sp splits the batch the collate
// packed into one row of L = --total-seq-len rows (every sample of the batch after the other,
// shifted by shift_batch, then zero padding; CollateFn): hidden_states,
// verifier_last_hidden_states, input_ids, loss_mask and position_ids by torch.chunk(N, dim=1),
// which, as train.py requires L to be a multiple of N, gives rank r the rows [r·L/N, (r+1)·L/N);
// document_ids stays whole and full_seq_len = L is added. A length that is not a multiple of N is
// refused as the trainer refuses it. No padding and no generated positions: position_ids is a
// field of the samples, split like the others. PackedParts maps a rank's rows to the samples.
#include "loader/sequence_parallel/split_rule.h"

namespace libshard {
namespace {

Status Slice(const SplitInput& in, SequenceSlice* out) {
  const SplitRuleInfo& rule = kSpeculatorsRule.info;
  const uint64_t length = in.full_length;
  if (length % in.sp_size != 0)
    return Status::InvalidArgument(
        split::RuleText(rule) + ": the packed row of " + std::to_string(length) +
        " rows is not a multiple of sp_size " + std::to_string(in.sp_size) +
        "; speculators needs --total-seq-len divisible by --sp-size (split_batch_for_sp "
        "refuses it)");
  const uint64_t chunk = length / in.sp_size;
  out->full_length = length;
  out->chunk = chunk;
  out->offset = chunk * in.sp_rank;  // < length: no overflow
  out->start = out->offset;
  out->stop = out->offset + chunk;
  out->pad_to = chunk;
  out->position_begin = 0;
  out->position_count = 0;
  out->position_pad_to = 0;
  out->batch_pad_to = chunk;
  return Status::OK();
}

}  // namespace

constinit const SplitRuleEntry kSpeculatorsRule = {
    {SplitRule::kSpeculators, "speculators", {}, "speculators --sp-size (Ulysses)",
     "vllm-project/speculators src/speculators/train/sequence_parallel.py split_batch_for_sp "
     "(speculators#871)",
     /*takes_ttt=*/false, /*needs_multiple=*/true, /*packed=*/true,
     /*attention_mask=*/false, /*zero_last_loss=*/false},
    &Slice};

}  // namespace libshard
