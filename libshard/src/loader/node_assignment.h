// The samples each node reads under the node-local order (docs/ORDER.md §5.1 groups, §5.2
// assignment). Depends on (dataset, seed, node count) only, never on the epoch: a node reads the
// same share every epoch. Pure computation, no I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/status.h"

namespace libshard {

// Where sample i's stored bytes lie: what §5.1 groups by.
struct SampleSpan {
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint64_t stored_size = 0;
};

// The salts of §5.2 and §5.3 ("node-ass", "localnod").
inline constexpr uint64_t kNodeAssignSalt = 0x6E6F64652D617373ull;
inline constexpr uint64_t kNodeSeedSalt = 0x6C6F63616C6E6F64ull;
// §5.1's group size bounds.
inline constexpr uint64_t kMinNodeGroupBytes = 4096;
inline constexpr uint64_t kMaxNodeGroupBytes = uint64_t{256} << 20;

// §5.1: G for a dataset of `total_stored` bytes read by `nodes` nodes.
uint64_t NodeGroupBytes(uint64_t total_stored, uint32_t nodes);
// §5.3: the seed of node k's shuffle.
uint64_t NodeSeed(uint64_t seed, uint64_t node);

struct NodeAssignment {
  uint32_t nodes = 0;
  uint64_t group_bytes = 0;  // G
  uint64_t groups = 0;       // M
  // A_k: node k's samples, increasing. samples[k].size() is n_k.
  std::vector<std::shared_ptr<const std::vector<uint64_t>>> samples;
  std::vector<uint64_t> stored_bytes;  // per node: the stored bytes of its samples
  // Per node: the bytes of the spans of `block` bytes its samples touch, block by block (what a
  // node's cache of blocks of that size holds), when AssignToNodes was given a block size.
  std::vector<uint64_t> cached_bytes;
};

// §5.1 and §5.2 over the samples' spans (spans[i] for sample i). `shuffle` false deals the
// groups in order. `block` > 0 also counts NodeAssignment::cached_bytes for cache blocks of that
// size. InvalidArgument for nodes 0.
Result<NodeAssignment> AssignToNodes(std::span<const SampleSpan> spans, uint64_t seed,
                                     uint32_t nodes, bool shuffle, uint64_t block = 0);

// The spans of every sample of `dataset` (its locations; a sample whose location cannot be read
// is an error naming it).
Result<std::vector<SampleSpan>> DatasetSpans(const Dataset& dataset);

}  // namespace libshard
