// ResolveWorld (libshard/world.h): one rule for the ranks of the Loader, the Writer and pack.
#include "libshard/world.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <utility>

namespace libshard {
namespace {

constexpr uint64_t kMaxWorld = UINT32_MAX;

// The variable as a number; nullopt when unset or empty.
Result<std::optional<uint64_t>> Number(const Environment& env, const std::string& name) {
  const std::optional<std::string> value = env(name);
  if (!value || value->empty()) return std::optional<uint64_t>();
  uint64_t v = 0;
  const char* end = value->data() + value->size();
  auto [ptr, ec] = std::from_chars(value->data(), end, v);
  if (ec != std::errc() || ptr != end)
    return Status::InvalidArgument("environment variable " + name + "='" + *value +
                                   "' is not a non-negative integer");
  return std::optional<uint64_t>(v);
}

Status Inconsistent(const std::string& what) {
  return Status::InvalidArgument("inconsistent launcher variables: " + what +
                                 "; fix the launcher's environment or give rank and "
                                 "world_size explicitly");
}

struct FromEnvironment {
  uint64_t rank = 0;
  uint64_t world = 1;
  std::string source = "default";
};

Result<FromEnvironment> ReadEnvironment(const Environment& env) {
  LIBSHARD_ASSIGN_OR_RETURN(auto rank, Number(env, "RANK"));
  LIBSHARD_ASSIGN_OR_RETURN(auto world, Number(env, "WORLD_SIZE"));
  LIBSHARD_ASSIGN_OR_RETURN(auto local, Number(env, "LOCAL_RANK"));
  if (world || rank) {
    if (!world)
      return Inconsistent("RANK=" + std::to_string(*rank) + " is set but WORLD_SIZE is not");
    if (!rank && *world > 1)
      return Inconsistent("WORLD_SIZE=" + std::to_string(*world) + " is set but RANK is not");
    if (local && rank && *local > *rank)
      return Inconsistent("LOCAL_RANK=" + std::to_string(*local) + " is above RANK=" +
                          std::to_string(*rank));
    return FromEnvironment{rank.value_or(0), *world, "RANK/WORLD_SIZE"};
  }
  LIBSHARD_ASSIGN_OR_RETURN(auto task, Number(env, "SLURM_ARRAY_TASK_ID"));
  LIBSHARD_ASSIGN_OR_RETURN(auto task_min, Number(env, "SLURM_ARRAY_TASK_MIN"));
  LIBSHARD_ASSIGN_OR_RETURN(auto task_count, Number(env, "SLURM_ARRAY_TASK_COUNT"));
  LIBSHARD_ASSIGN_OR_RETURN(auto procid, Number(env, "SLURM_PROCID"));
  LIBSHARD_ASSIGN_OR_RETURN(auto ntasks, Number(env, "SLURM_NTASKS"));
  const uint64_t per = ntasks.value_or(1);
  const uint64_t proc = procid.value_or(0);
  if ((ntasks || task_count) && (per == 0 || proc >= per))
    return Inconsistent("SLURM_PROCID=" + std::to_string(proc) + " is not below SLURM_NTASKS=" +
                        std::to_string(per));
  if (task_count) {
    if (!task) return Inconsistent("SLURM_ARRAY_TASK_COUNT is set but SLURM_ARRAY_TASK_ID is not");
    const uint64_t t0 = task_min.value_or(0);
    if (*task < t0 || *task - t0 >= *task_count)
      return Inconsistent("SLURM_ARRAY_TASK_ID=" + std::to_string(*task) + " is not in " +
                          std::to_string(t0) + ".." + std::to_string(t0) + "+" +
                          std::to_string(*task_count) +
                          "-1 (SLURM_ARRAY_TASK_MIN..+SLURM_ARRAY_TASK_COUNT-1): an array with "
                          "gaps or steps (--array=1,5 or 0-15:4) cannot be numbered as ranks");
    if (*task_count > kMaxWorld || per > kMaxWorld || *task_count * per > kMaxWorld)
      return Inconsistent("SLURM_ARRAY_TASK_COUNT x SLURM_NTASKS is above " +
                          std::to_string(kMaxWorld));
    return FromEnvironment{(*task - t0) * per + proc, *task_count * per,
                           "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT"};
  }
  if (ntasks) return FromEnvironment{proc, per, "SLURM_PROCID/SLURM_NTASKS"};
  return FromEnvironment{};
}

}  // namespace

Environment ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Environment MapEnvironment(std::map<std::string, std::string> variables) {
  return [vars = std::move(variables)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

Result<World> ResolveWorld(const WorldRequest& request, const Environment& environment) {
  World w;
  uint64_t rank = 0, world = 1;
  if (request.rank && request.world_size) {
    rank = *request.rank, world = *request.world_size, w.source = request.source;
  } else {
    // The launcher's variables are read only when something is left to resolve, so that bad
    // ones do not fail a caller that gave both values.
    LIBSHARD_ASSIGN_OR_RETURN(const FromEnvironment env, ReadEnvironment(environment));
    rank = request.rank.value_or(env.rank);
    world = request.world_size.value_or(env.world);
    w.source = request.rank || request.world_size ? request.source + " and " + env.source
                                                  : env.source;
  }
  if (world < 1 || world > kMaxWorld || rank >= world)
    return Status::InvalidArgument("need 0 <= rank < world_size, got rank=" +
                                   std::to_string(rank) + ", world_size=" +
                                   std::to_string(world) + " (from " + w.source + ")");
  w.rank = static_cast<uint32_t>(rank);
  w.world_size = static_cast<uint32_t>(world);
  Result<std::optional<uint64_t>> local = Number(environment, "LOCAL_RANK");
  if (local.ok() && !*local) local = Number(environment, "SLURM_LOCALID");
  if (local.ok() && *local && **local <= UINT32_MAX)
    w.local_rank = static_cast<uint32_t>(**local);
  return w;
}

Result<Nodes> ResolveNodes(uint32_t rank, uint32_t world_size, const NodesRequest& request,
                           const Environment& environment) {
  Nodes n;
  uint64_t nodes = 1;
  n.source = "default";
  bool from_torchrun = false;
  bool from_slurm = false;
  if (request.nodes) {
    nodes = *request.nodes;
    n.source = "arguments";
  } else {
    LIBSHARD_ASSIGN_OR_RETURN(auto group_world, Number(environment, "GROUP_WORLD_SIZE"));
    LIBSHARD_ASSIGN_OR_RETURN(auto env_world, Number(environment, "WORLD_SIZE"));
    LIBSHARD_ASSIGN_OR_RETURN(auto local_world, Number(environment, "LOCAL_WORLD_SIZE"));
    LIBSHARD_ASSIGN_OR_RETURN(auto slurm_nodes, Number(environment, "SLURM_JOB_NUM_NODES"));
    if (!slurm_nodes) {
      LIBSHARD_ASSIGN_OR_RETURN(slurm_nodes, Number(environment, "SLURM_NNODES"));
    }
    if (group_world) {
      nodes = *group_world, n.source = "GROUP_WORLD_SIZE", from_torchrun = true;
    } else if (env_world && local_world) {
      if (*local_world == 0 || *env_world % *local_world != 0)
        return Inconsistent("WORLD_SIZE=" + std::to_string(*env_world) +
                            " is not a multiple of LOCAL_WORLD_SIZE=" +
                            std::to_string(*local_world));
      nodes = *env_world / *local_world, n.source = "WORLD_SIZE/LOCAL_WORLD_SIZE";
      from_torchrun = true;
    } else if (slurm_nodes) {
      nodes = *slurm_nodes, n.source = "SLURM_JOB_NUM_NODES", from_slurm = true;
    }
  }
  if (nodes == 0 || nodes > world_size || world_size % nodes != 0)
    return Status::InvalidArgument(
        "the node-local order needs the " + std::to_string(world_size) +
        " ranks split evenly over the nodes, but nodes=" + std::to_string(nodes) + " (from " +
        n.source + ") does not divide world_size " + std::to_string(world_size) +
        "; give nodes= explicitly, or run the same number of ranks on every node");
  n.nodes = static_cast<uint32_t>(nodes);
  n.local_world_size = world_size / n.nodes;
  n.node_rank = rank / n.local_world_size;
  n.local_rank = rank % n.local_world_size;
  const auto numbered = [&](const std::string& what) {
    return Status::InvalidArgument(
        "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " on " +
        std::to_string(n.nodes) + " nodes of " + std::to_string(n.local_world_size) +
        " ranks falls on node " + std::to_string(n.node_rank) + " as local rank " +
        std::to_string(n.local_rank) + ", but " + what +
        ": the node-local order needs ranks numbered node by node (rank = node_rank x ranks per "
        "node + local rank), as torchrun and srun number them; fix the launcher's numbering or "
        "nodes=");
  };
  std::optional<uint64_t> node_rank = request.node_rank;
  std::string node_rank_name = "node_rank";
  if (!node_rank && (from_torchrun || from_slurm)) {
    node_rank_name = from_torchrun ? "GROUP_RANK" : "SLURM_NODEID";
    LIBSHARD_ASSIGN_OR_RETURN(node_rank, Number(environment, node_rank_name));
  }
  if (node_rank && *node_rank != n.node_rank)
    return numbered(node_rank_name + " is " + std::to_string(*node_rank));
  if (from_torchrun || from_slurm) {
    const std::string local_name = from_torchrun ? "LOCAL_RANK" : "SLURM_LOCALID";
    LIBSHARD_ASSIGN_OR_RETURN(auto local, Number(environment, local_name));
    if (local && *local != n.local_rank)
      return numbered(local_name + " is " + std::to_string(*local));
  }
  return n;
}

}  // namespace libshard
