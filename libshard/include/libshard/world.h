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

}  // namespace libshard
