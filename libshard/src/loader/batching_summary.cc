// SummarizeBatching (loader.h): an epoch's plan summed up from the index lengths.
#include <algorithm>
#include <memory>
#include <vector>

#include "libshard/loader.h"
#include "loader/order.h"
#include "loader/read_layout.h"

namespace libshard {

Result<BatchingSummary> SummarizeBatching(const Dataset& dataset,
                                          const LoaderOptions& given) {
  LIBSHARD_ASSIGN_OR_RETURN(const LoaderOptions options, ResolveLoaderOptions(given));
  std::vector<uint64_t> lengths = dataset.lengths();
  for (uint64_t& l : lengths) l = ClippedLength(l, options.max_len);
  const auto shared = std::make_shared<const std::vector<uint64_t>>(std::move(lengths));
  PlanOptions plan_options = PlanOptionsFor(options);
  plan_options.rank = 0;
  LIBSHARD_ASSIGN_OR_RETURN(const EpochPlan plan,
                            EpochPlan::MakeSharingLengths(dataset.size(), shared, plan_options));
  BatchingSummary s;
  s.steps_per_rank = plan.batches_for_rank();
  std::vector<uint64_t> batch;
  for (uint64_t r = 0; r < plan_options.world_size; ++r) {
    const EpochPlan rank = plan.ForRank(r);
    for (uint64_t k = 0; k < rank.batches_for_rank(); ++k) {
      batch.clear();
      rank.AppendBatchSamples(k, &batch);
      uint64_t longest = 0;
      uint64_t tokens = 0;
      for (const uint64_t i : batch) {
        longest = std::max(longest, (*shared)[i]);
        tokens += (*shared)[i];
      }
      const uint64_t positions = batch.size() * longest;
      ++s.batches;
      s.samples += batch.size();
      s.tokens += tokens;
      s.positions += positions;
      s.largest_positions = std::max(s.largest_positions, positions);
      s.largest_tokens = std::max(s.largest_tokens, tokens);
      if (options.max_tokens > 0 && batch.size() == 1 && longest > options.max_tokens)
        ++s.oversized_batches;
    }
  }
  s.padding_positions = s.positions - std::min(s.positions, s.tokens);
  s.padding_share = s.positions > 0 ? static_cast<double>(s.padding_positions) / s.positions : 0;
  return s;
}

}  // namespace libshard
