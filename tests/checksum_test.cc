// xxh3 through the dispatcher (format/checksum.h): every build the machine runs gives
// XXH3_64bits's value, bit for bit, at every size and alignment, one-shot, with a hole and
// streamed; and the values are xxHash's published ones, so a wrong constant fails even if the
// reference library were wrong in the same way.
#include "format/checksum.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>  // the system library: the reference

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)  // libshard/CMakeLists.txt builds the AVX variants there
#define LIBSHARD_XXH3_X86_VARIANTS
#endif
#include "format/xxh3/xxh3_variants.h"

namespace libshard::format {
namespace {

std::vector<unsigned char> Random(size_t n, uint64_t seed) {
  std::vector<unsigned char> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

// xxHash's sanity buffer (tests/sanity_test_vectors of the xxHash repository).
std::vector<unsigned char> SanityBuffer(size_t n) {
  std::vector<unsigned char> b(n);
  uint64_t gen = 2654435761U;  // PRIME32_1
  for (size_t i = 0; i < n; ++i) {
    b[i] = static_cast<unsigned char>(gen >> 56);
    gen *= 11400714785074694797ULL;  // PRIME64_1
  }
  return b;
}

// Sizes 0..2 KiB one by one (every short-input path and the stripe/block tails), then around
// every block (1 KiB) and internal-buffer (256 B) boundary up to 64 KiB, then a few large ones.
std::vector<size_t> Sizes() {
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 2048; ++n) sizes.push_back(n);
  for (size_t b = 2048; b <= (size_t{64} << 10) + 1024; b += 256)
    for (size_t d : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{255}})
      sizes.push_back(b + d);
  for (size_t n : {size_t{1} << 17, (size_t{1} << 20) + 7, (size_t{3} << 20) + 4093})
    sizes.push_back(n);
  return sizes;
}

TEST(Xxh3Test, BaselineAlwaysSupportedAndActiveIsTheFastest) {
  const std::vector<Xxh3Isa>& isas = SupportedXxh3Isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Xxh3Isa::kBaseline);
  if (std::getenv("LIBSHARD_XXH3") == nullptr) EXPECT_EQ(ActiveXxh3Isa(), isas.back());
  for (Xxh3Isa isa : isas) std::printf("xxh3 build: %s\n", std::string(Xxh3IsaName(isa)).c_str());
  std::printf("active: %s\n", std::string(Xxh3IsaName(ActiveXxh3Isa())).c_str());
}

#if defined(LIBSHARD_XXH3_X86_VARIANTS)
// Each build is what its name says: the XXH_VECTOR it was compiled with, and the CPU check
// agrees with the compiler's (which also reads XCR0).
TEST(Xxh3Test, X86BuildsAreTheirInstructionSets) {
  EXPECT_EQ(libshard_xxh3_vector_baseline(), 1);  // XXH_SSE2
  EXPECT_EQ(libshard_xxh3_vector_avx2(), 2);      // XXH_AVX2
  EXPECT_EQ(libshard_xxh3_vector_avx512(), 3);    // XXH_AVX512
  const auto& isas = SupportedXxh3Isas();
  const auto has = [&](Xxh3Isa i) { return std::find(isas.begin(), isas.end(), i) != isas.end(); };
  __builtin_cpu_init();
  EXPECT_EQ(has(Xxh3Isa::kAvx2), __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(has(Xxh3Isa::kAvx512), __builtin_cpu_supports("avx512f") != 0);
}
#endif

// xxHash's published XXH3_64bits values (seed 0) of its sanity buffer.
TEST(Xxh3Test, PublishedValues) {
  struct Golden {
    size_t len;
    uint64_t hash;
  };
  const Golden golden[] = {
      {0, 0x2D06800538D394C2ULL},    {1, 0xC44BDFF4074EECDBULL},    {6, 0x27B56A84CD2D7325ULL},
      {12, 0xA713DAF0DFBB77E7ULL},   {24, 0xA3FE70BF9D3510EBULL},   {48, 0x397DA259ECBA1F11ULL},
      {80, 0xBCDEFBBB2C47C90AULL},   {195, 0xCD94217EE362EC3AULL},  {403, 0xCDEB804D65C6DEA4ULL},
      {512, 0x617E49599013CB6BULL},  {2048, 0xDD59E2C3A5F038E0ULL}, {2240, 0x6E73A90539CF2948ULL},
      {2367, 0xCB37AEB9E5D361EDULL},
  };
  const std::vector<unsigned char> buf = SanityBuffer(4096);
  for (const Golden& g : golden) {
    EXPECT_EQ(Xxh3(buf.data(), g.len), g.hash) << "len " << g.len;
    for (Xxh3Isa isa : SupportedXxh3Isas()) {
      EXPECT_EQ(Xxh3Using(isa, buf.data(), g.len), g.hash)
          << Xxh3IsaName(isa) << " len " << g.len;
      Xxh3Stream s = Xxh3StreamUsing(isa);
      s.Update(buf.data(), g.len);
      EXPECT_EQ(s.Digest(), g.hash) << Xxh3IsaName(isa) << " streamed, len " << g.len;
    }
  }
}

// Every build against the reference at every size of Sizes() and every start alignment 0..63
// (the AVX-512 loads are 64 bytes; unaligned input is the common case for a sample's bytes).
TEST(Xxh3Test, EveryBuildMatchesTheReferenceAtEverySizeAndAlignment) {
  const std::vector<size_t> sizes = Sizes();
  const std::vector<unsigned char> data = Random(sizes.back() + 64, 1);
  for (size_t n : sizes) {
    const size_t aligns = n <= (size_t{64} << 10) + 2048 ? 64 : 4;
    for (size_t a = 0; a < aligns; ++a) {
      const unsigned char* p = data.data() + a;
      const uint64_t want = XXH3_64bits(p, n);
      ASSERT_EQ(Xxh3(p, n), want) << "size " << n << " align " << a;
      for (Xxh3Isa isa : SupportedXxh3Isas())
        ASSERT_EQ(Xxh3Using(isa, p, n), want) << Xxh3IsaName(isa) << " size " << n << " align " << a;
    }
  }
}

TEST(Xxh3Test, HoleMatchesTheReference) {
  const std::vector<unsigned char> data = Random((size_t{64} << 10) + 64, 2);
  std::mt19937_64 rng(3);
  for (size_t n : Sizes()) {
    if (n < 8 || n > data.size()) continue;
    const size_t hole = rng() % (n - 7);
    std::vector<unsigned char> zeroed(data.begin(), data.begin() + n);
    std::memset(zeroed.data() + hole, 0, 8);
    const uint64_t want = XXH3_64bits(zeroed.data(), n);
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data.data()), n);
    ASSERT_EQ(Xxh3WithHole(bytes, hole), want) << "size " << n << " hole " << hole;
    for (Xxh3Isa isa : SupportedXxh3Isas())
      ASSERT_EQ(Xxh3WithHoleUsing(isa, bytes, hole), want) << Xxh3IsaName(isa) << " size " << n;
  }
}

// Streams cut into random pieces (1 byte to 8 KiB, across every internal-buffer boundary) equal
// the one-shot value, for every build, and a copied stream continues independently.
TEST(Xxh3Test, StreamsMatchTheReference) {
  const std::vector<unsigned char> data = Random((size_t{1} << 20) + 333, 4);
  std::mt19937_64 rng(5);
  for (size_t n : {size_t{0}, size_t{5}, size_t{240}, size_t{241}, size_t{1024}, size_t{4096} + 17,
                   size_t{65536} + 1, data.size()}) {
    const uint64_t want = XXH3_64bits(data.data(), n);
    for (int round = 0; round < 4; ++round) {
      std::vector<Xxh3Stream> streams{Xxh3Stream()};
      for (Xxh3Isa isa : SupportedXxh3Isas()) streams.push_back(Xxh3StreamUsing(isa));
      for (Xxh3Stream& s : streams) {
        size_t off = 0;
        while (off < n) {
          const size_t piece = std::min<size_t>(n - off, 1 + rng() % (round == 0 ? 7 : 8192));
          s.Update(data.data() + off, piece);
          off += piece;
        }
        ASSERT_EQ(s.Digest(), want) << "size " << n << " round " << round;
        ASSERT_EQ(s.Digest(), want) << "Digest() is repeatable";
      }
    }
  }
  Xxh3Stream a;
  a.Update(data.data(), 1000);
  Xxh3Stream b = a;
  a.Update(data.data() + 1000, 5000);
  b.Update(data.data() + 1000, 100);
  EXPECT_EQ(a.Digest(), XXH3_64bits(data.data(), 6000));
  EXPECT_EQ(b.Digest(), XXH3_64bits(data.data(), 1100));
  a.Reset();
  EXPECT_EQ(a.Digest(), XXH3_64bits(nullptr, 0));
}

}  // namespace
}  // namespace libshard::format
