// Natural sort, globs, --part slicing, option parsing and source discovery of `libshard pack`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "pack/glob.h"
#include "pack/natural_sort.h"
#include "pack/option_parsing.h"
#include "pack/source_list.h"
#include "testutil/testutil.h"

namespace libshard::convert {
namespace {

TEST(NaturalSortTest, NumbersCompareByValue) {
  std::vector<std::string> v = {"data_10.pt", "data_2.pt", "data_1.pt", "data_100.pt", "data_9.pt"};
  NaturalSort(v);
  EXPECT_EQ(v, (std::vector<std::string>{"data_1.pt", "data_2.pt", "data_9.pt", "data_10.pt",
                                         "data_100.pt"}));
}

TEST(NaturalSortTest, DirectoriesComponentWise) {
  std::vector<std::string> v = {"rows_2000-4000/data_2001.ckpt", "rows_0-2000/data_17.ckpt",
                                "rows_0-2000/data_5.ckpt", "rows_0-2000.ckpt", "a-b", "a/b"};
  NaturalSort(v);
  EXPECT_EQ(v, (std::vector<std::string>{"a/b", "a-b", "rows_0-2000/data_5.ckpt",
                                         "rows_0-2000/data_17.ckpt", "rows_0-2000.ckpt",
                                         "rows_2000-4000/data_2001.ckpt"}));
}

TEST(NaturalSortTest, HugeNumbersAndLeadingZerosAreTotal) {
  // Longer than any integer type: compared by digit count, then digits.
  EXPECT_TRUE(NaturalLess("x_99999999999999999999999", "x_100000000000000000000000"));
  EXPECT_FALSE(NaturalLess("x_100000000000000000000000", "x_99999999999999999999999"));
  // Same value, different zero padding: distinct strings must not be equivalent.
  EXPECT_TRUE(NaturalLess("x_7", "x_007"));
  EXPECT_FALSE(NaturalLess("x_007", "x_7"));
  EXPECT_TRUE(NaturalLess("x_007", "x_8"));
  EXPECT_FALSE(NaturalLess("a", "a"));
  EXPECT_TRUE(NaturalLess("a", "a0"));
}

TEST(NaturalSortTest, IsAStrictWeakOrderOnRandomStrings) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab0123_/.";
  std::vector<std::string> v;
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    v.push_back(s);
  }
  for (const auto& a : v) {
    EXPECT_FALSE(NaturalLess(a, a));
    for (const auto& b : v) {
      if (a != b) EXPECT_NE(NaturalLess(a, b), NaturalLess(b, a)) << a << " vs " << b;
    }
  }
  NaturalSort(v);
  for (size_t i = 1; i < v.size(); ++i) EXPECT_FALSE(NaturalLess(v[i], v[i - 1]));
}

TEST(GlobTest, BasenamePatternsMatchAtAnyDepth) {
  EXPECT_TRUE(GlobMatch("*.pt", "data_1.pt"));
  EXPECT_TRUE(GlobMatch("*.pt", "rows_0/data_1.pt"));
  EXPECT_FALSE(GlobMatch("*.pt", "rows_0/data_1.pt.gz"));
  EXPECT_TRUE(GlobMatch("data_?.pt", "a/data_7.pt"));
  EXPECT_FALSE(GlobMatch("data_?.pt", "a/data_17.pt"));
  EXPECT_TRUE(GlobMatch("data_[0-4].pt", "data_3.pt"));
  EXPECT_FALSE(GlobMatch("data_[!0-4].pt", "data_3.pt"));
  EXPECT_TRUE(GlobMatch("data_[!0-4].pt", "data_5.pt"));
  EXPECT_TRUE(GlobMatch("\\*.pt", "*.pt"));
  EXPECT_FALSE(GlobMatch("\\*.pt", "a.pt"));
}

TEST(GlobTest, PathPatterns) {
  EXPECT_TRUE(GlobMatch("rows_*/data_*.ckpt", "rows_0-2000/data_5.ckpt"));
  EXPECT_FALSE(GlobMatch("rows_*/data_*.ckpt", "x/rows_0-2000/data_5.ckpt"));
  EXPECT_FALSE(GlobMatch("a/*", "a/b/c"));  // '*' does not cross '/'
  EXPECT_TRUE(GlobMatch("a/**", "a/b/c"));
  EXPECT_TRUE(GlobMatch("a/**/c", "a/c"));
  EXPECT_TRUE(GlobMatch("a/**/c", "a/x/y/c"));
  EXPECT_FALSE(GlobMatch("a/**/c", "a/xc"));
  EXPECT_TRUE(GlobMatch("/a/*.pt", "a/b.pt"));
  // Pathological pattern stays fast (DP, not backtracking).
  EXPECT_FALSE(GlobMatch("a/" + std::string(50, '*') + "b", "a/" + std::string(5000, 'a')));
}

TEST(GlobTest, Filters) {
  const std::vector<std::string> inc = {"*.pt", "*.safetensors"}, exc = {"bad/**", "*_tmp.pt"};
  EXPECT_TRUE(PassesFilters("x/a.pt", inc, exc));
  EXPECT_TRUE(PassesFilters("hs_1.safetensors", inc, exc));
  EXPECT_FALSE(PassesFilters("x/a.json", inc, exc));
  EXPECT_FALSE(PassesFilters("bad/a.pt", inc, exc));
  EXPECT_FALSE(PassesFilters("x/a_tmp.pt", inc, exc));
  EXPECT_TRUE(PassesFilters("anything", {}, {}));
}

TEST(PartTest, SlicesTileInOrderAndAreBalanced) {
  for (uint64_t total : {0ull, 1ull, 5ull, 10ull, 11ull, 1001ull}) {
    for (uint32_t n : {1u, 2u, 3u, 4u, 7u, 16u}) {
      uint64_t next = 0;
      for (uint32_t i = 0; i < n; ++i) {
        const PartRange r = PartSlice(total, i, n);
        EXPECT_EQ(r.begin, next) << total << " " << i << "/" << n;
        EXPECT_LE(r.begin, r.end);
        EXPECT_LE(r.end - r.begin, total / n + 1);
        EXPECT_GE(r.end - r.begin, total / n);
        next = r.end;
      }
      EXPECT_EQ(next, total);
    }
  }
  // No overflow near the top of the range.
  const PartRange r = PartSlice(~0ull, 3, 4);
  EXPECT_EQ(r.end, ~0ull);
}

TEST(PartTest, Parse) {
  auto p = ParsePart("2/4");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->index, 2u);
  EXPECT_EQ(p->count, 4u);
  EXPECT_TRUE(ParsePart("0/1").ok());
  for (const char* bad : {"4/4", "1/0", "a/b", "3", "-1/4", "1/4x", ""}) {
    auto r = ParsePart(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(OptionParsingTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("512m"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("4GiB"), 4ull << 30);
  EXPECT_EQ(*ParseByteSize("4G"), 4ull << 30);
  EXPECT_EQ(*ParseByteSize("64KiB"), 64ull << 10);
  EXPECT_EQ(*ParseByteSize("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("100MB"), 100000000ull);
  EXPECT_EQ(*ParseByteSize("2T"), 2ull << 40);
  EXPECT_EQ(ParseByteSize("16EiB").status().code(), StatusCode::kInvalidArgument);
  for (const char* bad : {"", "G", "12X", "0", "-5", "1..5G", "99999999999999999999", "16777216T"})
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
}

TEST(OptionParsingTest, OnErrorRaiseIsCanonicalAndFailItsAlias) {
  EXPECT_EQ(*ParsePackOnError("raise"), OnError::kRaise);
  EXPECT_EQ(*ParsePackOnError("fail"), OnError::kRaise);
  EXPECT_EQ(*ParsePackOnError("skip"), OnError::kSkip);
  for (const char* bad : {"", "ignore", "Raise", "stop"}) {
    auto r = ParsePackOnError(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string m = r.status().message();
    EXPECT_NE(m.find("'" + std::string(bad) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("raise"), std::string::npos) << m;
    EXPECT_NE(m.find("skip"), std::string::npos) << m;
  }
}

TEST(OptionParsingTest, Compression) {
  EXPECT_EQ(ParseCompression("none")->compression, Compression::kNone);
  EXPECT_EQ(ParseCompression("zstd")->compression, Compression::kZstd);
  EXPECT_EQ(ParseCompression("zstd")->zstd_level, 3);
  EXPECT_EQ(ParseCompression("zstd:19")->zstd_level, 19);
  EXPECT_EQ(ParseCompression("zstd:-3")->zstd_level, -3);
  EXPECT_EQ(ParseCompression("auto")->field_codecs, FieldCodecPolicy::kAuto);
  EXPECT_EQ(ParseCompression("planes")->field_codecs, FieldCodecPolicy::kPlanes);
  EXPECT_EQ(ParseCompression(" Planes2 ")->field_codecs, FieldCodecPolicy::kPlanes2);
  for (const char* bad : {"gzip", "zstd:", "zstd:23", "zstd:x", "zstd:1:2"})
    EXPECT_FALSE(ParseCompression(bad).ok()) << bad;
}

TEST(OptionParsingTest, SampleRanges) {
  EXPECT_EQ(*ParseSampleRange("3", 10), (std::vector<uint64_t>{3}));
  EXPECT_EQ(*ParseSampleRange("2:5", 10), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(*ParseSampleRange("2-4", 10), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(*ParseSampleRange("8:", 10), (std::vector<uint64_t>{8, 9}));
  EXPECT_EQ(*ParseSampleRange(":2,1,9", 10), (std::vector<uint64_t>{0, 1, 9}));
  for (const char* bad : {"10", "5:11", "x", "3-10", "5:2", ""})
    EXPECT_FALSE(ParseSampleRange(bad, 10).ok()) << bad;
}

TEST(OptionParsingTest, Formatting) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(4ull << 30), "4.00 GiB");
  EXPECT_EQ(FormatDuration(12.34), "12.3s");
  EXPECT_EQ(FormatDuration(245), "4m05s");
  EXPECT_EQ(FormatDuration(3723), "1h02m03s");
  EXPECT_EQ(SplitList(" a, b,,c "), (std::vector<std::string>{"a", "b", "c"}));
}

class SourceListTest : public ::testing::Test {
 protected:
  void Touch(const std::string& rel, const std::string& content = "x") {
    const auto p = dir_.path() / rel;
    std::filesystem::create_directories(p.parent_path());
    testing::WriteStringToFile(p, content);
  }
  std::vector<std::string> Rels(const std::vector<SourceEntry>& v) {
    std::vector<std::string> out;
    for (const auto& e : v) out.push_back(e.rel_path);
    return out;
  }
  testing::TempDir dir_;
};

TEST_F(SourceListTest, WalksRecursivelyInNaturalOrderWithDefaultExtensions) {
  Touch("rows_2000-4000/data_2000.ckpt");
  Touch("rows_0-2000/data_10.ckpt.gz");
  Touch("rows_0-2000/data_2.ckpt", "abcd");
  Touch("rows_0-2000/notes.txt");
  Touch("rows_0-2000/.hidden.pt");
  Touch(".cache/x.pt");
  Touch("hs_1.safetensors");
  Touch("out/shard.pt");  // the job's own output is skipped
  SourceListOptions o;
  o.root = dir_.path().string();
  o.skip_dir = (dir_.path() / "out").string();
  auto r = ListSources(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Rels(*r), (std::vector<std::string>{"hs_1.safetensors", "rows_0-2000/data_2.ckpt",
                                                "rows_0-2000/data_10.ckpt.gz",
                                                "rows_2000-4000/data_2000.ckpt"}));
  EXPECT_EQ((*r)[1].size, 4u);
  EXPECT_GT((*r)[1].mtime_ns, 0);
  EXPECT_EQ((*r)[1].path, (dir_.path() / "rows_0-2000/data_2.ckpt").string());
}

TEST_F(SourceListTest, IncludeExclude) {
  Touch("a/data_1.pt");
  Touch("a/data_2.pt");
  Touch("b/data_3.pt");
  Touch("b/meta.json");
  SourceListOptions o;
  o.root = dir_.path().string();
  o.include = {"*.pt", "*.json"};
  o.exclude = {"a/data_2.pt"};
  auto r = ListSources(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Rels(*r), (std::vector<std::string>{"a/data_1.pt", "b/data_3.pt", "b/meta.json"}));
}

TEST_F(SourceListTest, WalkSelectsIsTheWalksRule) {
  // Every path the walk above lists or leaves out, asked one by one (libshard.capture's rule).
  for (const char* rel : {"rows_2000-4000/data_2000.ckpt", "rows_0-2000/data_10.ckpt.gz",
                          "hs_1.safetensors"})
    EXPECT_TRUE(WalkSelects(rel, {}, {})) << rel;
  for (const char* rel : {"rows_0-2000/notes.txt", "rows_0-2000/.hidden.pt", ".cache/x.pt", "",
                          "a//b.pt"})
    EXPECT_FALSE(WalkSelects(rel, {}, {})) << rel;
  EXPECT_TRUE(WalkSelects("b/meta.json", {"*.pt", "*.json"}, {"a/data_2.pt"}));
  EXPECT_FALSE(WalkSelects("a/data_2.pt", {"*.pt", "*.json"}, {"a/data_2.pt"}));
  EXPECT_FALSE(WalkSelects("a/.x.json", {"*.json"}, {}));
}

TEST_F(SourceListTest, FilesFromResolvesAgainstRootAndSorts) {
  Touch("d/data_10.pt");
  Touch("d/data_9.pt");
  testing::WriteStringToFile(dir_.path() / "list.txt",
                             "# comment\n\nd/data_10.pt\n" + (dir_.path() / "d/data_9.pt").string() +
                                 "\r\n");
  SourceListOptions o;
  o.root = dir_.path().string();
  o.files_from = (dir_.path() / "list.txt").string();
  auto r = ListSources(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Rels(*r), (std::vector<std::string>{"d/data_9.pt", "d/data_10.pt"}));
}

TEST_F(SourceListTest, ErrorsNameTheProblem) {
  SourceListOptions o;
  o.root = (dir_.path() / "missing").string();
  auto r = ListSources(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("missing"), std::string::npos);

  testing::WriteStringToFile(dir_.path() / "list.txt", "nope.pt\n");
  o.root = dir_.path().string();
  o.files_from = (dir_.path() / "list.txt").string();
  r = ListSources(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nope.pt"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("line 1"), std::string::npos) << r.status().message();

  Touch("x.pt");
  testing::WriteStringToFile(dir_.path() / "list.txt", "x.pt\n./x.pt\n");
  r = ListSources(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("listed twice"), std::string::npos) << r.status().message();
}

// A FIFO with a sample name (or a symlink to one) is listed, marked not readable, so pack reports
// it instead of opening it (which blocks) or dropping it silently; other names and dangling
// links are not sources.
TEST(SourceListWalkTest, NonRegularSampleNamesAreListedAsNotReadable) {
  testing::TempDir dir;
  testing::WriteStringToFile(dir / "a.pt", "x");
  ASSERT_EQ(::mkfifo((dir / "b.pt").c_str(), 0600), 0);
  std::filesystem::create_symlink("b.pt", dir / "c.pt");
  std::filesystem::create_symlink("missing.pt", dir / "d.pt");
  ASSERT_EQ(::mkfifo((dir / "e.txt").c_str(), 0600), 0);
  SourceListOptions o;
  o.root = dir.path().string();
  auto r = ListSources(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].rel_path, "a.pt");
  EXPECT_TRUE((*r)[0].not_readable.empty());
  for (size_t i : {1, 2}) {
    EXPECT_NE((*r)[i].not_readable.find("is a FIFO (named pipe), not a regular file"),
              std::string::npos)
        << (*r)[i].not_readable;
    EXPECT_NE((*r)[i].not_readable.find((*r)[i].path), std::string::npos);
  }
  EXPECT_EQ((*r)[2].rel_path, "c.pt");
}

}  // namespace
}  // namespace libshard::convert
