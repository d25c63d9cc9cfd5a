// libshard_support/text.h: the UTF-8 rule for names (FORMAT.md §3.2) and safe rendering of file bytes;
// Schema::Validate applies the rule, so every writer (not only pack) refuses a non-UTF-8 name.
#include "libshard_support/text.h"

#include <gtest/gtest.h>

#include "libshard/schema.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

TEST(TextTest, IsValidUtf8FollowsRfc3629) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));        // U+10FFFF, the last code point
  EXPECT_FALSE(IsValidUtf8("caf\xed\xb3\xa9"));        // a surrogate (Python's surrogateescape)
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));               // overlong
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));           // overlong, 3 bytes
  EXPECT_FALSE(IsValidUtf8("\xf0\x80\x80\xaf"));       // overlong, 4 bytes
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));       // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));               // truncated
  EXPECT_FALSE(IsValidUtf8("\xe2\x28\xa1"));           // bad continuation
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\x80"));                   // a lone continuation byte
}

TEST(TextTest, EscapeNonUtf8KeepsValidTextAndEscapesTheRest) {
  EXPECT_EQ(EscapeNonUtf8("ok \xc3\xa9"), "ok \xc3\xa9");
  EXPECT_EQ(EscapeNonUtf8("x\xed\xb3\xa9"), "x\\xed\\xb3\\xa9");
  EXPECT_TRUE(IsValidUtf8(EscapeNonUtf8("\xff\xfe tail")));
}

TEST(TextTest, PrintableBytesIsBoundedAndAscii) {
  EXPECT_EQ(PrintableBytes("a\nb\x01\xff"), "a\\x0ab\\x01\\xff");
  EXPECT_EQ(PrintableBytes(std::string(300, 'x'), 10), std::string(10, 'x') + "...");
  EXPECT_EQ(PrintableBytes(""), "");
}

TEST(TextTest, JsonTooDeepAtCountsBracketsOutsideStrings) {
  constexpr size_t npos = std::string_view::npos;
  EXPECT_EQ(JsonTooDeepAt("", 1), npos);
  EXPECT_EQ(JsonTooDeepAt("[[1], {\"a\": 2}]", 2), npos);
  EXPECT_EQ(JsonTooDeepAt("[[[1]]]", 2), 2u);                       // the third '['
  EXPECT_EQ(JsonTooDeepAt("[\"[[[[\", {\"k\": \"\\\"[[\"}]", 2), npos);  // strings, escapes
  EXPECT_EQ(JsonTooDeepAt(std::string(200000, '['), 64), 64u);
  EXPECT_EQ(JsonTooDeepAt("]]]][[", 2), npos);                      // malformed: left to the parser
}

TEST(TextTest, SchemaRefusesANameThatIsNotUtf8) {
  Schema schema;
  schema.fields.push_back(Field{"x\xed\xb3\xa9", DType::kFloat32, 1, 0});
  const Status st = schema.Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x\\xed\\xb3\\xa9"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("UTF-8"), std::string::npos) << st.ToString();
  EXPECT_TRUE(IsValidUtf8(st.message()));

  testing::TempDir dir;
  auto writer = Writer::Create((dir.path() / "out").string(), schema);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kInvalidArgument);

  schema.fields[0].name = "caf\xc3\xa9";  // well-formed UTF-8 is fine
  EXPECT_TRUE(schema.Validate().ok());
}

}  // namespace
}  // namespace libshard
