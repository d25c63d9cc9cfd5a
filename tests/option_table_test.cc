// The loader's option table (LoaderOptionTable): every member reachable by its name, bounds and
// errors in one style, spellings, and ResolveLoaderOptions deciding the "auto" settings once.
#include "libshard/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

namespace libshard {
namespace {

using ::testing::HasSubstr;

const OptionTable<LoaderOptions>& Table() { return LoaderOptionTable(); }

void ExpectInvalid(const Status& s, const std::string& words) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(words));
}

TEST(LoaderOptionTableTest, RowsAreNamedOnceWithDocAndDefault) {
  std::set<std::string_view> names;
  for (const auto& row : Table().specs()) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    for (std::string_view a : row.aliases) EXPECT_TRUE(names.insert(a).second) << a;
    EXPECT_FALSE(row.doc.empty()) << row.name;
    EXPECT_FALSE(row.default_value.empty()) << row.name;
    EXPECT_FALSE(row.py_type.empty()) << row.name;
  }
  for (const char* name : {"shuffle", "seed", "batch_size", "max_tokens", "token_budget",
                           "bucket_window", "collate", "memory_budget", "queue_depth", "verify"})
    EXPECT_NE(Table().Find(name), nullptr) << name;
  EXPECT_EQ(Table().Find("budget"), Table().Find("token_budget"));
  EXPECT_EQ(Table().Find("nope"), nullptr);
}

TEST(LoaderOptionTableTest, SetsMembersFromValues) {
  LoaderOptions o;
  ASSERT_TRUE(Table().Set(o, "batch_size", OptionValue::Integer(8)).ok());
  ASSERT_TRUE(Table().Set(o, "collate", OptionValue::Text("pad")).ok());
  ASSERT_TRUE(Table().Set(o, "budget", OptionValue::Text("sum")).ok());
  ASSERT_TRUE(Table().Set(o, "memory_budget", OptionValue::Text("64MiB")).ok());
  ASSERT_TRUE(Table().Set(o, "fields", OptionValue::TextList({"input_ids"})).ok());
  ASSERT_TRUE(Table().Set(o, "verify", OptionValue::Bool(true)).ok());
  ASSERT_TRUE(Table().Set(o, "bucket_window", OptionValue::None()).ok());
  EXPECT_EQ(o.batch_size, 8u);
  EXPECT_EQ(o.collate, Collate::kPad);
  EXPECT_EQ(o.token_budget, TokenBudget::kSum);
  EXPECT_EQ(o.memory_budget, uint64_t{64} << 20);
  EXPECT_EQ(o.fields, std::vector<std::string>{"input_ids"});
  EXPECT_TRUE(o.verify_checksums);
  ASSERT_TRUE(Table().Set(o, "verify", OptionValue::Bool(false)).ok());
  EXPECT_FALSE(o.verify_checksums);
  ASSERT_TRUE(Table().Set(o, "verify", OptionValue::None()).ok());
  EXPECT_TRUE(o.verify_checksums);
  ASSERT_TRUE(Table().Set(o, "pin_memory", OptionValue::Bool(false)).ok());
  EXPECT_EQ(o.pin_memory, PinMemory::kOff);
  ASSERT_TRUE(Table().Set(o, "pin_memory", OptionValue::Text("on")).ok());
  EXPECT_EQ(o.pin_memory, PinMemory::kOn);
  ASSERT_TRUE(Table().Set(o, "pin_memory", OptionValue::Bool(true)).ok());
  EXPECT_EQ(o.pin_memory, PinMemory::kAuto);
  EXPECT_EQ(o.bucket_window, 0u);
  ASSERT_TRUE(Table().Set(o, "bucket_window", OptionValue::Text("auto")).ok());
  EXPECT_EQ(o.bucket_window, kAutoBucketWindow);
  ASSERT_TRUE(Table().Set(o, "batch_size", OptionValue::None()).ok());
  EXPECT_EQ(o.batch_size, 0u);
  // CLI text, converted as the row's type says.
  ASSERT_TRUE(Table().SetFromText(o, "shuffle", "0").ok());
  ASSERT_TRUE(Table().SetFromText(o, "max_tokens", "8192").ok());
  EXPECT_EQ(o.order, Order::Unshuffled());
  EXPECT_EQ(o.max_tokens, 8192u);
  ASSERT_TRUE(Table().Set(o, "shuffle", OptionValue::Integer(1)).ok());
  EXPECT_EQ(o.order, Order::Shuffled());
  ExpectInvalid(Table().Set(o, "shuffle", OptionValue::Integer(2)), "True or False");
}

TEST(LoaderOptionTableTest, ErrorsNameTheOptionAsSpelled) {
  LoaderOptions o;
  ExpectInvalid(Table().Set(o, "queue_depth", OptionValue::Integer(5000)),
                "Loader option 'queue_depth' = 5000 is out of range; use 1..4096");
  ExpectInvalid(Table().Set(o, "queue_depth", OptionValue::Integer(1, true)), "= -1");
  ExpectInvalid(Table().Set(o, "queue_depth", OptionValue::Text("deep")), "is not a number");
  ExpectInvalid(Table().Set(o, "budget", OptionValue::Text("most")),
                "Loader option 'budget' = 'most' is not one of auto, sum, padded");
  ExpectInvalid(Table().Set(o, "batch_size", OptionValue::Integer(0)), "or None (single samples)");
  ExpectInvalid(Table().Set(o, "no_such", OptionValue::Integer(1)),
                "Loader option 'no_such' is not a known option");
  ExpectInvalid(Table().Set(o, "memory_budget", OptionValue::Text("2Gigs")), "2Gigs");
  ExpectInvalid(Table().Set(o, "shuffle", OptionValue::Text("yes")), "True or False");
  ExpectInvalid(Table().Set(o, "slow_wait_warning_seconds", OptionValue::Number(-1)), ">= 0");
  // None is "all fields"; an empty selection is a mistake, not "all".
  ExpectInvalid(Table().Set(o, "fields", OptionValue::TextList({})), "selects no field");
  // The CLI never speaks through the library's errors.
  const Status s = Table().Set(o, "max_len", OptionValue::Text("x"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("--")));
}

TEST(LoaderOptionTableTest, ValidationUsesTheTableBounds) {
  LoaderOptions o;
  EXPECT_TRUE(ValidateLoaderOptions(o).ok());
  o.queue_depth = 0;
  ExpectInvalid(ValidateLoaderOptions(o), "Loader option 'queue_depth' = 0 is out of range");
  o = {};
  o.worker_threads = kMaxLoaderWorkerThreads + 1;
  ExpectInvalid(ValidateLoaderOptions(o), "worker_threads");
  o = {};
  o.batch_size = 2;
  o.max_tokens = 10;
  ExpectInvalid(ValidateLoaderOptions(o), "batch_size and max_tokens are exclusive");
  o = {};
  o.padding_value = 3;
  o.collate = Collate::kPack;
  ExpectInvalid(ValidateLoaderOptions(o), "collate='pad' only");
}

TEST(LoaderOptionTableTest, AutoSettingsAreResolvedOnce) {
  LoaderOptions o;
  o.collate = Collate::kPad;
  o.batch_size = 4;
  Result<LoaderOptions> r = ResolveLoaderOptions(o);
  ASSERT_TRUE(r.ok());
  // As Python's bucket_window="auto": on, 4096 samples, with padded batches.
  EXPECT_EQ(r->bucket_window, kAutoBucketWindowSize);
  EXPECT_EQ(r->token_budget, TokenBudget::kPadded);
  o.collate = Collate::kPack;
  r = ResolveLoaderOptions(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bucket_window, 0u);
  EXPECT_EQ(r->token_budget, TokenBudget::kSum);
  o.collate = Collate::kNone;
  o.consumer_pads = true;  // Python's pad_collate
  r = ResolveLoaderOptions(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bucket_window, kAutoBucketWindowSize);
  EXPECT_EQ(r->token_budget, TokenBudget::kPadded);
  o.batch_size = 1;  // single samples: nothing to group
  r = ResolveLoaderOptions(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bucket_window, 0u);
  o.bucket_window = 64;  // explicit wins, and is checked
  ExpectInvalid(ResolveLoaderOptions(o).status(), "bucket_window");
}

}  // namespace
}  // namespace libshard
