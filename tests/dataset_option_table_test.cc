// DatasetOptionTable (libshard/dataset.h): the dataset settings every front end sets by name,
// decided once. cache_size means what DatasetOptions::cache_size means (0: no bound but the
// free-space floor) whether it comes from C++, Python (None or 0) or the CLI's text ("0").
#include <gtest/gtest.h>

#include <string>

#include "libshard/dataset.h"
#include "libshard/option_table.h"

namespace libshard {
namespace {

TEST(DatasetOptionTableTest, CacheSizeMeansTheSameEverywhere) {
  const OptionTable<DatasetOptions>& table = DatasetOptionTable();
  DatasetOptions o;
  o.cache_size = 7;
  // None and 0 (an int, or the text "0"): no bound.
  ASSERT_TRUE(table.Set(o, "cache_size", OptionValue::None()).ok());
  EXPECT_EQ(o.cache_size, 0u);
  o.cache_size = 7;
  ASSERT_TRUE(table.Set(o, "cache_size", OptionValue::Integer(0)).ok());
  EXPECT_EQ(o.cache_size, 0u);
  o.cache_size = 7;
  ASSERT_TRUE(table.SetFromText(o, "cache_size", "0").ok());
  EXPECT_EQ(o.cache_size, 0u);
  o.cache_size = 7;
  ASSERT_TRUE(table.Set(o, "cache_size", OptionValue::Text("0")).ok());  // Python's "0"
  EXPECT_EQ(o.cache_size, 0u);
  ASSERT_TRUE(table.SetFromText(o, "cache_size", "500GiB").ok());
  EXPECT_EQ(o.cache_size, uint64_t{500} << 30);
  ASSERT_TRUE(table.Set(o, "cache_size", OptionValue::Integer(4096)).ok());
  EXPECT_EQ(o.cache_size, 4096u);
  for (const OptionValue& bad : {OptionValue::Integer(1, /*negative=*/true),
                                 OptionValue::Text("lots"), OptionValue::Bool(true)}) {
    Status st = table.Set(o, "cache_size", bad);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad.Describe();
    EXPECT_NE(st.message().find("'cache_size'"), std::string::npos) << st.message();
  }
  ASSERT_TRUE(table.Set(o, "cache", OptionValue::Text("/nvme/cache")).ok());
  EXPECT_EQ(o.cache_dir, "/nvme/cache");
  ASSERT_TRUE(table.Set(o, "cache", OptionValue::None()).ok());
  EXPECT_EQ(o.cache_dir, "");
  const OptionSpec<DatasetOptions>* row = table.Find("cache_size");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->default_value, "None");
  EXPECT_FALSE(row->unset.empty());
}

}  // namespace
}  // namespace libshard
