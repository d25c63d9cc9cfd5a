// ResolveWorld (libshard/world.h) over environment maps: the precedence, the Slurm array
// numbering and the errors on inconsistent launcher variables.
#include "libshard/world.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace libshard {
namespace {

using ::testing::HasSubstr;

Result<World> Resolve(std::map<std::string, std::string> env, WorldRequest request = {
                                                                  std::nullopt, std::nullopt}) {
  return ResolveWorld(request, MapEnvironment(std::move(env)));
}

void ExpectWorld(const Result<World>& w, uint32_t rank, uint32_t world, const std::string& from) {
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->rank, rank);
  EXPECT_EQ(w->world_size, world);
  EXPECT_EQ(w->source, from);
}

void ExpectInvalid(const Result<World>& w, const std::string& words) {
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr(words));
}

TEST(WorldTest, NothingSetIsRankZeroOfOne) { ExpectWorld(Resolve({}), 0, 1, "default"); }

TEST(WorldTest, ExplicitValuesWinAndSkipTheEnvironment) {
  // Bad variables do not matter when both values are given.
  ExpectWorld(Resolve({{"RANK", "x"}, {"WORLD_SIZE", "8"}}, {2, 4, "torch.distributed"}), 2, 4,
              "torch.distributed");
  ExpectWorld(Resolve({{"RANK", "5"}, {"WORLD_SIZE", "8"}}, {1, 2}), 1, 2, "arguments");
}

TEST(WorldTest, AnExplicitHalfPinsOnlyItself) {
  ExpectWorld(Resolve({{"RANK", "5"}, {"WORLD_SIZE", "8"}}, {std::nullopt, 16}), 5, 16,
              "arguments and RANK/WORLD_SIZE");
  ExpectWorld(Resolve({}, {std::nullopt, 4}), 0, 4, "arguments and default");
  ExpectInvalid(Resolve({{"RANK", "5"}, {"WORLD_SIZE", "8"}}, {std::nullopt, 4}),
                "rank=5, world_size=4");
}

TEST(WorldTest, TorchrunWinsOverSlurm) {
  // srun torchrun: SLURM_PROCID numbers the launchers, RANK every process.
  ExpectWorld(Resolve({{"RANK", "7"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "3"},
                       {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}),
              7, 16, "RANK/WORLD_SIZE");
  Result<World> w = Resolve({{"RANK", "7"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "3"}});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->local_rank, 3u);
}

TEST(WorldTest, SlurmTasks) {
  ExpectWorld(Resolve({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"}}), 2,
              3, "SLURM_PROCID/SLURM_NTASKS");
  // SLURM_PROCID alone (no task count) is not a world: the default.
  ExpectWorld(Resolve({{"SLURM_PROCID", "0"}}), 0, 1, "default");
}

TEST(WorldTest, SlurmArraysNumberTasksFromTheirMinimum) {
  ExpectWorld(Resolve({{"SLURM_ARRAY_TASK_ID", "6"}, {"SLURM_ARRAY_TASK_MIN", "5"},
                       {"SLURM_ARRAY_TASK_COUNT", "3"}}),
              1, 3, "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT");
  // Each array task of 2 processes: rank = task * 2 + procid.
  ExpectWorld(Resolve({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                       {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_NTASKS", "2"},
                       {"SLURM_PROCID", "1"}}),
              5, 8, "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT");
}

TEST(WorldTest, InconsistentVariablesAreNamed) {
  ExpectInvalid(Resolve({{"RANK", "two"}, {"WORLD_SIZE", "4"}}), "RANK='two'");
  ExpectInvalid(Resolve({{"RANK", "1"}}), "RANK=1 is set but WORLD_SIZE is not");
  ExpectInvalid(Resolve({{"WORLD_SIZE", "4"}}), "WORLD_SIZE=4 is set but RANK is not");
  ExpectWorld(Resolve({{"WORLD_SIZE", "1"}}), 0, 1, "RANK/WORLD_SIZE");
  ExpectInvalid(Resolve({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), "rank=4, world_size=4");
  ExpectInvalid(Resolve({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "world_size=0");
  ExpectInvalid(Resolve({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}}),
                "LOCAL_RANK=2 is above RANK=1");
  ExpectInvalid(Resolve({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "3"}}),
                "SLURM_PROCID=3 is not below SLURM_NTASKS=3");
  ExpectInvalid(Resolve({{"SLURM_ARRAY_TASK_COUNT", "3"}}), "SLURM_ARRAY_TASK_ID is not");
  ExpectInvalid(Resolve({{"SLURM_ARRAY_TASK_ID", "9"}, {"SLURM_ARRAY_TASK_MIN", "1"},
                         {"SLURM_ARRAY_TASK_COUNT", "3"}}),
                "gaps or steps");
  ExpectInvalid(Resolve({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_MIN", "1"},
                         {"SLURM_ARRAY_TASK_COUNT", "3"}}),
                "SLURM_ARRAY_TASK_ID=0");
  ExpectInvalid(Resolve({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "70000"},
                         {"SLURM_NTASKS", "70000"}}),
                "above");
}

TEST(WorldTest, EmptyVariablesAreUnset) {
  ExpectWorld(Resolve({{"RANK", ""}, {"WORLD_SIZE", ""}, {"SLURM_NTASKS", "2"},
                       {"SLURM_PROCID", "1"}}),
              1, 2, "SLURM_PROCID/SLURM_NTASKS");
}

}  // namespace
}  // namespace libshard
