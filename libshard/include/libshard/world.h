// Which part of the work this process does: its rank and the world size, resolved in one place
// for the Loader, the Writer and `libshard pack --part auto`.
//
// Precedence (the first that applies wins):
//   1. explicit values (WorldRequest::rank / world_size; a front end passes torch.distributed's
//      rank and world size here when it is initialised, with source "torch.distributed");
//   2. torchrun: RANK / WORLD_SIZE (LOCAL_RANK is reported, and checked against RANK);
//   3. a Slurm job array: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT
//      tasks, each of SLURM_NTASKS processes (SLURM_PROCID within one):
//      rank = (ID - MIN) * NTASKS + PROCID, world = COUNT * NTASKS;
//   4. Slurm: SLURM_PROCID / SLURM_NTASKS;
//   5. nothing set: rank 0 of 1 (source "default").
// An explicit value given alone pins its half; the other comes from the first of 2..5 that
// sets it. torchrun's variables win over Slurm's because under `srun torchrun` SLURM_PROCID
// counts the nodes' launchers, not the training processes, while RANK counts every process.
//
// Inconsistent variables are InvalidArgument naming them (a variable set to a non-number, RANK
// without WORLD_SIZE, WORLD_SIZE > 1 without RANK, LOCAL_RANK > RANK, an array task outside
// MIN..MIN+COUNT-1, SLURM_PROCID >= SLURM_NTASKS, rank >= world); an empty variable is unset.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "libshard/status.h"

namespace libshard {

struct WorldRequest {
  std::optional<uint64_t> rank;
  std::optional<uint64_t> world_size;
  std::string source = "arguments";  // what the explicit values are, for messages and World
};

struct World {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  std::optional<uint32_t> local_rank;  // LOCAL_RANK or SLURM_LOCALID, when set
  // Where rank and world_size came from: "arguments", "torch.distributed", "RANK/WORLD_SIZE",
  // "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT", "SLURM_PROCID/SLURM_NTASKS" or "default".
  std::string source;
};

// The environment as ResolveWorld reads it: the value of a variable, nullopt when unset.
using Environment = std::function<std::optional<std::string>(const std::string& name)>;
Environment ProcessEnvironment();  // getenv
Environment MapEnvironment(std::map<std::string, std::string> variables);

Result<World> ResolveWorld(const WorldRequest& request, const Environment& environment);

// How a world's ranks sit on nodes, for the node-local order (NodeLocalOrder,
// docs/ORDER.md §5). Ranks are numbered node by node: rank = node_rank x local_world_size +
// local_rank, as torchrun and Slurm's block distribution number them.
struct Nodes {
  uint32_t nodes = 1;
  uint32_t local_world_size = 1;  // world_size / nodes
  uint32_t node_rank = 0;         // rank / local_world_size
  uint32_t local_rank = 0;        // rank % local_world_size
  // Where `nodes` came from: "arguments", "GROUP_WORLD_SIZE", "WORLD_SIZE/LOCAL_WORLD_SIZE",
  // "SLURM_JOB_NUM_NODES" or "default" (one node).
  std::string source;
};

struct NodesRequest {
  std::optional<uint64_t> nodes;      // LoaderOptions::nodes, when not 0
  std::optional<uint64_t> node_rank;  // LoaderOptions::node_rank, when not kAutoNodeRank
};

// The nodes of rank `rank` of `world_size` (a resolved World). nodes: the explicit value, else
// torchrun's GROUP_WORLD_SIZE, else WORLD_SIZE / LOCAL_WORLD_SIZE, else SLURM_JOB_NUM_NODES (or
// SLURM_NNODES), else 1. The node: rank / (world_size / nodes); an explicit node_rank, torchrun's
// GROUP_RANK or Slurm's SLURM_NODEID (read where nodes came from the same launcher) that
// disagrees is InvalidArgument, as is a LOCAL_RANK / SLURM_LOCALID other than rank mod the ranks
// per node, and a world_size that is not a multiple of nodes: the message names the variables.
Result<Nodes> ResolveNodes(uint32_t rank, uint32_t world_size, const NodesRequest& request,
                           const Environment& environment);

}  // namespace libshard
