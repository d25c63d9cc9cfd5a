// The cache readers (converters/readers/cache_source.h): DeepSpec's target cache, NeMo AutoModel's
// offline cache and TorchSpec's offline folder, built here from their formats as the owners'
// public code defines them, read back byte for byte, and every hostile variant refused with a
// message that names the file and what is wrong (each case its own test).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include "libshard/checksum.h"
#include "readers/cache_dir.h"
#include "readers/cache_source.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;
using convert::CacheDir;
using convert::CacheSource;
using convert::LocalCacheDir;
using convert::MemoryCacheDir;
using convert::OpenCache;
using convert::SourceFormat;

using Files = std::map<std::string, std::string>;

std::vector<std::byte> Bytes(const std::string& s) {
  std::vector<std::byte> b(s.size());
  if (!s.empty()) std::memcpy(b.data(), s.data(), s.size());
  return b;
}

std::string Le(uint64_t v, int n) {
  std::string s(static_cast<size_t>(n), '\0');
  for (int k = 0; k < n; ++k) s[static_cast<size_t>(k)] = static_cast<char>((v >> (8 * k)) & 0xff);
  return s;
}

// Deterministic bytes: sample i's field f.
std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t k = 0; k < n; ++k) s[k] = static_cast<char>((k * 31 + static_cast<size_t>(seed) * 7 + 1) & 0xff);
  return s;
}

// A DeepSpec target cache (cache version 2): samples of the given lengths, H = 4, layers {2, 5},
// one sample per shard beyond `per_shard`.
struct DeepSpec {
  std::vector<uint32_t> lengths = {3, 5, 2};
  size_t per_shard = 2;
  std::string hidden_dtype = "bfloat16";
  uint64_t hidden = 4;
  std::string manifest_extra = R"(, "target_model_name_or_path": "Qwen/Qwen3-4B")";

  size_t HiddenBytes() const { return hidden_dtype == "bfloat16" ? 2 : 1; }
  // Per sample: the five fields' bytes.
  std::vector<std::string> Fields(size_t i) const {
    const uint32_t L = lengths[i];
    const int s = static_cast<int>(i) * 5;
    return {Pattern(L * 4, s), std::string(L, '\x01'), Pattern(L, s + 2),
            Pattern(L * 2 * hidden * HiddenBytes(), s + 3), Pattern(L * hidden * HiddenBytes(), s + 4)};
  }
  Files Build() const {
    Files f;
    std::string idx;
    std::vector<std::string> shards;
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (i % per_shard == 0) shards.emplace_back();
      std::string& shard = shards.back();
      std::vector<uint64_t> off;
      for (const std::string& b : Fields(i)) {
        off.push_back(shard.size());
        shard += b;
      }
      idx += Le(i, 8) + Le(shards.size() - 1, 4) + Le(lengths[i], 4);
      for (uint64_t o : off) idx += Le(o, 8);
    }
    std::string list;
    for (size_t k = 0; k < shards.size(); ++k) {
      char name[32];
      std::snprintf(name, sizeof name, "shard-%05zu.bin", k);
      f[name] = shards[k];
      list += (k ? ", " : "") + std::string(R"({"shard_id": )") + std::to_string(k) +
              R"(, "file_name": ")" + name + "\"}";
    }
    f["samples.idx"] = idx;
    f["manifest.json"] = R"({"version": 2, "num_samples": )" + std::to_string(lengths.size()) +
                         R"(, "num_shards": )" + std::to_string(shards.size()) +
                         R"(, "target_layer_ids": [2, 5], "hidden_dtype": ")" + hidden_dtype +
                         R"(", "token_dtype": "int32", "mask_dtype": "uint8", )"
                         R"("index_record_size": 56, "hidden_size": )" +
                         std::to_string(hidden) + R"(, "shards": [)" + list + "]" +
                         manifest_extra + "}";
    return f;
  }
};

std::unique_ptr<CacheDir> Memory(const Files& files) {
  auto d = std::make_unique<MemoryCacheDir>("CACHE");
  for (const auto& [k, v] : files) d->Add(k, Bytes(v));
  return d;
}

std::string Read(const convert::SourceFile& f, size_t t) {
  std::string s(f.tensors()[t].nbytes, '\0');
  EXPECT_TRUE(f.ReadTensor(t, std::as_writable_bytes(std::span(s))).ok());
  return s;
}

void ExpectRefused(const Files& files, SourceFormat format, StatusCode code,
                   const std::string& fragment, const std::string& file = "") {
  auto r = OpenCache(Memory(files), format);
  ASSERT_FALSE(r.ok()) << "accepted";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
  if (!file.empty())
    EXPECT_NE(r.status().message().find("CACHE/" + file), std::string::npos)
        << r.status().ToString();
}

// Replaces the first `from` in files[name] by `to`.
Files Edit(Files f, const std::string& name, const std::string& from, const std::string& to) {
  const size_t at = f[name].find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) f[name].replace(at, from.size(), to);
  return f;
}

// ---------------------------------------------------------------------------------------------
// DeepSpec

TEST(DeepSpecCacheTest, ServesEverySampleAsStoredInTheCacheOrder) {
  DeepSpec d;
  auto r = OpenCache(Memory(d.Build()), SourceFormat::kDeepSpec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const CacheSource& c = **r;
  EXPECT_EQ(c.format(), SourceFormat::kDeepSpec);
  ASSERT_EQ(c.samples().size(), 3u);
  EXPECT_EQ(c.samples()[0].key, "shard-00000.bin/0");
  EXPECT_EQ(c.samples()[1].key, "shard-00000.bin/1");
  EXPECT_EQ(c.samples()[2].key, "shard-00001.bin/2");
  for (size_t i = 0; i < 3; ++i) {
    auto f = c.OpenSample(i);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const auto& t = (*f)->tensors();
    ASSERT_EQ(t.size(), 5u);
    const uint64_t L = d.lengths[i];
    EXPECT_EQ(t[0].name, "input_ids");
    EXPECT_EQ(t[0].dtype, DType::kInt32);
    EXPECT_EQ(t[0].shape, (Shape{L}));
    EXPECT_EQ(t[1].name, "attention_mask");
    EXPECT_EQ(t[2].name, "loss_mask");
    EXPECT_EQ(t[2].dtype, DType::kUInt8);
    EXPECT_EQ(t[3].name, "target_hidden_states");
    EXPECT_EQ(t[3].dtype, DType::kBFloat16);
    EXPECT_EQ(t[3].shape, (Shape{L, 8}));
    EXPECT_EQ(t[4].name, "target_last_hidden_states");
    EXPECT_EQ(t[4].shape, (Shape{L, 4}));
    const auto want = d.Fields(i);
    uint64_t bytes = 0;
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(Read(**f, k), want[k]) << "sample " << i << " field " << k;
      bytes += want[k].size();
    }
    EXPECT_EQ(c.samples()[i].bytes, bytes);
    EXPECT_TRUE((*f)->metadata().empty());
    EXPECT_EQ(c.Find(c.samples()[i].key), i);
  }
  EXPECT_FALSE(c.Find("shard-00000.bin/7").has_value());
  // The manifest's keys, less the ones that describe this copy of the cache.
  const Attributes& a = c.attributes();
  EXPECT_EQ(std::get<std::string>(a.at("source_format")), "deepspec");
  EXPECT_EQ(std::get<int64_t>(a.at("deepspec.hidden_size")), 4);
  EXPECT_EQ(std::get<std::string>(a.at("deepspec.target_layer_ids")), "[2,5]");
  EXPECT_EQ(std::get<std::string>(a.at("deepspec.target_model_name_or_path")), "Qwen/Qwen3-4B");
  EXPECT_EQ(a.count("deepspec.shards"), 0u);
  EXPECT_EQ(a.count("deepspec.num_samples"), 0u);
}

TEST(DeepSpecCacheTest, Fp8HiddenStatesKeepTheirStoredBytesAndDtype) {
  for (const char* dt : {"float8_e4m3fn", "float8_e5m2"}) {
    DeepSpec d;
    d.hidden_dtype = dt;
    auto r = OpenCache(Memory(d.Build()), SourceFormat::kAuto);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto f = (*r)->OpenSample(1);
    ASSERT_TRUE(f.ok());
    const DType want = std::string(dt) == "float8_e4m3fn" ? DType::kFloat8E4M3FN : DType::kFloat8E5M2;
    EXPECT_EQ((*f)->tensors()[3].dtype, want);
    EXPECT_EQ((*f)->tensors()[3].nbytes, 5u * 8);
    EXPECT_EQ(Read(**f, 3), d.Fields(1)[3]);
    EXPECT_EQ(Read(**f, 4), d.Fields(1)[4]);
  }
}

TEST(DeepSpecCacheTest, HashIsTheXxh3OfTheSamplesBytesInOrder) {
  DeepSpec d;
  auto r = OpenCache(Memory(d.Build()), SourceFormat::kDeepSpec);
  ASSERT_TRUE(r.ok());
  std::string all;
  for (const std::string& b : d.Fields(2)) all += b;
  auto h = (*r)->HashSample(2);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, Xxh3(all.data(), all.size()));
}

TEST(DeepSpecCacheTest, RefusesAnotherVersion) {
  ExpectRefused(Edit(DeepSpec().Build(), "manifest.json", R"("version": 2)", R"("version": 3)"),
                SourceFormat::kDeepSpec, StatusCode::kUnsupported, "version 3", "manifest.json");
}

TEST(DeepSpecCacheTest, RefusesAnUnknownHiddenDtype) {
  DeepSpec d;
  d.hidden_dtype = "float16";
  ExpectRefused(d.Build(), SourceFormat::kDeepSpec, StatusCode::kUnsupported, "hidden_dtype");
}

TEST(DeepSpecCacheTest, RefusesAnotherRecordSize) {
  ExpectRefused(Edit(DeepSpec().Build(), "manifest.json", R"("index_record_size": 56)",
                     R"("index_record_size": 48)"),
                SourceFormat::kDeepSpec, StatusCode::kCorruption, "index_record_size");
}

TEST(DeepSpecCacheTest, RefusesAManifestWithoutRequiredKeys) {
  ExpectRefused(Edit(DeepSpec().Build(), "manifest.json", R"("mask_dtype": "uint8", )", ""),
                SourceFormat::kDeepSpec, StatusCode::kCorruption, "required keys missing: mask_dtype");
}

TEST(DeepSpecCacheTest, RefusesUnsortedLayerIds) {
  ExpectRefused(Edit(DeepSpec().Build(), "manifest.json", "[2, 5]", "[5, 2]"),
                SourceFormat::kDeepSpec, StatusCode::kCorruption, "sorted");
}

TEST(DeepSpecCacheTest, RefusesAShardCountThatDisagreesWithTheList) {
  ExpectRefused(Edit(DeepSpec().Build(), "manifest.json", R"("num_shards": 2)", R"("num_shards": 3)"),
                SourceFormat::kDeepSpec, StatusCode::kCorruption, "num_shards");
}

TEST(DeepSpecCacheTest, RefusesShardIdsThatDoNotCountUp) {
  ExpectRefused(Edit(DeepSpec().Build(), "manifest.json", R"({"shard_id": 1)", R"({"shard_id": 7)"),
                SourceFormat::kDeepSpec, StatusCode::kCorruption, "shard_id 1");
}

TEST(DeepSpecCacheTest, RefusesAShardNameThatLeavesTheDirectory) {
  for (const char* name : {"../shard-00001.bin", "/etc/passwd", "sub/shard.bin", ""}) {
    ExpectRefused(Edit(DeepSpec().Build(), "manifest.json", R"("shard-00001.bin")",
                       "\"" + std::string(name) + "\""),
                  SourceFormat::kDeepSpec, StatusCode::kCorruption, "plain file name");
  }
}

TEST(DeepSpecCacheTest, RefusesAMissingShard) {
  Files f = DeepSpec().Build();
  f.erase("shard-00001.bin");
  ExpectRefused(f, SourceFormat::kDeepSpec, StatusCode::kNotFound, "shard-00001.bin");
}

TEST(DeepSpecCacheTest, RefusesAnIndexOfTheWrongSize) {
  Files f = DeepSpec().Build();
  f["samples.idx"].pop_back();
  ExpectRefused(f, SourceFormat::kDeepSpec, StatusCode::kCorruption, "num_samples 3 needs 168",
                "samples.idx");
}

TEST(DeepSpecCacheTest, RefusesASampleCountTheIndexCannotBack) {
  // 2^60 samples would be 2^60 records: refused by the index file's size, before any allocation.
  for (const char* n : {"1152921504606846976", "329406144173384850"}) {
    ExpectRefused(Edit(DeepSpec().Build(), "manifest.json", R"("num_samples": 3)",
                       std::string(R"("num_samples": )") + n),
                  SourceFormat::kDeepSpec, StatusCode::kCorruption, "samples.idx");
  }
}

// samples.idx with record `i`'s field at byte `at` (within the record) set to `value`.
Files PatchRecord(size_t i, size_t at, uint64_t value, int width) {
  Files f = DeepSpec().Build();
  f["samples.idx"].replace(i * 56 + at, static_cast<size_t>(width), Le(value, width));
  return f;
}

TEST(DeepSpecCacheTest, RefusesRecordsOutOfOrder) {
  ExpectRefused(PatchRecord(1, 0, 2, 8), SourceFormat::kDeepSpec, StatusCode::kCorruption,
                "record 1 (byte 56): sample_id 2");
}

TEST(DeepSpecCacheTest, RefusesAShardIdPastTheManifest) {
  ExpectRefused(PatchRecord(2, 8, 9, 4), SourceFormat::kDeepSpec, StatusCode::kCorruption,
                "shard_id 9");
}

TEST(DeepSpecCacheTest, RefusesAnEmptySample) {
  ExpectRefused(PatchRecord(0, 12, 0, 4), SourceFormat::kDeepSpec, StatusCode::kCorruption,
                "seq_len 0");
}

TEST(DeepSpecCacheTest, RefusesATensorPastItsShard) {
  ExpectRefused(PatchRecord(1, 16 + 8 * 3, 1000, 8), SourceFormat::kDeepSpec,
                StatusCode::kCorruption, "target_hidden_states [1000, +80) runs past the end");
  ExpectRefused(PatchRecord(1, 16 + 8 * 4, UINT64_MAX - 2, 8), SourceFormat::kDeepSpec,
                StatusCode::kCorruption, "runs past the end");
}

TEST(DeepSpecCacheTest, RefusesSizesThatOverflow) {
  // hidden_size 2^32 and seq_len 2^32-1: the hidden states' byte count passes 2^64.
  Files f = Edit(DeepSpec().Build(), "manifest.json", R"("hidden_size": 4)",
                 R"("hidden_size": 4294967296)");
  f["samples.idx"].replace(12, 4, Le(0xFFFFFFFFu, 4));
  f["samples.idx"].replace(16, 8, Le(0, 8));  // input_ids at 0: 16 GiB, past the shard
  ExpectRefused(f, SourceFormat::kDeepSpec, StatusCode::kCorruption, "record 0 (byte 0)");
}

TEST(DeepSpecCacheTest, RefusesHostileJson) {
  Files deep = DeepSpec().Build();
  deep["manifest.json"] = std::string(100000, '[') + std::string(100000, ']');
  ExpectRefused(deep, SourceFormat::kDeepSpec, StatusCode::kCorruption, "nested deeper");
  Files dup = Edit(DeepSpec().Build(), "manifest.json", R"("version": 2)",
                   R"("version": 2, "version": 2)");
  ExpectRefused(dup, SourceFormat::kDeepSpec, StatusCode::kCorruption, "appears twice");
  Files list = DeepSpec().Build();
  list["manifest.json"] = "[1, 2]";
  ExpectRefused(list, SourceFormat::kDeepSpec, StatusCode::kCorruption, "not a JSON object");
  Files junk = DeepSpec().Build();
  junk["manifest.json"] = "{\"version\": 2,";
  ExpectRefused(junk, SourceFormat::kDeepSpec, StatusCode::kCorruption, "invalid JSON");
}

// ---------------------------------------------------------------------------------------------
// The local directory: no symlink followed, no FIFO opened, a shard that changes is noticed.

class LocalCacheTest : public ::testing::Test {
 protected:
  void Write(const Files& files) {
    for (const auto& [k, v] : files) WriteStringToFile(dir_ / k, v);
  }
  Result<std::unique_ptr<CacheSource>> Open(SourceFormat f = SourceFormat::kAuto) {
    auto d = LocalCacheDir::OpenDir(dir_.path().string());
    if (!d.ok()) return d.status();
    return OpenCache(std::move(*d), f);
  }
  TempDir dir_;
};

TEST_F(LocalCacheTest, ReadsADeepSpecCacheOnDisk) {
  Write(DeepSpec().Build());
  auto r = Open();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->format(), SourceFormat::kDeepSpec);
  EXPECT_NE((*r)->samples()[2].mtime_ns, 0);
  auto f = (*r)->OpenSample(2);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(Read(**f, 0), DeepSpec().Fields(2)[0]);
}

TEST_F(LocalCacheTest, RefusesASymlinkedShard) {
  Files f = DeepSpec().Build();
  Write(f);
  WriteStringToFile(dir_ / "elsewhere.bin", f["shard-00001.bin"]);
  fs::remove(dir_ / "shard-00001.bin");
  fs::create_symlink(dir_ / "elsewhere.bin", dir_ / "shard-00001.bin");
  auto r = Open();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("symlink"), std::string::npos) << r.status().ToString();
}

TEST_F(LocalCacheTest, RefusesAFifoShardWithoutBlocking) {
  Write(DeepSpec().Build());
  fs::remove(dir_ / "shard-00001.bin");
  ASSERT_EQ(::mkfifo((dir_ / "shard-00001.bin").c_str(), 0600), 0);
  auto r = Open();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("FIFO"), std::string::npos) << r.status().ToString();
}

TEST_F(LocalCacheTest, NoticesAShardThatChangedAfterOpening) {
  Write(DeepSpec().Build());
  auto r = Open();
  ASSERT_TRUE(r.ok());
  fs::resize_file(dir_ / "shard-00000.bin", 10);
  auto f = (*r)->OpenSample(0);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kCorruption);
  EXPECT_NE(f.status().message().find("changed while being read"), std::string::npos);
}

TEST_F(LocalCacheTest, AnUnfinishedDeepSpecCacheIsNotPackedAsFiles) {
  Files f = DeepSpec().Build();
  f.erase("manifest.json");
  Write(f);
  auto d = LocalCacheDir::OpenDir(dir_.path().string());
  ASSERT_TRUE(d.ok());
  auto fmt = convert::DetectSourceFormat(**d);
  ASSERT_FALSE(fmt.ok());
  EXPECT_NE(fmt.status().message().find("never finalized"), std::string::npos);
  WriteStringToFile(dir_ / "manifest.json", "{broken");
  fmt = convert::DetectSourceFormat(**d);
  ASSERT_FALSE(fmt.ok());
  EXPECT_NE(fmt.status().message().find("looks like a DeepSpec target cache"), std::string::npos)
      << fmt.status().ToString();
}

TEST_F(LocalCacheTest, DetectsEachLayoutAndPlainFiles) {
  auto detect = [&]() {
    auto d = LocalCacheDir::OpenDir(dir_.path().string());
    EXPECT_TRUE(d.ok());
    auto f = convert::DetectSourceFormat(**d);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? *f : SourceFormat::kAuto;
  };
  WriteStringToFile(dir_ / "data_0.pt", "x");
  EXPECT_EQ(detect(), SourceFormat::kFiles);
  WriteStringToFile(dir_ / "manifest.json", R"({"format": "libshard", "version": 3})");
  EXPECT_EQ(detect(), SourceFormat::kFiles);  // a libshard dataset, or anyone else's manifest
  WriteStringToFile(dir_ / "manifest.json", R"({"format_version": 2, "shard_size": 4})");
  EXPECT_EQ(detect(), SourceFormat::kAutoModel);
  WriteStringToFile(dir_ / "manifest.jsonl", "");
  WriteStringToFile(dir_ / "dataset.json", R"({"version": 1})");
  EXPECT_EQ(detect(), SourceFormat::kTorchSpec);
}

// ---------------------------------------------------------------------------------------------
// NeMo AutoModel

std::string Safetensors(const std::vector<std::tuple<std::string, std::string, Shape, std::string>>& t) {
  std::string header = "{", data;
  for (const auto& [name, dtype, shape, bytes] : t) {
    std::string dims;
    for (uint64_t d : shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + ("\"" + name + "\":{\"dtype\":\"" + dtype +
                                                 "\",\"shape\":[" + dims + "],\"data_offsets\":[" +
                                                 std::to_string(data.size()) + "," +
                                                 std::to_string(data.size() + bytes.size()) + "]}");
    data += bytes;
  }
  header += "}";
  return Le(header.size(), 8) + header + data;
}

// n samples of S = 3 tokens of an EAGLE-3 cache, shard_size B: the tensors AutoModel's reader
// reads, input_ids int64 [S], aux_hidden_states bf16 [S, 6], attention_mask and loss_mask int64
// [S], position_mask bool [S, 1], and the full target_probs f32 [S, 32] (draft_vocab_size 32,
// target_probs_topk null). `topk` > 0: target_probs_values f32 + target_probs_indices i32
// [S, topk] instead.
struct AutoModel {
  uint64_t n = 5, shard_size = 2;
  uint64_t topk = 0;
  std::string manifest_extra = R"(, "draft_vocab_size": 32, "target_probs_topk": null)";
  struct Column {
    const char* name;
    const char* dtype;
    Shape row;
    size_t bytes;
  };
  std::vector<Column> Columns() const {
    std::vector<Column> c = {{"input_ids", "I64", {3}, 3 * 8},
                             {"aux_hidden_states", "BF16", {3, 6}, 3 * 6 * 2},
                             {"attention_mask", "I64", {3}, 3 * 8},
                             {"loss_mask", "I64", {3}, 3 * 8},
                             {"position_mask", "BOOL", {3, 1}, 3}};
    if (topk == 0) {
      c.push_back({"target_probs", "F32", {3, 32}, 3 * 32 * 4});
    } else {
      c.push_back({"target_probs_values", "F32", {3, topk}, 3 * topk * 4});
      c.push_back({"target_probs_indices", "I32", {3, topk}, 3 * topk * 4});
    }
    return c;
  }
  std::string Row(uint64_t i, int field) const {
    return Pattern(Columns()[field].bytes, static_cast<int>(i) + 50 * field);
  }
  uint64_t RowBytes() const {
    uint64_t b = 0;
    for (const Column& c : Columns()) b += c.bytes;
    return b;
  }
  Files Build() const {
    Files f;
    const std::vector<Column> cols = Columns();
    for (uint64_t k = 0; k * shard_size < n; ++k) {
      const uint64_t rows = std::min(shard_size, n - k * shard_size);
      std::vector<std::tuple<std::string, std::string, Shape, std::string>> tensors;
      for (size_t c = 0; c < cols.size(); ++c) {
        std::string data;
        for (uint64_t r = 0; r < rows; ++r) data += Row(k * shard_size + r, static_cast<int>(c));
        Shape shape = {rows};
        shape.insert(shape.end(), cols[c].row.begin(), cols[c].row.end());
        tensors.emplace_back(cols[c].name, cols[c].dtype, shape, data);
      }
      char name[40];
      std::snprintf(name, sizeof name, "shard-%06llu.safetensors", static_cast<unsigned long long>(k));
      f[name] = Safetensors(tensors);
    }
    f["manifest.json"] = R"({"format_version": 2, "num_samples": )" + std::to_string(n) +
                         R"(, "shard_size": )" + std::to_string(shard_size) + manifest_extra + "}";
    return f;
  }
};

TEST(AutoModelCacheTest, ServesRowIOfEveryTensorAsSampleI) {
  AutoModel a;
  auto r = OpenCache(Memory(a.Build()), SourceFormat::kAuto);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const CacheSource& c = **r;
  EXPECT_EQ(c.format(), SourceFormat::kAutoModel);
  ASSERT_EQ(c.samples().size(), 5u);
  EXPECT_EQ(c.samples()[4].key, "shard-000002.safetensors/4");
  for (uint64_t i = 0; i < 5; ++i) {
    auto f = c.OpenSample(i);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_EQ((*f)->tensors().size(), 6u);
    EXPECT_EQ((*f)->tensors()[0].name, "input_ids");
    EXPECT_EQ((*f)->tensors()[0].shape, (Shape{3}));
    EXPECT_EQ((*f)->tensors()[1].dtype, DType::kBFloat16);
    EXPECT_EQ((*f)->tensors()[1].shape, (Shape{3, 6}));
    EXPECT_EQ((*f)->tensors()[5].shape, (Shape{3, 32}));
    for (int t = 0; t < 6; ++t) EXPECT_EQ(Read(**f, t), a.Row(i, t)) << t;
    EXPECT_EQ(c.samples()[i].bytes, a.RowBytes());
  }
  EXPECT_EQ(std::get<int64_t>(c.attributes().at("automodel.draft_vocab_size")), 32);
  EXPECT_EQ(std::get<std::string>(c.attributes().at("automodel.target_probs_topk")), "null");
  EXPECT_EQ(c.attributes().count("automodel.num_samples"), 0u);
}

TEST(AutoModelCacheTest, LeavesOutAManifestKeyTooLargeForAnAttribute) {
  AutoModel a;
  std::string ids;
  for (int k = 0; k < 20000; ++k) ids += (k ? "," : "") + std::to_string(k);
  a.manifest_extra =
      R"(, "draft_vocab_size": 32, "target_probs_topk": null, "selected_token_ids": [)" + ids + "]";
  auto r = OpenCache(Memory(a.Build()), SourceFormat::kAutoModel);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->attributes().count("automodel.selected_token_ids"), 0u);
  EXPECT_EQ((*r)->omitted_keys(), (std::vector<std::string>{"selected_token_ids"}));
}

TEST(AutoModelCacheTest, RefusesAMissingShard) {
  Files f = AutoModel().Build();
  f.erase("shard-000001.safetensors");
  ExpectRefused(f, SourceFormat::kAutoModel, StatusCode::kCorruption,
                "holds 2 shard files (0, 2)", "manifest.json");
}

TEST(AutoModelCacheTest, RefusesAShardBeyondTheManifest) {
  Files f = AutoModel().Build();
  f["shard-000003.safetensors"] = f["shard-000002.safetensors"];
  ExpectRefused(f, SourceFormat::kAutoModel, StatusCode::kCorruption, "holds 4 shard files");
}

TEST(AutoModelCacheTest, RefusesShardsOfAnotherShardSize) {
  // A resume that changed shard_size (Automodel#2478): the rows no longer match the manifest.
  ExpectRefused(Edit(AutoModel().Build(), "manifest.json", R"("shard_size": 2)", R"("shard_size": 3)"),
                SourceFormat::kAutoModel, StatusCode::kCorruption, "holds 3 shard files");
  AutoModel a;
  a.n = 4;
  Files f = a.Build();
  f = Edit(f, "manifest.json", R"("shard_size": 2)", R"("shard_size": 3)");
  f = Edit(f, "manifest.json", R"("num_samples": 4)", R"("num_samples": 5)");
  ExpectRefused(f, SourceFormat::kAutoModel, StatusCode::kCorruption, "shard 0 holds 3 samples",
                "shard-000000.safetensors");
}

TEST(AutoModelCacheTest, RefusesAZeroShardSize) {
  ExpectRefused(Edit(AutoModel().Build(), "manifest.json", R"("shard_size": 2)", R"("shard_size": 0)"),
                SourceFormat::kAutoModel, StatusCode::kCorruption, "shard_size");
}

TEST(AutoModelCacheTest, RefusesRowsThatHoldNoBytes) {
  // 10^12 samples of zero bytes in one shard: the count is not backed by the file, refused
  // before any per-sample allocation.
  Files f;
  f["shard-000000.safetensors"] = Safetensors({{"x", "U8", Shape{1000000000000, 0}, ""}});
  f["manifest.json"] =
      R"({"format_version": 2, "num_samples": 1000000000000, "shard_size": 1000000000000})";
  ExpectRefused(f, SourceFormat::kAutoModel, StatusCode::kCorruption, "hold no bytes");
}

TEST(AutoModelCacheTest, RefusesADamagedShardHeader) {
  Files f = AutoModel().Build();
  f["shard-000001.safetensors"].replace(8, 1, "[");
  ExpectRefused(f, SourceFormat::kAutoModel, StatusCode::kCorruption, "safetensors header",
                "shard-000001.safetensors");
}

// What AutoModel 0.7's own readers (eagle3_cache.py, dspark_cache.py, offline_cache.py) refuse,
// pack refuses too, naming the file, the field and both values: a cache libshard.automodel would
// refuse at open must not become a dataset.
TEST(AutoModelCacheTest, RefusesAFormatVersionItsReaderDoesNotRead) {
  for (const char* v : {"3", "1", "0"}) {
    ExpectRefused(Edit(AutoModel().Build(), "manifest.json", R"("format_version": 2)",
                       std::string(R"("format_version": )") + v),
                  SourceFormat::kAutoModel, StatusCode::kUnsupported,
                  std::string("format_version ") + v + ", but the shards hold an EAGLE-3 cache, "
                  "whose AutoModel reader reads format_version 2 only",
                  "manifest.json");
  }
  // A DSpark cache (its four tensors) reads format_version 1 only.
  Files f;
  f["shard-000000.safetensors"] = Safetensors(
      {{"input_ids", "I64", Shape{1, 2}, std::string(16, 'a')},
       {"loss_mask", "I64", Shape{1, 2}, std::string(16, 'b')},
       {"target_hidden_states", "BF16", Shape{1, 2, 4}, std::string(16, 'c')},
       {"target_last_hidden_states", "BF16", Shape{1, 2, 2}, std::string(8, 'd')}});
  f["manifest.json"] = R"({"format_version": 1, "num_samples": 1, "shard_size": 1})";
  EXPECT_TRUE(OpenCache(Memory(f), SourceFormat::kAutoModel).ok());
  ExpectRefused(Edit(f, "manifest.json", R"("format_version": 1)", R"("format_version": 2)"),
                SourceFormat::kAutoModel, StatusCode::kUnsupported,
                "format_version 2, but the shards hold a DSpark cache, whose AutoModel reader "
                "reads format_version 1 only");
  ExpectRefused(Edit(f, "shard-000000.safetensors", "target_last_hidden_states",
                     std::string(std::strlen("target_last_hidden_states"), 'z')),
                SourceFormat::kAutoModel, StatusCode::kCorruption,
                "no tensor 'target_last_hidden_states', which AutoModel's DSpark reader reads");
  // Neither layout's tensors, and a version neither reader reads.
  Files other;
  other["shard-000000.safetensors"] = Safetensors({{"x", "U8", Shape{1, 4}, "abcd"}});
  other["manifest.json"] = R"({"format_version": 7, "num_samples": 1, "shard_size": 1})";
  ExpectRefused(other, SourceFormat::kAutoModel, StatusCode::kUnsupported,
                "format_version 7, and the shards hold neither an EAGLE-3");
}

TEST(AutoModelCacheTest, RefusesAMissingOrMistypedDraftVocabSizeOrTopK) {
  AutoModel a;
  a.manifest_extra = R"(, "target_probs_topk": null)";
  ExpectRefused(a.Build(), SourceFormat::kAutoModel, StatusCode::kCorruption,
                "draft_vocab_size is missing, not a positive integer", "manifest.json");
  a.manifest_extra = R"(, "draft_vocab_size": "32", "target_probs_topk": null)";
  ExpectRefused(a.Build(), SourceFormat::kAutoModel, StatusCode::kCorruption,
                R"(draft_vocab_size is "32", not a positive integer)");
  a.manifest_extra = R"(, "draft_vocab_size": 32, "target_probs_topk": "8")";
  ExpectRefused(a.Build(), SourceFormat::kAutoModel, StatusCode::kCorruption,
                R"(target_probs_topk is "8", not null or an integer)");
}

TEST(AutoModelCacheTest, RefusesATopKTheShardsContradict) {
  // The manifest says top-8, the shards hold the full distribution.
  AutoModel a;
  a.manifest_extra = R"(, "draft_vocab_size": 32, "target_probs_topk": 8)";
  ExpectRefused(a.Build(), SourceFormat::kAutoModel, StatusCode::kCorruption,
                "no tensor 'target_probs_values', which AutoModel's EAGLE-3 reader reads from "
                "every shard (manifest.json's target_probs_topk 8 with draft_vocab_size 32 says "
                "the cache stores the top-8 target_probs_values + target_probs_indices)",
                "shard-000000.safetensors");
  // The manifest says the full distribution, the shards hold top-k.
  AutoModel t;
  t.topk = 4;
  ExpectRefused(t.Build(), SourceFormat::kAutoModel, StatusCode::kCorruption,
                "no tensor 'target_probs', which AutoModel's EAGLE-3 reader reads from every "
                "shard (manifest.json's target_probs_topk null with draft_vocab_size 32 says the "
                "cache stores the full target_probs); the shard holds input_ids [n, 3]");
  // Top-k of another k.
  t.manifest_extra = R"(, "draft_vocab_size": 32, "target_probs_topk": 5)";
  ExpectRefused(t.Build(), SourceFormat::kAutoModel, StatusCode::kCorruption,
                "target_probs_values [n, 3, 4] is 4 wide, but manifest.json's target_probs_topk "
                "5 with draft_vocab_size 32 says the cache stores the top-5");
  t.manifest_extra = R"(, "draft_vocab_size": 32, "target_probs_topk": 4)";
  EXPECT_TRUE(OpenCache(Memory(t.Build()), SourceFormat::kAutoModel).ok());
  // The full distribution of another width.
  a.manifest_extra = R"(, "draft_vocab_size": 40, "target_probs_topk": null)";
  ExpectRefused(a.Build(), SourceFormat::kAutoModel, StatusCode::kCorruption,
                "target_probs [n, 3, 32] is 32 wide, but manifest.json's target_probs_topk null "
                "with draft_vocab_size 40 says the cache stores the full target_probs (40 wide)");
  // A k at or past the vocabulary's width does not compress (eagle3_cache.is_compressed): the
  // full target_probs, as its reader reads it.
  for (const char* k : {"32", "33", "0", "-1"}) {
    a.manifest_extra = std::string(R"(, "draft_vocab_size": 32, "target_probs_topk": )") + k;
    EXPECT_TRUE(OpenCache(Memory(a.Build()), SourceFormat::kAutoModel).ok()) << k;
  }
}

TEST(AutoModelCacheTest, RefusesAShardWithoutATensorItsReaderReads) {
  for (const char* name : {"attention_mask", "loss_mask", "position_mask", "input_ids"}) {
    Files f = AutoModel().Build();
    const std::string renamed = std::string(std::strlen(name), 'z');
    f = Edit(f, "shard-000001.safetensors", std::string("\"") + name + "\"",
             "\"" + renamed + "\"");
    ExpectRefused(f, SourceFormat::kAutoModel, StatusCode::kCorruption,
                  std::string("no tensor '") + name + "', which AutoModel's EAGLE-3 reader reads",
                  "shard-000001.safetensors");
  }
}

TEST(CacheManifestTest, RefusesAByteOrderMarkAsTheOwnersJsonReadersDo) {
  Files f = AutoModel().Build();
  f["manifest.json"] = "\xEF\xBB\xBF" + f["manifest.json"];
  ExpectRefused(f, SourceFormat::kAutoModel, StatusCode::kCorruption, "byte-order mark",
                "manifest.json");
  Files d = DeepSpec().Build();
  d["manifest.json"] = "\xEF\xBB\xBF" + d["manifest.json"];
  ExpectRefused(d, SourceFormat::kDeepSpec, StatusCode::kCorruption, "byte-order mark",
                "manifest.json");
}

// ---------------------------------------------------------------------------------------------
// TorchSpec: the manifest lines (the .pt files themselves are the .pt reader's; the Python tests
// pack real ones).

Files TorchSpec(const std::string& lines) {
  Files f;
  f["dataset.json"] = R"({"version": 1, "last_hidden_states_prenorm": false})";
  f["manifest.jsonl"] = lines;
  f["samples/a.pt"] = "aaaa";
  f["samples/b.pt"] = "bbbbbb";
  return f;
}
const std::string kLineA = R"({"split": "train", "data_id": "a", "file": "samples/a.pt", "seq_len": 3})";
const std::string kLineB = R"({"split": "eval", "data_id": 7, "file": "samples/b.pt", "seq_len": 4})";

TEST(TorchSpecFolderTest, ListsTheManifestLinesInOrder) {
  auto r = OpenCache(Memory(TorchSpec(kLineB + "\n\n  \n" + kLineA)), SourceFormat::kAuto);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->format(), SourceFormat::kTorchSpec);
  ASSERT_EQ((*r)->samples().size(), 2u);
  EXPECT_EQ((*r)->samples()[0].key, "samples/b.pt");
  EXPECT_EQ((*r)->samples()[0].bytes, 6u);
  EXPECT_EQ((*r)->samples()[1].key, "samples/a.pt");
  EXPECT_EQ(std::get<std::string>((*r)->attributes().at("torchspec.last_hidden_states_prenorm")),
            "false");
  // Not a torch.save file: the .pt reader's refusal, naming it.
  auto f = (*r)->OpenSample(1);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("CACHE/samples/a.pt"), std::string::npos)
      << f.status().ToString();
}

TEST(TorchSpecFolderTest, RefusesAnotherVersion) {
  Files f = TorchSpec(kLineA);
  f["dataset.json"] = R"({"version": 2})";
  ExpectRefused(f, SourceFormat::kTorchSpec, StatusCode::kUnsupported, "version 2",
                "dataset.json");
}

TEST(TorchSpecFolderTest, RefusesAFileOutsideTheFolder) {
  for (const char* path : {"../a.pt", "/etc/passwd", "samples/../../a.pt", "samples//a.pt", ""}) {
    Files f = TorchSpec(Edit(TorchSpec(kLineA), "manifest.jsonl", "samples/a.pt", path)["manifest.jsonl"]);
    ExpectRefused(f, SourceFormat::kTorchSpec, StatusCode::kCorruption,
                  "line 1: file is not a relative path beneath the folder", "manifest.jsonl");
  }
}

TEST(TorchSpecFolderTest, RefusesADuplicateDataId) {
  ExpectRefused(TorchSpec(kLineA + "\n" + kLineA), SourceFormat::kTorchSpec,
                StatusCode::kCorruption, "line 2: data_id 'a' appears twice");
}

TEST(TorchSpecFolderTest, RefusesAnUnknownSplit) {
  ExpectRefused(TorchSpec(Edit(TorchSpec(kLineA), "manifest.jsonl", "train", "test")["manifest.jsonl"]),
                SourceFormat::kTorchSpec, StatusCode::kCorruption, "split");
}

TEST(TorchSpecFolderTest, RefusesAMissingSample) {
  ExpectRefused(TorchSpec(Edit(TorchSpec(kLineA), "manifest.jsonl", "a.pt", "c.pt")["manifest.jsonl"]),
                SourceFormat::kTorchSpec, StatusCode::kNotFound, "samples/c.pt");
}

TEST(TorchSpecFolderTest, RefusesAnEndlessLine) {
  ExpectRefused(TorchSpec(std::string(2 << 20, ' ') + "x"), SourceFormat::kTorchSpec,
                StatusCode::kCorruption, "longer than");
  ExpectRefused(TorchSpec("{\"split\": \"train\"\n"), SourceFormat::kTorchSpec,
                StatusCode::kCorruption, "invalid JSON");
}

TEST_F(LocalCacheTest, TorchSpecRefusesASymlinkedSamplesDirectory) {
  TempDir other;
  WriteStringToFile(other / "a.pt", "aaaa");
  WriteStringToFile(dir_ / "dataset.json", R"({"version": 1})");
  WriteStringToFile(dir_ / "manifest.jsonl", kLineA + "\n");
  fs::create_symlink(other.path(), dir_ / "samples");
  auto r = Open(SourceFormat::kTorchSpec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("symlink"), std::string::npos) << r.status().ToString();
}

TEST(SourceFormatTest, NamesRoundTrip) {
  for (SourceFormat f : {SourceFormat::kAuto, SourceFormat::kFiles, SourceFormat::kDeepSpec,
                         SourceFormat::kAutoModel, SourceFormat::kTorchSpec}) {
    auto back = convert::ParseSourceFormat(convert::SourceFormatName(f));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, f);
  }
  auto bad = convert::ParseSourceFormat("deepseek");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("deepspec, automodel, torchspec"), std::string::npos);
}

}  // namespace
}  // namespace libshard::testing
