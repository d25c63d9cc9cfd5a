// docs/ORDER.md §5.1 and §5.2.
#include "loader/node_assignment.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <string>
#include <tuple>
#include <utility>

#include "libshard/loader.h"
#include "loader/order.h"  // ResumedOrder
#include "loader/order_random.h"

namespace libshard {

using order_random::EpochKey;
using order_random::Mix;
using order_random::SplitMix64;

uint64_t NodeGroupBytes(uint64_t total_stored, uint32_t nodes) {
  const uint64_t share = total_stored / (uint64_t{8} * std::max<uint32_t>(nodes, 1));
  return std::max(kMinNodeGroupBytes, std::min(kMaxNodeGroupBytes, share) / 4096 * 4096);
}

uint64_t NodeSeed(uint64_t seed, uint64_t node) { return Mix(seed ^ Mix(node + kNodeSeedSalt)); }

Result<NodeAssignment> AssignToNodes(std::span<const SampleSpan> spans, uint64_t seed,
                                     uint32_t nodes, bool shuffle, uint64_t block) {
  if (nodes == 0) return Status::InvalidArgument("the node-local order needs nodes >= 1");
  NodeAssignment a;
  a.nodes = nodes;
  uint64_t total = 0;
  for (const SampleSpan& s : spans) total += s.stored_size;
  a.group_bytes = NodeGroupBytes(total, nodes);
  const uint64_t g_bytes = a.group_bytes;

  // §5.1: group key (shard, offset div G); groups numbered in increasing key order.
  std::vector<uint64_t> order(spans.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  const auto key = [&](uint64_t i) {
    return std::make_pair(spans[i].shard, spans[i].offset / g_bytes);
  };
  // Stable: a group's samples stay in increasing index order.
  std::stable_sort(order.begin(), order.end(),
                   [&](uint64_t x, uint64_t y) { return key(x) < key(y); });
  std::vector<uint64_t> starts;  // group g = order[starts[g], starts[g+1])
  for (uint64_t p = 0; p < order.size(); ++p)
    if (p == 0 || key(order[p]) != key(order[p - 1])) starts.push_back(p);
  a.groups = starts.size();
  starts.push_back(order.size());

  // §5.2: deal the groups in the order of a seeded Fisher-Yates permutation, each to the node
  // holding the fewest samples, then the fewest stored bytes, then the lowest index.
  std::vector<uint64_t> deal(a.groups);
  std::iota(deal.begin(), deal.end(), uint64_t{0});
  if (shuffle) {
    SplitMix64 rng(EpochKey(seed ^ kNodeAssignSalt, nodes));
    for (uint64_t i = a.groups; i > 1; --i) std::swap(deal[i - 1], deal[rng.Below(i)]);
  }
  std::vector<uint64_t> count(nodes, 0);
  a.stored_bytes.assign(nodes, 0);
  std::vector<uint32_t> owner(a.groups, 0);
  // The nodes by (samples, stored bytes, index); the least is on top. O(M log K).
  using Load = std::tuple<uint64_t, uint64_t, uint32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> least;
  for (uint32_t k = 0; k < nodes; ++k) least.emplace(0, 0, k);
  for (const uint64_t g : deal) {
    const uint32_t best = std::get<2>(least.top());
    least.pop();
    owner[g] = best;
    count[best] += starts[g + 1] - starts[g];
    for (uint64_t p = starts[g]; p < starts[g + 1]; ++p)
      a.stored_bytes[best] += spans[order[p]].stored_size;
    least.emplace(count[best], a.stored_bytes[best], best);
  }
  std::vector<std::vector<uint64_t>> samples(nodes);
  for (uint32_t k = 0; k < nodes; ++k) samples[k].reserve(count[k]);
  for (uint64_t g = 0; g < a.groups; ++g)
    for (uint64_t p = starts[g]; p < starts[g + 1]; ++p) samples[owner[g]].push_back(order[p]);
  if (block > 0) {
    // Blocks touched per node: (shard, block index) pairs, counted once per node.
    a.cached_bytes.assign(nodes, 0);
    for (uint32_t k = 0; k < nodes; ++k) {
      std::vector<std::pair<uint32_t, uint64_t>> blocks;
      for (const uint64_t i : samples[k]) {
        const SampleSpan& s = spans[i];
        if (s.stored_size == 0) continue;
        for (uint64_t b = s.offset / block; b <= (s.offset + s.stored_size - 1) / block; ++b)
          blocks.emplace_back(s.shard, b);
      }
      std::sort(blocks.begin(), blocks.end());
      blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
      a.cached_bytes[k] = blocks.size() * block;
    }
  }
  for (uint32_t k = 0; k < nodes; ++k) {
    std::sort(samples[k].begin(), samples[k].end());
    a.samples.push_back(std::make_shared<const std::vector<uint64_t>>(std::move(samples[k])));
  }
  return a;
}

Result<std::vector<SampleSpan>> DatasetSpans(const Dataset& dataset) {
  std::vector<SampleSpan> spans(dataset.size());
  for (uint64_t i = 0; i < dataset.size(); ++i) {
    LIBSHARD_ASSIGN_OR_RETURN(const SampleLocation loc, dataset.Locate(i));
    spans[i] = SampleSpan{loc.shard, loc.offset, loc.stored_size};
  }
  return spans;
}

Result<std::vector<NodeShare>> SummarizeNodeShares(const Dataset& dataset,
                                                   const LoaderOptions& options, uint32_t nodes,
                                                   uint64_t block_bytes) {
  if (block_bytes == 0 || block_bytes % 4096 != 0)
    return Status::InvalidArgument("the cache block size must be a positive multiple of 4096, "
                                   "got " + std::to_string(block_bytes));
  LIBSHARD_ASSIGN_OR_RETURN(const std::vector<SampleSpan> spans, DatasetSpans(dataset));
  const Order order = ResumedOrder(options.order, options.resume ? &*options.resume : nullptr);
  LIBSHARD_ASSIGN_OR_RETURN(
      const NodeAssignment a,
      AssignToNodes(spans, order.seed(), nodes, order.shuffle(), block_bytes));
  std::vector<NodeShare> out(nodes);
  for (uint32_t k = 0; k < nodes; ++k)
    out[k] = {a.samples[k]->size(), a.stored_bytes[k], a.cached_bytes[k]};
  return out;
}

}  // namespace libshard
