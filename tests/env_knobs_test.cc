// The table of LIBSHARD_* environment variables (util/env_knobs.h): values parsed as the options
// are, a bad value an error naming the variable, every variable the library reads in the table,
// and docs/guide/environment.md showing the table as it is.
#include "util/env_knobs.h"

#include <gtest/gtest.h>

#include "libshard/dataset.h"
#include "libshard/follow.h"
#include "libshard/schema.h"
#include "libshard/storage.h"
#include "libshard/upgrade.h"
#include "libshard/writer.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace libshard {
namespace {

namespace fs = std::filesystem;

const fs::path kRepo = fs::path(LIBSHARD_TEST_DATA_DIR).parent_path().parent_path();

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class EnvKnobsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const auto& s : EnvKnobTable().specs()) ::unsetenv(std::string(s.name).c_str());
  }
};

TEST_F(EnvKnobsTest, DefaultsWhenUnset) {
  for (const auto& s : EnvKnobTable().specs()) ::unsetenv(std::string(s.name).c_str());
  Result<EnvKnobs> k = ReadEnvKnobs();
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->cache_block_size, uint64_t{4} << 20);
  EXPECT_EQ(k->cache_min_free, EnvKnobs::kUnset);
  EXPECT_EQ(k->s3_max_attempts, 8u);
  EXPECT_TRUE(k->s3_content_md5);
  EXPECT_LT(k->stats_seconds, 0);
}

TEST_F(EnvKnobsTest, ValuesAreParsedAsOptionsAre) {
  ::setenv("LIBSHARD_CACHE_MIN_FREE", "10GiB", 1);  // was ignored in silence before
  ::setenv("LIBSHARD_CACHE_BLOCK_SIZE", "1MiB", 1);
  ::setenv("LIBSHARD_S3_PART_SIZE", "8388608", 1);
  ::setenv("LIBSHARD_S3_CONTENT_MD5", "0", 1);
  ::setenv("LIBSHARD_STATS", "2.5", 1);
  ::setenv("LIBSHARD_ENGINE", "pread", 1);
  Result<EnvKnobs> k = ReadEnvKnobs();
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->cache_min_free, uint64_t{10} << 30);
  EXPECT_EQ(k->cache_block_size, uint64_t{1} << 20);
  EXPECT_EQ(k->s3_part_size, uint64_t{8} << 20);
  EXPECT_FALSE(k->s3_content_md5);
  EXPECT_EQ(k->stats_seconds, 2.5);
  EXPECT_EQ(k->engine, "pread");
  ::setenv("LIBSHARD_CACHE_MIN_FREE", "0", 1);
  EXPECT_EQ(ReadEnvKnobs()->cache_min_free, 0u);
}

TEST_F(EnvKnobsTest, BadValueIsAnErrorNamingTheVariable) {
  const std::pair<const char*, const char*> bad[] = {{"LIBSHARD_CACHE_MIN_FREE", "lots"},
                                                     {"LIBSHARD_CACHE_BLOCK_SIZE", "5000"},
                                                     {"LIBSHARD_CACHE_BLOCK_SIZE", "2GiB"},
                                                     {"LIBSHARD_S3_CONNECTIONS", "0"},
                                                     {"LIBSHARD_S3_MAX_ATTEMPTS", "-1"},
                                                     {"LIBSHARD_S3_CONTENT_MD5", "maybe"},
                                                     {"LIBSHARD_ENGINE", "fast"},
                                                     {"LIBSHARD_STATS", "-3"},
                                                     {"LIBSHARD_S3_ADDRESSING", "sideways"},
                                                     {"LIBSHARD_PLANES_KERNEL", "avx9"}};
  for (const auto& [name, value] : bad) {
    ::setenv(name, value, 1);
    Status st = ReadEnvKnobs().status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << name << "=" << value;
    EXPECT_NE(st.message().find(std::string("environment variable '") + name + "'"),
              std::string::npos)
        << st.ToString();
    ::unsetenv(name);
    EXPECT_TRUE(ReadEnvKnobs().ok());
  }
}

// A bad variable is refused by every entry point of the library that takes a location, whether
// or not it reads that variable (storage::OpenStorage reads the whole table first), naming it.
TEST_F(EnvKnobsTest, EveryEntryPointRefusesABadVariableNamingIt) {
  const fs::path dir = fs::temp_directory_path() / ("env_knobs_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string missing = (dir / "absent").string();
  Schema schema;
  schema.fields.push_back({"input_ids", DType::kInt64, 1, 0});
  schema.length_field = 0;
  for (const auto& s : EnvKnobTable().specs()) {
    const char* bad = nullptr;
    switch (s.type) {
      case OptionType::kCount: bad = "many"; break;
      case OptionType::kBytes: bad = "lots"; break;
      case OptionType::kBool: bad = "maybe"; break;
      case OptionType::kNumber: bad = "soon"; break;
      case OptionType::kChoice: bad = "bogus"; break;
      default: continue;  // a path: any text is one
    }
    const std::string name(s.name);
    ::setenv(name.c_str(), bad, 1);
    const std::string want = "environment variable '" + name + "'";
    auto expect = [&](const Status& st, const char* entry) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << entry << ": " << st.ToString();
      EXPECT_NE(st.message().find(want), std::string::npos) << entry << ": " << st.ToString();
    };
    expect(Dataset::Open(missing).status(), "Dataset::Open");
    expect(DatasetFollower::Open(missing).status(), "DatasetFollower::Open");
    expect(Writer::Create((dir / name).string(), schema).status(), "Writer::Create");
    expect(Writer::Resume(missing).status(), "Writer::Resume");
    expect(UpgradeIndex(missing).status(), "UpgradeIndex");
    expect(DescribeStorage("s3://bucket/prefix").status(), "DescribeStorage");
    EXPECT_FALSE(fs::exists(dir / name / "manifest.json"));
    ::unsetenv(name.c_str());
  }
  fs::remove_all(dir);
}

TEST_F(EnvKnobsTest, OrDefaultsKeepsTheGoodVariablesWhenOneIsBad) {
  ::setenv("LIBSHARD_S3_CONNECTIONS", "3", 1);
  ::setenv("LIBSHARD_ENGINE", "sideways", 1);
  const EnvKnobs k = EnvKnobsOrDefaults();
  EXPECT_EQ(k.s3_connections, 3u);
  EXPECT_EQ(k.engine, "");
}

TEST_F(EnvKnobsTest, EveryVariableTheLibraryReadsIsInTheTable) {
  std::set<std::string> table;
  for (const auto& s : EnvKnobTable().specs()) table.insert(std::string(s.name));
  // Any "LIBSHARD_X" string literal in the library's sources names a variable of the table,
  // and only env_knobs.cc calls getenv with one.
  const std::regex literal("\"(LIBSHARD_[A-Z0-9_]+)\"");
  for (const auto& e : fs::recursive_directory_iterator(kRepo / "libshard" / "src")) {
    if (!e.is_regular_file()) continue;
    const std::string text = Read(e.path());
    for (std::sregex_iterator it(text.begin(), text.end(), literal), end; it != end; ++it)
      EXPECT_TRUE(table.count((*it)[1].str()))
          << e.path() << " names " << (*it)[1].str() << ", which is not in util/env_knobs.cc";
    if (e.path().filename() != "env_knobs.cc")
      EXPECT_EQ(text.find("getenv(\"LIBSHARD_"), std::string::npos)
          << e.path() << " reads a LIBSHARD_ variable itself; read it through ReadEnvKnobs";
  }
}

TEST_F(EnvKnobsTest, TheGuideShowsTheTable) {
  const std::string page = Read(kRepo / "docs" / "guide" / "environment.md");
  const std::string table = EnvKnobsMarkdown();
  EXPECT_NE(page.find(table), std::string::npos)
      << "docs/guide/environment.md must hold the table exactly as util/env_knobs.cc has it:\n"
      << table;
}

}  // namespace
}  // namespace libshard
