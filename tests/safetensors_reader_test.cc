// The .safetensors reader: real files from the safetensors package (make_pt_fixtures.py) and
// hand-made headers for every way a header can be wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "readers/source_file.h"
#include "readers_expect.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;
using convert::OpenSource;

class SafetensorsFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SafetensorsFixtureTest, MatchesLoadFile) { ExpectMatchesFixture(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Fixtures, SafetensorsFixtureTest,
    ::testing::ValuesIn(PtFixtureNames([](const std::string& n) {
      return n.find(".safetensors") != std::string::npos;
    })),
    [](const ::testing::TestParamInfo<std::string>& info) { return TestNameOf(info.param); });

// header JSON, then `data`.
std::string Safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int k = 0; k < 8; ++k) out[k] = static_cast<char>((n >> (8 * k)) & 0xff);
  return out + header + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<convert::SourceFile>> Open(const std::string& bytes,
                                                    const convert::SourceOptions& o = {}) {
    path_ = dir_ / ("t" + std::to_string(n_++) + ".safetensors");
    WriteStringToFile(path_, bytes);
    return OpenSource(path_.string(), o);
  }
  void ExpectError(const std::string& bytes, StatusCode code, const std::string& fragment) {
    auto r = Open(bytes);
    ASSERT_FALSE(r.ok()) << "accepted: " << bytes.substr(8);
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(path_.string()), std::string::npos);
  }
  TempDir dir_;
  fs::path path_;
  int n_ = 0;
};

TEST_F(SafetensorsTest, ReadsHandMadeFileInHeaderOrder) {
  // Two tensors whose data order differs from header order, and metadata.
  const std::string data = std::string("\x01\x02\x03\x04", 4) + std::string("\x0a\x0b", 2);
  auto r = Open(Safetensors(
      R"({"z":{"dtype":"I16","shape":[1],"data_offsets":[4,6]},)"
      R"("__metadata__":{"b":"2","a":"1"},)"
      R"("a":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}})",
      data));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& f = **r;
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "z");
  EXPECT_EQ(f.tensors()[0].dtype, DType::kInt16);
  EXPECT_EQ(f.tensors()[1].name, "a");
  EXPECT_EQ(f.tensors()[1].shape, (Shape{2, 2}));
  std::vector<std::byte> z(2), a(4);
  ASSERT_TRUE(f.ReadTensor(0, z).ok());
  ASSERT_TRUE(f.ReadTensor(1, a).ok());
  EXPECT_EQ(Hex(z), "0a0b");
  EXPECT_EQ(Hex(a), "01020304");
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0], (MetaEntry{"b", MetaValue(std::string("2"))}));
  EXPECT_EQ(f.metadata()[1], (MetaEntry{"a", MetaValue(std::string("1"))}));
  EXPECT_STREQ(f.format_name(), "safetensors");
}

TEST_F(SafetensorsTest, EveryDTypeName) {
  const std::pair<const char*, DType> names[] = {
      {"BOOL", DType::kBool},     {"U8", DType::kUInt8},          {"I8", DType::kInt8},
      {"I16", DType::kInt16},     {"I32", DType::kInt32},         {"I64", DType::kInt64},
      {"U16", DType::kUInt16},    {"U32", DType::kUInt32},        {"U64", DType::kUInt64},
      {"F16", DType::kFloat16},   {"BF16", DType::kBFloat16},     {"F32", DType::kFloat32},
      {"F64", DType::kFloat64},   {"F8_E4M3", DType::kFloat8E4M3FN},
      {"F8_E5M2", DType::kFloat8E5M2},
  };
  for (const auto& [name, dtype] : names) {
    size_t n = DTypeSize(dtype) * 3;
    auto r = Open(Safetensors(std::string(R"({"x":{"dtype":")") + name +
                                  R"(","shape":[3],"data_offsets":[0,)" + std::to_string(n) +
                                  "]}}",
                              std::string(n, '\x11')));
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_EQ((*r)->tensors()[0].dtype, dtype) << name;
    EXPECT_EQ((*r)->tensors()[0].nbytes, n);
  }
}

TEST_F(SafetensorsTest, BadHeadersAreClearErrors) {
  const std::string t4 = std::string(4, '\0');
  ExpectError(Safetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", t4),
              StatusCode::kCorruption, "invalid JSON");
  ExpectError(Safetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", t4),
              StatusCode::kCorruption, "lie outside the data section of 4 bytes");
  ExpectError(Safetensors(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", t4),
              StatusCode::kCorruption, "span 4 bytes but dtype and shape need 8");
  ExpectError(Safetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", t4),
              StatusCode::kCorruption, "lie outside");
  ExpectError(Safetensors(R"({"x":{"dtype":"C64","shape":[1],"data_offsets":[0,4]}})", t4),
              StatusCode::kUnsupported, "dtype 'C64'");
  ExpectError(Safetensors(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", t4),
              StatusCode::kCorruption, "non-integer or negative dim");
  ExpectError(Safetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", t4),
              StatusCode::kCorruption, "data_offsets");
  ExpectError(Safetensors(R"({"x":{"shape":[1],"data_offsets":[0,4]}})", t4),
              StatusCode::kCorruption, "no string 'dtype'");
  ExpectError(Safetensors(R"({"x":[1]})", t4), StatusCode::kCorruption, "not an object");
  ExpectError(Safetensors(R"({"__metadata__":{"k":1}})", ""), StatusCode::kCorruption,
              "is not a string");
  ExpectError(Safetensors(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                          R"("x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                          "ab"),
              StatusCode::kCorruption, "duplicate tensor names");
  ExpectError(Safetensors(R"({"x":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],)"
                          R"("data_offsets":[0,1]}})",
                          "a"),
              StatusCode::kCorruption, "overflows");
  // Header length past the end of the file.
  std::string s = Safetensors(R"({"__metadata__":{}})", "");
  s[0] = static_cast<char>(0x40);
  ExpectError(s, StatusCode::kUnsupported, "unknown file format");  // not even sniffed as one
}

// As safetensors.torch.load_file (safetensors 0.8) decides: the tensors, sorted by offsets, must
// tile the data section exactly. Two tensors sharing bytes were packed before.
TEST_F(SafetensorsTest, OffsetsMustTileTheDataSectionExactly) {
  auto u8 = [](const char* name, int b, int e) {
    return "\"" + std::string(name) + R"(":{"dtype":"U8","shape":[)" + std::to_string(e - b) +
           R"(],"data_offsets":[)" + std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  // Overlap (the issue's case, as F32: a [0,16], b [8,24]).
  ExpectError(Safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                          std::string(24, '\0')),
              StatusCode::kCorruption, "tensor 'b' data_offsets [8, 24) overlap");
  ExpectError(Safetensors("{" + u8("a", 0, 8) + "," + u8("b", 0, 8) + "}", std::string(8, 'x')),
              StatusCode::kCorruption, "overlap");
  ExpectError(Safetensors("{" + u8("a", 0, 8) + "," + u8("b", 16, 24) + "}", std::string(24, 'x')),
              StatusCode::kCorruption, "leave a gap");
  ExpectError(Safetensors("{" + u8("a", 8, 16) + "}", std::string(16, 'x')),
              StatusCode::kCorruption, "leave a gap");
  ExpectError(Safetensors("{" + u8("a", 0, 8) + "}", std::string(16, 'x')),
              StatusCode::kCorruption, "trailing bytes");
  ExpectError(Safetensors(R"({"__metadata__":{}})", std::string(8, 'x')),
              StatusCode::kCorruption, "trailing bytes");
  // What safetensors accepts still opens: offsets out of header order, zero-size tensors
  // anywhere (sharing an offset), no tensors at all.
  for (const std::string& header :
       {"{" + u8("b", 8, 16) + "," + u8("a", 0, 8) + "}",
        "{" + u8("z", 0, 0) + "," + u8("a", 0, 8) + "," + u8("y", 8, 8) + "," + u8("b", 8, 16) +
            "," + u8("w", 16, 16) + "}"}) {
    auto r = Open(Safetensors(header, "0123456789abcdef"));
    ASSERT_TRUE(r.ok()) << header << ": " << r.status().ToString();
    for (size_t t = 0; t < (*r)->tensors().size(); ++t) {
      const auto& info = (*r)->tensors()[t];
      std::vector<std::byte> buf(info.nbytes);
      ASSERT_TRUE((*r)->ReadTensor(t, buf).ok());
      if (info.name == "b") {
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), 8), "89abcdef");
      }
    }
  }
  EXPECT_TRUE(Open(Safetensors(R"({"__metadata__":{"k":"v"}})", "")).ok());
}

// A header nested 200,000 deep is refused by a linear pre-scan: the JSON parser (and the
// destructor of what it builds) never sees the depth, so nothing recurses on it.
TEST_F(SafetensorsTest, DeeplyNestedHeaderIsAClearError) {
  const size_t depth = 200000;
  ExpectError(Safetensors(R"({"x":)" + std::string(depth, '[') + std::string(depth, ']') + "}", ""),
              StatusCode::kCorruption, "nested deeper than 64");
  ExpectError(Safetensors(R"({"__metadata__":{"k":)" + std::string(depth, '{') , ""),
              StatusCode::kCorruption, "nested deeper than 64");
  // Brackets inside strings (escaped quotes included) are not nesting.
  auto r = Open(Safetensors(R"({"__metadata__":{"k":"[[[[\"{{{{"},)"
                            R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                            "x"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->metadata()[0].value, MetaValue(std::string("[[[[\"{{{{")));
}

TEST_F(SafetensorsTest, HeaderLimit) {
  convert::SourceOptions o;
  o.max_header_bytes = 16;
  auto r = Open(Safetensors(R"({"__metadata__":{"key":"a long value"}})", ""), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(SafetensorsTest, EveryTruncationIsAClearError) {
  const std::string bytes = ReadFileToString(PtFixtureDir() + "/all_dtypes.safetensors");
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = Open(bytes.substr(0, cut));
    ASSERT_FALSE(r.ok()) << "truncated to " << cut;
    EXPECT_NE(r.status().message().find(path_.string()), std::string::npos);
    fs::remove(path_);
  }
}

TEST_F(SafetensorsTest, BitFlipsNeverCrash) {
  // safetensors has no checksum: a flip in tensor data changes data; in the header it must give
  // an error or a consistent file. Either way no crash and every read stays in bounds (ASan).
  const std::string bytes = ReadFileToString(PtFixtureDir() + "/all_dtypes.safetensors");
  for (size_t off = 0; off < bytes.size(); ++off) {
    std::string m = bytes;
    m[off] = static_cast<char>(m[off] ^ (1 << (off % 8)));
    auto r = Open(m);
    if (r.ok()) {
      Status st;
      ReadAll(**r, &st);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    fs::remove(path_);
  }
}

}  // namespace
}  // namespace libshard::testing
