// The Writer's and pack's option tables (WriterOptionTable, PackOptionTable): every row's
// default is the struct's default, values are checked against the row's bounds, and pack's
// checks name settings as the caller spells them.
#include <gtest/gtest.h>

#include <string>

#include "format_test_helpers.h"
#include "libshard/parallel_writer.h"
#include "pack/option_parsing.h"
#include "pack/pack.h"

namespace libshard::testing {
namespace {

// A row's default (a Python literal) as a value: "'4GiB'" a text, "None", "True", "64".
OptionValue FromDefault(OptionType type, std::string_view literal) {
  if (literal.size() >= 2 && literal.front() == '\'' && literal.back() == '\'')
    return OptionValue::Text(std::string(literal.substr(1, literal.size() - 2)));
  return option_table::FromText(type, literal);
}

template <typename Options>
void ExpectDefaultsAreTheStructs(const OptionTable<Options>& table) {
  int checked = 0;
  for (const OptionSpec<Options>& row : table.specs()) {
    if (!row.set || !row.get) continue;
    Options o;
    Status st = row.set(o, FromDefault(row.type, row.default_value), row.name);
    ASSERT_TRUE(st.ok()) << row.name << ": " << st.ToString();
    EXPECT_EQ(row.get(o), row.get(Options{})) << row.name;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(WriterOptionTableTest, DefaultsAreTheStructs) {
  ExpectDefaultsAreTheStructs(WriterOptionTable());
  ExpectDefaultsAreTheStructs(convert::PackOptionTable());
}

TEST(WriterOptionTableTest, ValuesAreCheckedAndSet) {
  const auto& t = WriterOptionTable();
  WriterConfig c;
  ASSERT_TRUE(t.Set(c, "queue_bytes", OptionValue::Text("64MiB")).ok());  // an alias
  EXPECT_EQ(c.in_flight_bytes, uint64_t{64} << 20);
  ASSERT_TRUE(t.Set(c, "compress", OptionValue::Text("zstd:5")).ok());
  EXPECT_EQ(c.compression, Compression::kZstd);
  EXPECT_EQ(c.zstd_level, 5);
  ASSERT_TRUE(t.Set(c, "compress", OptionValue::None()).ok());
  EXPECT_EQ(c.compression, Compression::kNone);
  ASSERT_TRUE(t.Set(c, "store_dtype", OptionValue::Text(" Float8_E4M3FN")).ok());
  EXPECT_TRUE(c.store_fp8);
  ASSERT_TRUE(t.Set(c, "store_dtype", OptionValue::None()).ok());
  EXPECT_FALSE(c.store_fp8);
  ExpectError(t.Set(c, "store_dtype", OptionValue::Text("int4")), StatusCode::kInvalidArgument,
              {"Writer option 'store_dtype'", "'int4'", "float8_e4m3fn"});
  ASSERT_TRUE(t.Set(c, "threads", OptionValue::None()).ok());
  EXPECT_EQ(c.threads, 0u);  // one per CPU, at most 4: resolved by ParallelWriter
  ExpectError(t.Set(c, "threads", OptionValue::Integer(3000)), StatusCode::kInvalidArgument,
              {"Writer option 'threads' = 3000 is out of range; use 1..1024"});
  ExpectError(t.Set(c, "shard_size", OptionValue::Integer(0)), StatusCode::kInvalidArgument,
              {"'shard_size'"});
  ExpectError(t.Set(c, "shard", OptionValue::Integer(1)), StatusCode::kInvalidArgument,
              {"'shard' is not a known option"});
}

TEST(PackOptionTableTest, CliFlagsAreAliases) {
  const auto& t = convert::PackOptionTable();
  convert::PackOptions o;
  ASSERT_TRUE(t.Set(o, "--shard-size", OptionValue::Text("1MiB")).ok());
  EXPECT_EQ(o.shard_size, uint64_t{1} << 20);
  ASSERT_TRUE(t.Set(o, "--part", OptionValue::Text("2/5")).ok());
  EXPECT_EQ(o.part_index, 2u);
  EXPECT_EQ(o.part_count, 5u);
  ASSERT_TRUE(t.Set(o, "window_bytes", OptionValue::Text("64MiB")).ok());
  EXPECT_EQ(o.in_flight_bytes, uint64_t{64} << 20);
  ASSERT_TRUE(t.Set(o, "window_bytes", OptionValue::Integer(0)).ok());  // 0 or None: automatic
  EXPECT_EQ(o.in_flight_bytes, 0u);
  ExpectError(t.Set(o, "--on-error", OptionValue::Text("ignore")), StatusCode::kInvalidArgument,
              {"pack option '--on-error'", "'ignore'"});
  EXPECT_EQ(convert::PackOptionName("append", convert::OptionSpelling::kCli), "--append");
  EXPECT_EQ(convert::PackOptionName("out", convert::OptionSpelling::kCli), "--output");
  EXPECT_EQ(convert::PackOptionName("src", convert::OptionSpelling::kCli), "SRC");
  EXPECT_EQ(convert::PackOptionName("append", convert::OptionSpelling::kApi), "'append'");
}

TEST(PackOptionTableTest, ChecksSpeakTheCallersSpelling) {
  convert::PackOptions o;
  o.source_root = "src";
  o.output = "out";
  o.resume = o.append = true;
  ExpectError(convert::ValidatePackOptions(o, convert::OptionSpelling::kCli),
              StatusCode::kInvalidArgument, {"--resume and --append exclude each other"});
  const Status api = convert::ValidatePackOptions(o);
  ExpectError(api, StatusCode::kInvalidArgument, {"'resume' and 'append' exclude each other"});
  EXPECT_EQ(api.message().find("--"), std::string::npos) << api.ToString();
  o.resume = o.append = false;
  o.output.clear();
  ExpectError(convert::ValidatePackOptions(o, convert::OptionSpelling::kCli),
              StatusCode::kInvalidArgument, {"no output", "--output"});
  ExpectError(convert::ValidatePackOptions(o), StatusCode::kInvalidArgument, {"no output", "'out'"});
  o.output = "out";
  o.compression = Compression::kZstd;
  o.store_fp8 = true;
  const Status both = convert::ValidatePackOptions(o);
  ExpectError(both, StatusCode::kInvalidArgument, {"exclude each other", "'store_dtype'"});
  EXPECT_EQ(both.message().find("--"), std::string::npos) << both.ToString();
}

}  // namespace
}  // namespace libshard::testing
