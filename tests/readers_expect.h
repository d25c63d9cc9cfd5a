// Shared by the reader tests: checks a SourceFile against the expectations that
// tests/data/make_pt_fixtures.py wrote (from torch.load / safetensors.load_file) into
// tests/data/pt/expected.json.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "libshard/dtype.h"
#include "readers/source_file.h"

namespace libshard::testing {

inline std::string PtFixtureDir() { return std::string(LIBSHARD_TEST_DATA_DIR) + "/pt"; }

inline const nlohmann::json& PtExpectations() {
  static const nlohmann::json j = [] {
    std::ifstream in(PtFixtureDir() + "/expected.json");
    return in ? nlohmann::json::parse(in) : nlohmann::json::object();
  }();
  return j;
}

// Fixture names for which `pred(name)` holds (sorted by expected.json's key order).
template <typename Pred>
std::vector<std::string> PtFixtureNames(Pred pred) {
  std::vector<std::string> out;
  for (const auto& [name, v] : PtExpectations().items())
    if (pred(name)) out.push_back(name);
  return out;
}

inline std::string TestNameOf(const std::string& file) {
  std::string s;
  for (char c : file) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

inline std::string Hex(const std::vector<std::byte>& b) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s += kHex[std::to_integer<int>(x) >> 4];
    s += kHex[std::to_integer<int>(x) & 15];
  }
  return s;
}

// Reads every tensor of `f` and returns their bytes.
inline std::vector<std::vector<std::byte>> ReadAll(const convert::SourceFile& f, Status* st) {
  std::vector<std::vector<std::byte>> out;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    std::vector<std::byte> buf(f.tensors()[i].nbytes);
    *st = f.ReadTensor(i, buf);
    if (!st->ok()) return out;
    out.push_back(std::move(buf));
  }
  *st = Status::OK();
  return out;
}

// Opens fixture `file` and checks it against expected.json, bit for bit.
inline void ExpectMatchesFixture(const std::string& file) {
  const nlohmann::json& exp = PtExpectations().at(file);
  auto r = convert::OpenSource(PtFixtureDir() + "/" + file);
  if (exp.contains("error")) {
    ASSERT_FALSE(r.ok()) << file << " opened but must be refused";
    const auto& e = exp["error"];
    const StatusCode want =
        e["code"] == "Unsupported" ? StatusCode::kUnsupported : StatusCode::kCorruption;
    EXPECT_EQ(r.status().code(), want) << r.status().ToString();
    EXPECT_NE(r.status().message().find(file), std::string::npos)
        << "message must name the file: " << r.status().ToString();
    for (const auto& frag : e["contains"])
      EXPECT_NE(r.status().message().find(frag.get<std::string>()), std::string::npos)
          << "missing '" << frag.get<std::string>() << "' in: " << r.status().ToString();
    return;
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const convert::SourceFile& f = **r;
  const auto& tensors = exp["tensors"];
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const convert::SourceTensor& s = f.tensors()[i];
    SCOPED_TRACE(s.name);
    EXPECT_EQ(s.name, t["name"].get<std::string>());
    EXPECT_EQ(std::string(DTypeName(s.dtype)), t["dtype"].get<std::string>());
    EXPECT_EQ(s.shape, t["shape"].get<std::vector<uint64_t>>());
    EXPECT_EQ(s.nbytes, NumElements(s.shape) * DTypeSize(s.dtype));
    std::vector<std::byte> buf(s.nbytes);
    Status st = f.ReadTensor(i, buf);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(Hex(buf), t["hex"].get<std::string>());
  }
  const auto& meta = exp["metadata"];
  ASSERT_EQ(f.metadata().size(), meta.size());
  for (size_t i = 0; i < meta.size(); ++i) {
    const auto& m = meta[i];
    const MetaEntry& e = f.metadata()[i];
    SCOPED_TRACE(e.key);
    EXPECT_EQ(e.key, m["key"].get<std::string>());
    const std::string type = m["type"];
    if (type == "bool") {
      ASSERT_TRUE(std::holds_alternative<bool>(e.value));
      EXPECT_EQ(std::get<bool>(e.value), m["value"].get<bool>());
    } else if (type == "int") {
      ASSERT_TRUE(std::holds_alternative<int64_t>(e.value));
      EXPECT_EQ(std::get<int64_t>(e.value), m["value"].get<int64_t>());
    } else if (type == "float") {
      ASSERT_TRUE(std::holds_alternative<double>(e.value));
      int64_t bits;
      double d = std::get<double>(e.value);
      std::memcpy(&bits, &d, 8);
      EXPECT_EQ(bits, m["bits"].get<int64_t>());
    } else {
      ASSERT_TRUE(std::holds_alternative<std::string>(e.value));
      EXPECT_EQ(std::get<std::string>(e.value), m["value"].get<std::string>());
    }
  }
}

}  // namespace libshard::testing
