// The split-rule table, the checks every request passes, and the helpers the rules share.
#include "loader/sequence_parallel/split_rule.h"

#include <algorithm>
#include <array>

namespace libshard {
namespace {

constexpr std::array<const SplitRuleEntry*, 4> kRules = {&kEvenRule, &kSpecForgeUspRule,
                                                         &kTorchSpecUspRule, &kSpeculatorsRule};

const SplitRuleEntry& EntryOf(SplitRule rule) {
  for (const SplitRuleEntry* e : kRules)
    if (e->info.rule == rule) return *e;
  return kEvenRule;  // unreachable: every SplitRule value has an entry (sequence_parallel_test)
}

std::string Names() {
  std::string s;
  for (const SplitRuleEntry* e : kRules) {
    if (!s.empty()) s += ", ";
    s += "'" + std::string(e->info.name) + "'";
    for (std::string_view alias : e->info.aliases) s += " (or '" + std::string(alias) + "')";
  }
  return s;
}

}  // namespace

std::span<const SplitRuleInfo> SplitRules() {
  static const std::array<SplitRuleInfo, kRules.size()> infos = [] {
    std::array<SplitRuleInfo, kRules.size()> a;
    for (size_t i = 0; i < kRules.size(); ++i) a[i] = kRules[i]->info;
    return a;
  }();
  return infos;
}

const SplitRuleInfo& SplitRuleInfoOf(SplitRule rule) { return EntryOf(rule).info; }

std::string_view SplitRuleName(SplitRule rule) { return EntryOf(rule).info.name; }

Result<SplitRule> ParseSplitRule(std::string_view name) {
  for (const SplitRuleEntry* e : kRules) {
    if (e->info.name == name) return e->info.rule;
    for (std::string_view alias : e->info.aliases)
      if (alias == name) return e->info.rule;
  }
  return Status::InvalidArgument("unknown sequence_parallel rule '" + std::string(name) +
                                 "'; use one of " + Names() +
                                 " (the split of the trainer the ranks feed)");
}

Result<SequenceSlice> SliceOf(SplitRule rule, const SplitRequest& request) {
  const SplitRuleEntry& entry = EntryOf(rule);
  const std::string what = split::RuleText(entry.info);
  if (request.sp_size == 0)
    return Status::InvalidArgument(what + ": sp_size 0; use 1 or more (the ranks of a group)");
  if (request.sp_rank >= request.sp_size)
    return Status::InvalidArgument(what + ": sp_rank " + std::to_string(request.sp_rank) +
                                   " is outside its group of sp_size " +
                                   std::to_string(request.sp_size) + "; use 0.." +
                                   std::to_string(request.sp_size - 1));
  const uint32_t ulysses = request.ulysses_size == 0 ? request.sp_size : request.ulysses_size;
  if (request.sp_size % ulysses != 0)
    return Status::InvalidArgument(what + ": ulysses_size " + std::to_string(ulysses) +
                                   " does not divide sp_size " + std::to_string(request.sp_size) +
                                   "; use a divisor (sp_size = ulysses_size x ring size)");
  if (request.ttt_length != 0 && !entry.info.takes_ttt)
    return Status::InvalidArgument(what + " has no overlap, but ttt_length = " +
                                   std::to_string(request.ttt_length) +
                                   " was given; use 0, or a USP rule ('specforge-usp', "
                                   "'torchspec-usp') for a trainer that overlaps its ranks' parts");
  SplitInput in;
  in.full_length =
      request.max_len == 0 ? request.length : std::min(request.length, request.max_len);
  in.sp_size = request.sp_size;
  in.sp_rank = request.sp_rank;
  in.ttt_length = request.ttt_length;
  in.ulysses_size = ulysses;
  SequenceSlice slice;
  LIBSHARD_RETURN_IF_ERROR(entry.slice(in, &slice));
  return slice;
}

Result<std::vector<PackedPart>> PackedParts(std::span<const uint64_t> lengths, uint64_t start,
                                            uint64_t stop) {
  if (start > stop)
    return Status::InvalidArgument("packed rows [" + std::to_string(start) + ", " +
                                   std::to_string(stop) + ") are reversed; use start <= stop");
  uint64_t total = 0;
  for (uint64_t n : lengths)
    if (__builtin_add_overflow(total, n, &total))
      return Status::InvalidArgument("the packed samples' lengths add up past 2^64 rows");
  std::vector<PackedPart> parts;
  uint64_t at = 0;  // the packed row where sample k starts
  for (size_t k = 0; k < lengths.size() && at < stop; ++k) {
    const uint64_t end = at + lengths[k];  // no overflow: at most `total`
    const uint64_t lo = std::max(at, start);
    const uint64_t hi = std::min(end, stop);
    if (lo < hi) parts.push_back({k, lo - at, hi - at, lo - start});
    at = end;
  }
  return parts;
}

namespace split {

std::string RuleText(const SplitRuleInfo& rule) {
  return "sequence_parallel rule '" + std::string(rule.name) + "'";
}

namespace {
Status TooLong(const SplitRuleInfo& rule, const SplitInput& in) {
  return Status::InvalidArgument(RuleText(rule) + ": a sample of " +
                                 std::to_string(in.full_length) + " rows split " +
                                 std::to_string(in.sp_size) + " ways (ttt_length " +
                                 std::to_string(in.ttt_length) +
                                 ") overflows the slice's row numbers; no trainer splits such a "
                                 "sample, check the dataset's lengths");
}
}  // namespace

Result<uint64_t> Mul(uint64_t a, uint64_t b, const SplitRuleInfo& rule, const SplitInput& in) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return TooLong(rule, in);
  return r;
}

Result<uint64_t> Add(uint64_t a, uint64_t b, const SplitRuleInfo& rule, const SplitInput& in) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return TooLong(rule, in);
  return r;
}

Status OverlapRows(const SplitInput& in, const SplitRuleInfo& rule, SequenceSlice* out) {
  const uint64_t length = in.full_length;
  const uint64_t chunk = CeilDiv(length, in.sp_size);
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t offset, Mul(in.sp_rank, chunk, rule, in));
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t local, Add(chunk, in.ttt_length, rule, in));
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t end, Add(offset, local, rule, in));
  out->full_length = length;
  out->chunk = chunk;
  out->offset = offset;
  // The trainers slice tensor[:, offset : min(offset + local, L)]: empty past the end.
  out->start = std::min(offset, length);
  out->stop = std::max(out->start, std::min(end, length));
  out->pad_to = local;
  return Status::OK();
}

}  // namespace split
}  // namespace libshard
