// The split-rule table (libshard/sequence_parallel.h): one entry per rule, each rule in its own
// file (even.cc, specforge_usp.cc, torchspec_usp.cc, speculators.cc), the table, the checks every
// request passes and the helpers the rules share in split_rule.cc. Internal to loader/.
#pragma once

#include <cstdint>
#include <string>

#include "libshard/sequence_parallel.h"
#include "libshard/status.h"

namespace libshard {

// A request as a rule sees it: checked (sp_size >= 1, sp_rank < sp_size, ulysses_size divides
// sp_size and is >= 1, ttt_length 0 unless the rule takes one) and truncated (full_length =
// min(length, max_len)).
struct SplitInput {
  uint64_t full_length = 0;
  uint32_t sp_size = 1;
  uint32_t sp_rank = 0;
  uint32_t ttt_length = 0;
  uint32_t ulysses_size = 1;
};

struct SplitRuleEntry {
  SplitRuleInfo info;
  // Fills every member of *out. InvalidArgument (naming the rule) when the rule refuses the
  // input or a number overflows.
  Status (*slice)(const SplitInput& in, SequenceSlice* out);
};

extern const SplitRuleEntry kEvenRule;
extern const SplitRuleEntry kSpecForgeUspRule;
extern const SplitRuleEntry kTorchSpecUspRule;
extern const SplitRuleEntry kSpeculatorsRule;

namespace split {

// ceil(a / b), b > 0, without overflow.
inline uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// a·b and a+b, or InvalidArgument naming the rule and the sample length when they overflow.
Result<uint64_t> Mul(uint64_t a, uint64_t b, const SplitRuleInfo& rule, const SplitInput& in);
Result<uint64_t> Add(uint64_t a, uint64_t b, const SplitRuleInfo& rule, const SplitInput& in);

// The rows of the USP rules (SpecForge's process_data_usp, TorchSpec's split_usp_batch, which
// agree): chunk = ceil(L / N), offset = rank·chunk, the rows [offset, offset + chunk + ttt) ∩
// [0, L), padded to chunk + ttt. Sets full_length, chunk, start, stop, pad_to, offset.
Status OverlapRows(const SplitInput& in, const SplitRuleInfo& rule, SequenceSlice* out);

// "sequence_parallel rule 'NAME'" for errors.
std::string RuleText(const SplitRuleInfo& rule);

}  // namespace split
}  // namespace libshard
