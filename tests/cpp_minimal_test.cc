// examples/cpp_minimal compiles against the public headers, iterates a dataset, checkpoints and
// resumes exactly; the snippet in its README is the code it runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

// The example's own main(), renamed; every header it includes is already included above.
#define main CppMinimalMain
#include "../examples/cpp_minimal/main.cc"
#undef main

namespace libshard {
namespace {

using libshard::testing::TempDir;

constexpr uint64_t kSamples = 40;

uint64_t LengthOf(uint64_t i) { return 50 + (i * 997) % 900; }

void WriteDataset(const std::string& dir) {
  Schema schema;
  schema.fields = {Field{"input_ids", DType::kInt64, 1, 0},
                   Field{"hidden_state", DType::kBFloat16, 2, 0}};
  schema.length_field = 0;
  WriterOptions options;
  options.fsync = false;
  auto writer = Writer::Create(dir, schema, options);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  for (uint64_t i = 0; i < kSamples; ++i) {
    const uint64_t length = LengthOf(i);
    std::vector<int64_t> ids(length, static_cast<int64_t>(i));
    std::vector<uint16_t> hidden(length * 8, 0x3f80);
    SampleInput input;
    input.tensors = {TensorInput{"input_ids", DType::kInt64, {length}, ids.data(), {}},
                     TensorInput{"hidden_state", DType::kBFloat16, {length, 8}, hidden.data(), {}}};
    ASSERT_TRUE((*writer)->Append(input).ok());
  }
  ASSERT_TRUE((*writer)->Finish().ok());
}

struct RunResult {
  int code = 0;
  uint64_t samples = 0, tokens = 0, batches = 0;
};

RunResult RunMinimal(std::vector<std::string> args) {
  args.insert(args.begin(), "cpp_minimal");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  RunResult run;
  run.code = CppMinimalMain(static_cast<int>(argv.size()), argv.data());
  std::istringstream out(::testing::internal::GetCapturedStdout());
  std::string word;
  while (out >> word) {
    if (word == "samples") out >> run.samples;
    if (word == "tokens") out >> run.tokens;
    if (word == "batches") out >> run.batches;
  }
  return run;
}

TEST(CppMinimal, CheckpointAndResumeReadEverySampleOnce) {
  TempDir dir;
  const std::string data = (dir / "data").string();
  const std::string state = (dir / "state.txt").string();
  WriteDataset(data);
  uint64_t all_tokens = 0;
  for (uint64_t i = 0; i < kSamples; ++i) all_tokens += LengthOf(i);

  const RunResult first = RunMinimal({data, state, "3"});
  ASSERT_EQ(first.code, 0);
  EXPECT_EQ(first.batches, 3u);
  EXPECT_GT(first.samples, 0u);
  EXPECT_LT(first.samples, kSamples);
  ASSERT_TRUE(std::filesystem::exists(state));

  const RunResult rest = RunMinimal({data, state});
  ASSERT_EQ(rest.code, 0);
  EXPECT_EQ(first.samples + rest.samples, kSamples);
  EXPECT_EQ(first.tokens + rest.tokens, all_tokens);
  // Token budget: each batch holds at most 4096 tokens, so 40 samples of ~500 need > 4 batches.
  EXPECT_GE(first.batches + rest.batches, all_tokens / 4096);

  const RunResult after_end = RunMinimal({data, state});
  EXPECT_EQ(after_end.code, 0);
  EXPECT_EQ(after_end.samples, 0u);
}

TEST(CppMinimal, UsageAndMissingDataset) {
  TempDir dir;
  EXPECT_EQ(RunMinimal({}).code, 2);
  EXPECT_EQ(RunMinimal({(dir / "nope").string(), (dir / "s").string()}).code, 1);
}

// The example's README shows the code between the "// [minimal]" markers of main.cc, verbatim;
// so does the top README once it shows the C++ loop (it names Loader::Create).
TEST(CppMinimal, ReadmeSnippetIsTheCompiledCode) {
  const std::filesystem::path root =
      std::filesystem::path(LIBSHARD_TEST_DATA_DIR).parent_path().parent_path();
  const std::string source =
      libshard::testing::ReadFileToString(root / "examples/cpp_minimal/main.cc");
  const std::string marker = "  // [minimal]\n";
  const size_t begin = source.find(marker);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = source.find(marker, begin + marker.size());
  ASSERT_NE(end, std::string::npos);
  std::string snippet;
  std::istringstream lines(source.substr(begin + marker.size(), end - begin - marker.size()));
  for (std::string line; std::getline(lines, line);) {
    snippet += (line.rfind("  ", 0) == 0 ? line.substr(2) : line) + "\n";  // drop main's indent
  }
  const std::string example_readme =
      libshard::testing::ReadFileToString(root / "examples/cpp_minimal/README.md");
  EXPECT_NE(example_readme.find(snippet), std::string::npos)
      << "examples/cpp_minimal/README.md must contain, verbatim:\n" << snippet;
  if (std::filesystem::exists(root / "README.md")) {
    const std::string readme = libshard::testing::ReadFileToString(root / "README.md");
    if (readme.find("Loader::Create") != std::string::npos) {
      EXPECT_NE(readme.find(snippet), std::string::npos)
          << "README.md shows the C++ loop; it must be examples/cpp_minimal's, verbatim:\n"
          << snippet;
    }
  }
}

}  // namespace
}  // namespace libshard
