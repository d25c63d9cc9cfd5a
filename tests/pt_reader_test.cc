// The torch.save (.pt / .ckpt / .pt.gz) reader against real torch 2.13 files
// (tests/data/make_pt_fixtures.py), malicious pickles, corruption and zip bombs.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "readers/byte_source.h"
#include "readers/source_file.h"
#include "readers/torch_pickle.h"
#include "readers_expect.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using convert::OpenSource;
using convert::SourceOptions;

constexpr const char* kPwnedMarker = "/tmp/libshard_readers_pwned_marker";

// Writes a new file (a fresh name each time: rewriting one file in place makes ext4 flush on
// every truncation, which is 100x slower).
fs::path WriteFresh(const TempDir& dir, size_t i, const std::string& name,
                    const std::string& bytes) {
  fs::path p = dir / (std::to_string(i) + "_" + name);
  WriteStringToFile(p, bytes);
  return p;
}

class PtFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PtFixtureTest, MatchesTorchLoad) { ExpectMatchesFixture(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Fixtures, PtFixtureTest,
    ::testing::ValuesIn(PtFixtureNames([](const std::string& n) {
      return n.find(".safetensors") == std::string::npos;
    })),
    [](const ::testing::TestParamInfo<std::string>& info) { return TestNameOf(info.param); });

TEST(PtReaderTest, FixturesArePresent) {
  // Guards against an empty parameter list silently passing.
  EXPECT_GE(PtFixtureNames([](const std::string&) { return true; }).size(), 30u);
}

TEST(PtReaderTest, MaliciousPicklesAreRefusedAndNeverRun) {
  fs::remove(kPwnedMarker);
  for (const char* name : {"malicious_system.pt", "malicious_p4.pt", "malicious_eval.pt"}) {
    auto r = OpenSource(PtFixtureDir() + "/" + name);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
    EXPECT_NE(r.status().message().find("never runs code"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(kPwnedMarker)) << "a pickle payload ran";
}

TEST(PtReaderTest, ArchivePrefixComesFromTheFirstEntry) {
  // data_17.ckpt (saved by path) has entries under "data_17/", its gzip (saved through a file
  // object) under "archive/"; both must read identically.
  auto a = OpenSource(PtFixtureDir() + "/data_17.ckpt");
  auto b = OpenSource(PtFixtureDir() + "/data_17.ckpt.gz");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_STREQ((*a)->format_name(), "torch-zip");
  EXPECT_STREQ((*b)->format_name(), "torch-zip+gzip");
  Status sa, sb;
  EXPECT_EQ(ReadAll(**a, &sa), ReadAll(**b, &sb));
  EXPECT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ((*b)->file_size(), fs::file_size(PtFixtureDir() + "/data_17.ckpt.gz"));
}

TEST(PtReaderTest, ContentNotExtensionChoosesTheReader) {
  TempDir dir;
  fs::copy_file(PtFixtureDir() + "/data_17.ckpt.gz", dir / "sample.bin");
  fs::copy_file(PtFixtureDir() + "/all_dtypes.safetensors", dir / "sample.pt");
  auto a = OpenSource((dir / "sample.bin").string());
  auto b = OpenSource((dir / "sample.pt").string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_STREQ((*a)->format_name(), "torch-zip+gzip");
  EXPECT_STREQ((*b)->format_name(), "safetensors");
  WriteStringToFile(dir / "junk.pt", "this is not a tensor file at all");
  auto c = OpenSource((dir / "junk.pt").string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(c.status().message().find("unknown file format"), std::string::npos);
  auto d = OpenSource((dir / "missing.pt").string());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
}

TEST(PtReaderTest, EveryTruncationIsAClearError) {
  for (const char* name : {"data_17.ckpt", "data_17.ckpt.gz", "views.pt"}) {
    TempDir dir;
    const std::string src = PtFixtureDir() + "/" + name;
    const std::string bytes = ReadFileToString(src);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      const fs::path p = WriteFresh(dir, cut, name, bytes.substr(0, cut));
      auto r = OpenSource(p.string());
      Status st;
      if (r.ok()) ReadAll(**r, &st);
      ASSERT_TRUE(!r.ok() || !st.ok()) << name << " truncated to " << cut << " bytes was accepted";
      const Status& err = r.ok() ? st : r.status();
      EXPECT_NE(err.message().find(p.string()), std::string::npos) << err.ToString();
      fs::remove(p);
    }
  }
}

// Flipping any bit of a file must give an error or exactly the original tensors and metadata
// (a flip in padding, timestamps or other unused bytes changes nothing); never a crash or
// silently different data. Tensor records and data.pkl are covered by their CRC-32.
TEST(PtReaderTest, EveryBitFlipIsDetectedOrHarmless) {
  for (const char* name : {"data_17.ckpt", "views.pt", "data_17.ckpt.gz"}) {
    const std::string src = PtFixtureDir() + "/" + name;
    auto orig = OpenSource(src);
    ASSERT_TRUE(orig.ok());
    Status st0;
    const auto want = ReadAll(**orig, &st0);
    ASSERT_TRUE(st0.ok());
    TempDir dir;
    const std::string bytes = ReadFileToString(src);
    size_t detected = 0;
    for (size_t off = 0; off < bytes.size(); ++off) {
      std::string mutated = bytes;
      mutated[off] = static_cast<char>(mutated[off] ^ (1 << (off % 8)));
      const fs::path p = WriteFresh(dir, off, name, mutated);
      struct Remove {
        fs::path p;
        ~Remove() { fs::remove(p); }
      } remove{p};
      auto r = OpenSource(p.string());
      if (!r.ok()) {
        ++detected;
        continue;
      }
      Status st;
      auto got = ReadAll(**r, &st);
      if (!st.ok()) {
        EXPECT_NE(st.message().find(p.string()), std::string::npos) << st.ToString();
        ++detected;
        continue;
      }
      ASSERT_EQ(got, want) << name << ": flip at byte " << off << " changed data silently";
      ASSERT_EQ((*r)->metadata(), (*orig)->metadata()) << name << ": flip at " << off;
      ASSERT_EQ((*r)->tensors().size(), (*orig)->tensors().size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ((*r)->tensors()[i].name, (*orig)->tensors()[i].name) << "flip at " << off;
        ASSERT_EQ((*r)->tensors()[i].shape, (*orig)->tensors()[i].shape) << "flip at " << off;
        ASSERT_EQ((*r)->tensors()[i].dtype, (*orig)->tensors()[i].dtype) << "flip at " << off;
      }
    }
    EXPECT_GT(detected, bytes.size() / 4) << name;
  }
}

TEST(PtReaderTest, CrcCatchesFlippedTensorBytes) {
  TempDir dir;
  const fs::path p = dir / "data_17.ckpt";
  fs::copy_file(PtFixtureDir() + "/data_17.ckpt", p);
  // Find the bytes of input_ids (first tensor) and flip one.
  auto r0 = OpenSource(p.string());
  ASSERT_TRUE(r0.ok());
  std::vector<std::byte> ids(r0->get()->tensors()[0].nbytes);
  ASSERT_TRUE((*r0)->ReadTensor(0, ids).ok());
  const std::string bytes = ReadFileToString(p);
  size_t at = bytes.find(std::string(reinterpret_cast<const char*>(ids.data()), ids.size()));
  ASSERT_NE(at, std::string::npos);
  FlipByte(p, at + 3, 0x10);
  auto r = OpenSource(p.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();  // data.pkl is intact
  std::vector<std::byte> buf(ids.size());
  Status st = (*r)->ReadTensor(0, buf);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("CRC-32 mismatch in zip record 'data_17/data/0'"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find(p.string()), std::string::npos);
  // With verification off the flipped byte comes through (proving the check is what caught it).
  SourceOptions no_crc;
  no_crc.verify_crc32 = false;
  auto r2 = OpenSource(p.string(), no_crc);
  ASSERT_TRUE(r2.ok());
  ASSERT_TRUE((*r2)->ReadTensor(0, buf).ok());
  EXPECT_EQ(buf[3], ids[3] ^ std::byte{0x10});
}

void WriteGzip(const fs::path& p, size_t zeros) {
  gzFile g = gzopen(p.c_str(), "wb9");
  ASSERT_NE(g, nullptr);
  std::vector<char> block(1 << 20, 0);
  for (size_t done = 0; done < zeros; done += block.size())
    ASSERT_GT(gzwrite(g, block.data(), static_cast<unsigned>(std::min(block.size(), zeros - done))), 0);
  ASSERT_EQ(gzclose(g), Z_OK);
}

TEST(PtReaderTest, ZipBombStopsAtTheLimit) {
  TempDir dir;
  const fs::path p = dir / "bomb.pt.gz";
  WriteGzip(p, size_t{64} << 20);  // 64 MiB of zeros in ~64 KiB
  ASSERT_LT(fs::file_size(p), 200u << 10);
  SourceOptions opts;
  opts.max_decompressed_bytes = 4 << 20;
  auto r = OpenSource(p.string(), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("zip bomb"), std::string::npos);
  EXPECT_NE(r.status().message().find(p.string()), std::string::npos);
  // Under a sufficient limit it inflates and is then refused for what it is.
  opts.max_decompressed_bytes = 128 << 20;
  auto r2 = OpenSource(p.string(), opts);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kUnsupported) << r2.status().ToString();
}

TEST(PtReaderTest, GzipLimitIsExact) {
  const std::string src = PtFixtureDir() + "/data_17.ckpt.gz";
  auto plain = OpenSource(PtFixtureDir() + "/data_17.ckpt");
  ASSERT_TRUE(plain.ok());
  const uint64_t inflated = fs::file_size(PtFixtureDir() + "/data_17.ckpt");
  SourceOptions opts;
  opts.max_decompressed_bytes = inflated;
  EXPECT_TRUE(OpenSource(src, opts).ok());
  opts.max_decompressed_bytes = inflated - 1;
  auto r = OpenSource(src, opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(PtReaderTest, ConcurrentReadsAgree) {
  auto r = OpenSource(PtFixtureDir() + "/views.pt");
  ASSERT_TRUE(r.ok());
  const convert::SourceFile& f = **r;
  Status st;
  const auto want = ReadAll(f, &st);
  ASSERT_TRUE(st.ok());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int iter = 0; iter < 200; ++iter) {
        size_t i = static_cast<size_t>(iter + t) % want.size();
        std::vector<std::byte> buf(f.tensors()[i].nbytes);
        if (!f.ReadTensor(i, buf).ok() || buf != want[i]) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(PtReaderTest, ReadTensorChecksItsArguments) {
  auto r = OpenSource(PtFixtureDir() + "/one_key.pt");
  ASSERT_TRUE(r.ok());
  std::vector<std::byte> buf((*r)->tensors()[0].nbytes + 1);
  Status st = (*r)->ReadTensor(0, buf);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  st = (*r)->ReadTensor(1, buf);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

// Hand-made pickles for opcode paths torch.save does not produce on its own.
Result<convert::PickledObject> Unpickle(const std::string& body) {
  std::string pkl = "\x80\x02" + body + ".";
  return convert::UnpickleTorch(std::as_bytes(std::span(pkl)), "mem.pt");
}

TEST(PtPickleTest, Long1OfAnyLength) {
  // {"a": <LONG1 n bytes>} for minimal and padded encodings.
  auto one = [](const std::string& bytes) {
    return Unpickle(std::string("}X\x01\x00\x00\x00" "a\x8a", 8) +
                    static_cast<char>(bytes.size()) + bytes + "s");
  };
  auto v = [](const Result<convert::PickledObject>& r) {
    return std::get<int64_t>(r->metadata.at(0).value);
  };
  auto r = one(std::string("\x00\x00\x00\x80\x00", 5));  // 2^31
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(v(r), int64_t{1} << 31);
  r = one(std::string("", 0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(v(r), 0);
  r = one(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(v(r), INT64_MAX);
  r = one(std::string("\x00\x00\x00\x00\x00\x00\x00\x80", 8));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(v(r), INT64_MIN);
  r = one(std::string("\xfe", 1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(v(r), -2);
  // Redundant sign extension beyond 8 bytes is still an int64.
  r = one(std::string("\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00", 10));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(v(r), 5);
  r = one(std::string("\xfb\xff\xff\xff\xff\xff\xff\xff\xff", 9));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(v(r), -5);
  // 2^63 and -2^63-1 do not fit.
  r = one(std::string("\x00\x00\x00\x00\x00\x00\x00\x80\x00", 9));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not fit in int64"), std::string::npos);
  EXPECT_NE(r.status().message().find("mem.pt: data.pkl byte 9"), std::string::npos)
      << r.status().message();
  r = one(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f\xff", 9));
  ASSERT_FALSE(r.ok());
}

TEST(PtPickleTest, RefusesWhatTorchSaveNeverWrites) {
  struct Case {
    std::string body;
    const char* fragment;
  };
  const Case cases[] = {
      {"cposix\nsystem\nX\x02\x00\x00\x00ls\x85R"s, "GLOBAL 'posix system' is not allowed"},
      {"cbuiltins\ngetattr\n"s, "GLOBAL 'builtins getattr'"},
      {"ctorch\nload\n"s, "GLOBAL 'torch load'"},
      {"ctorch._utils\n_rebuild_tensor_v2\nX\x02\x00\x00\x00hi\x85R"s,
       "_rebuild_tensor_v2 called with 1"},
      {"ccollections\nOrderedDict\n]\x85R"s, "OrderedDict called with arguments"},
      {"}\x81"s, "(NEWOBJ)"},
      {"}X\x01\x00\x00\x00" "k]s\x8f"s, "(set/frozenset)"},
      {"X\x01\x00\x00\x00" "aQ"s, "persistent id is not a torch.save storage reference"},
      {"N"s, "the top-level object is a None"},
      {"]N\x85" "a"s, ""},  // fine: a list holding a tuple holding None has no entries
      {"}h\x07"s, "memo entry 7 was never stored"},
      {"}X\x05\x00\x00\x00" "ab"s, "runs past the end of data.pkl"},
      {"}(u("s, "stack underflow"},  // STOP inside an open MARK
      {"(s"s, "stack underflow"},
      {"\x80\x07"s, "pickle protocol 7"},
  };
  for (const Case& c : cases) {
    auto r = Unpickle(c.body);
    SCOPED_TRACE(c.fragment);
    if (std::string(c.fragment).empty()) {
      if (!r.ok()) EXPECT_NE(r.status().message().find("mem.pt: data.pkl byte"), std::string::npos);
      continue;
    }
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(c.fragment), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("mem.pt: data.pkl byte"), std::string::npos);
  }
}

TEST(PtPickleTest, MissingStopIsTruncation) {
  const std::string pkl = "\x80\x02}"s;
  auto r = convert::UnpickleTorch(std::as_bytes(std::span(pkl)), "mem.pt");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("ends without STOP"), std::string::npos);
}

TEST(PtPickleTest, SelfReferenceIsRefused) {
  auto r = Unpickle("}X\x01\x00\x00\x00" "a]q\x00h\x00" "as"s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested deeper"), std::string::npos) << r.status().message();
}

// The pickle bomb in small: {"x": ..., "meta": [s] * n} stores s once and refers to it n
// times through the memo. Flattening must charge every copy to the per-sample metadata budget
// (FORMAT.md §5) and refuse before materialising them (n * |s| bytes; the full-size bomb asks
// for 1 TB).
TEST(PtPickleTest, MemoReferencesAreChargedToTheMetadataBudget) {
  const uint32_t len = 64 << 10;  // 64 KiB string, referenced 100 times: 6.4 MB > 1 MiB
  auto le32 = [](uint32_t v) {
    std::string b(4, '\0');
    for (int k = 0; k < 4; ++k) b[k] = static_cast<char>((v >> (8 * k)) & 0xff);
    return b;
  };
  std::string body = "}X" + le32(4) + "meta](X" + le32(len) + std::string(len, 'a') + "q\x01";
  for (int i = 1; i < 100; ++i) body += "h\x01";
  body += "es";
  auto r = Unpickle(body);
  ASSERT_FALSE(r.ok()) << "accepted " << r->metadata.size() << " metadata entries";
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("mem.pt"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("FORMAT.md §5"), std::string::npos) << r.status().message();
  // The same list of 15 references fits (15 * 64 KiB < 1 MiB) and flattens to 15 entries.
  body = "}X" + le32(4) + "meta](X" + le32(len) + std::string(len, 'a') + "q\x01";
  for (int i = 1; i < 15; ++i) body += "h\x01";
  body += "es";
  r = Unpickle(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->metadata.size(), 15u);
  EXPECT_EQ(r->metadata[14].key, "meta.14");
  EXPECT_EQ(std::get<std::string>(r->metadata[14].value).size(), len);
}

// A key longer than any dataset name (FORMAT.md §5: 1024 bytes) is refused before a name is
// built from it; so is a memoised long key repeated under many dicts.
TEST(PtPickleTest, NamesLongerThanTheFormatAllowsAreRefused) {
  std::string key(1500, 'k');
  auto r = Unpickle("}X\xdc\x05\x00\x00"s + key + "K\x01s");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
  EXPECT_NE(r.status().message().find("longer than 1024 bytes"), std::string::npos)
      << r.status().message();
  std::string ok_key(1024, 'k');
  r = Unpickle("}X\x00\x04\x00\x00"s + ok_key + "K\x01s");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->metadata.at(0).key, ok_key);
}

// One tensor named 5000 times through the memo: more tensors than a sample holds (kMaxFields,
// FORMAT.md §5), refused while flattening rather than described 5000 times.
TEST(PtPickleTest, MoreTensorsThanASampleHoldsAreRefused) {
  const std::string tensor =
      "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
      "X\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x04tQK\x00K\x04\x85K\x01\x85\x89"
      "ccollections\nOrderedDict\n)RtR"s;
  auto many = [&](int n) {
    std::string body = "}X\x01\x00\x00\x00" "a]("s + tensor + "q\x01";
    for (int i = 1; i < n; ++i) body += "h\x01";
    return Unpickle(body + "es");
  };
  auto r = many(4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors.size(), 4096u);
  r = many(5000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("more than 4096 tensors"), std::string::npos)
      << r.status().message();
}

// A REDUCE on a memoised tuple of a million items is refused by its size, not copied.
TEST(PtPickleTest, ReduceWithTooManyArgumentsIsRefused) {
  std::string body = "ccollections\nOrderedDict\n(";
  for (int i = 0; i < 20; ++i) body += "K\x01";
  body += "tR";
  auto r = Unpickle(body);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("REDUCE with 20 arguments"), std::string::npos)
      << r.status().message();
}

// Concatenated gzip members inflate to their concatenation (as gzip -d), and the limit counts
// the whole output, not one member.
TEST(PtReaderTest, MultiMemberGzipIsConcatenatedUnderOneLimit) {
  TempDir dir;
  auto member = [](const std::string& text) {
    z_stream zs{};
    EXPECT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string out(deflateBound(&zs, text.size()) + 64, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    zs.avail_in = static_cast<uInt>(text.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
  };
  const std::string a(3 << 20, 'a'), b = "the second member";
  const fs::path p = dir / "two.gz";
  WriteStringToFile(p, member(a) + member(b) + member(""));
  auto r = convert::InflateGzipFile(p.string(), a.size() + b.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), a.size() + b.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->data()), r->size()), a + b);
  r = convert::InflateGzipFile(p.string(), a.size() + b.size() - 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find(p.string()), std::string::npos);
  EXPECT_NE(r.status().message().find("SourceOptions::max_decompressed_bytes"), std::string::npos);
  // Twenty members of 4 MiB zeros (80 MiB) under a 10 MiB limit: refused, and the buffer never
  // grew past the limit (the second member alone would pass it).
  std::string bomb;
  const std::string m = member(std::string(4 << 20, '\0'));
  for (int i = 0; i < 20; ++i) bomb += m;
  WriteStringToFile(dir / "bomb.gz", bomb);
  r = convert::InflateGzipFile((dir / "bomb.gz").string(), 10 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  // An empty gzip inflates to nothing.
  WriteStringToFile(dir / "empty.gz", member(""));
  r = convert::InflateGzipFile((dir / "empty.gz").string(), 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 0u);
}

TEST(PtReaderTest, DefaultDecompressionLimitIsAShareOfPhysicalMemory) {
  const uint64_t one = convert::DefaultMaxDecompressedBytes(1);
  const uint64_t many = convert::DefaultMaxDecompressedBytes(1000);
  EXPECT_GE(many, uint64_t{256} << 20);
  EXPECT_GE(one, many);
  EXPECT_LE(one, static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / 4 + 1);
}

// Views may materialise more than the file stores (views.pt: an expand() with zero strides and
// several views of one storage). The excess is bounded by max_decompressed_bytes, so a 2 KB file
// of torch.zeros(1).expand(2**31) cannot make pack fill 8 GiB; within the limit views read as
// before (MatchesTorchLoad/views_pt).
TEST(PtReaderTest, ViewsMaterialisingMoreThanTheFileAreBounded) {
  const std::string views = PtFixtureDir() + "/views.pt";
  SourceOptions opts;
  opts.max_decompressed_bytes = 1;
  auto r = OpenSource(views, opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find(views), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("SourceOptions::max_decompressed_bytes"), std::string::npos);
  opts.max_decompressed_bytes = 1 << 20;
  EXPECT_TRUE(OpenSource(views, opts).ok());
  EXPECT_TRUE(OpenSource(views).ok());
}

// A FIFO (or a symlink to one) where a source file is expected must be refused at once: a
// blocking open() would wait forever for a writer. If the open does block, the test unblocks it
// by opening the write end, so a regression fails instead of hanging.
TEST(PtReaderTest, FifoSourceIsRefusedWithoutBlocking) {
  TempDir dir;
  const fs::path fifo = dir / "sample.pt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink(fifo, dir / "link.pt");
  for (const fs::path& p : {fifo, dir / "link.pt"}) {
    auto done = std::async(std::launch::async, [&] { return OpenSource(p.string()).status(); });
    if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) ::close(w);
      ADD_FAILURE() << "opening a FIFO source blocked";
    }
    const Status st = done.get();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(p.string()), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("FIFO"), std::string::npos) << st.message();
  }
}

// A record past 4 GiB (zip64 sizes and offsets, 24-byte data descriptors). Needs ~8.5 GB of
// disk and ~9 GB of memory, and python3 with torch: run with LIBSHARD_SLOW_TESTS=1.
TEST(PtReaderTest, Zip64RecordPast4GiB) {
  const char* slow = std::getenv("LIBSHARD_SLOW_TESTS");
  if (slow == nullptr || std::string(slow) != "1")
    GTEST_SKIP() << "slow: set LIBSHARD_SLOW_TESTS=1 to run the >4 GiB zip64 test";
  TempDir dir;
  const fs::path p = dir / "big.pt";
  const std::string cmd =
      "python3 -c \"import torch; b = torch.zeros(2**32 + 100, dtype=torch.uint8); b[-1] = 7; "
      "b[2**32] = 9; torch.save({'big': b, 'after': torch.arange(5, dtype=torch.int64)}, '" +
      p.string() + "')\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto r = OpenSource(p.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& ts = (*r)->tensors();
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0].shape, Shape{(uint64_t{1} << 32) + 100});
  std::vector<std::byte> after(ts[1].nbytes);
  ASSERT_TRUE((*r)->ReadTensor(1, after).ok());
  for (int64_t i = 0; i < 5; ++i) {
    int64_t x;
    std::memcpy(&x, after.data() + 8 * i, 8);
    EXPECT_EQ(x, i);
  }
  std::vector<std::byte> big(ts[0].nbytes);
  Status st = (*r)->ReadTensor(0, big);  // also verifies the CRC of the whole 4 GiB record
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(big.back(), std::byte{7});
  EXPECT_EQ(big[uint64_t{1} << 32], std::byte{9});
  EXPECT_EQ(big[12345], std::byte{0});
}

}  // namespace
}  // namespace libshard::testing
