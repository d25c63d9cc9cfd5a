// codec/plane_kernel_select: LIBSHARD_PLANES_KERNEL picks the plane kernels; a forced kernel the
// CPU lacks, or an unknown value, is an error that the Decoder returns before any kernel runs
// (never an illegal instruction), and the kernels chosen decode the same bits.
#include "codec/plane_kernel_select.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "codec/field_codec.h"

namespace libshard::codec {
namespace {

using internal::CpuFeatures;

CpuFeatures With(bool avx2) {
  CpuFeatures f;
  f.avx2 = avx2;
  return f;
}

#if defined(__x86_64__) && defined(__GNUC__)
constexpr bool kAvx2Built = true;
#else
constexpr bool kAvx2Built = false;
#endif

TEST(PlaneKernelSelectTest, UnsetOrAutoTakesTheFastestTheCpuRuns) {
  for (const char* setting : {static_cast<const char*>(nullptr), "", "auto"}) {
    SCOPED_TRACE(setting == nullptr ? "unset" : setting);
    Result<PlaneKernel> without = ChoosePlaneKernel(setting, With(false));
    ASSERT_TRUE(without.ok()) << without.status().ToString();
    EXPECT_EQ(*without, PlaneKernel::kBaseline);
    Result<PlaneKernel> with = ChoosePlaneKernel(setting, With(true));
    ASSERT_TRUE(with.ok()) << with.status().ToString();
    EXPECT_EQ(*with, kAvx2Built ? PlaneKernel::kAvx2 : PlaneKernel::kBaseline);
  }
}

TEST(PlaneKernelSelectTest, Sse2IsTheBaselineOnAnyCpu) {
  for (bool avx2 : {false, true}) {
    Result<PlaneKernel> k = ChoosePlaneKernel("sse2", With(avx2));
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(*k, PlaneKernel::kBaseline);
  }
}

TEST(PlaneKernelSelectTest, ForcedAvx2WithoutAvx2IsAnErrorNamingVariableAndFeature) {
  const Result<PlaneKernel> k = ChoosePlaneKernel("avx2", With(false));
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kUnsupported);
  const std::string m = k.status().message();
  EXPECT_NE(m.find("LIBSHARD_PLANES_KERNEL=avx2"), std::string::npos) << m;
  EXPECT_NE(m.find("AVX2"), std::string::npos) << m;
  EXPECT_NE(m.find("sse2"), std::string::npos) << m;  // what to do instead
  if (kAvx2Built) {
    const Result<PlaneKernel> ok = ChoosePlaneKernel("avx2", With(true));
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(*ok, PlaneKernel::kAvx2);
  }
}

TEST(PlaneKernelSelectTest, UnknownValueIsAnErrorListingTheChoices) {
  for (const char* bad : {"avx512", "AVX2", "sse", " avx2"}) {
    SCOPED_TRACE(bad);
    const Result<PlaneKernel> k = ChoosePlaneKernel(bad, With(true));
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
    const std::string m = k.status().message();
    EXPECT_NE(m.find("LIBSHARD_PLANES_KERNEL"), std::string::npos) << m;
    EXPECT_NE(m.find("sse2, avx2 or auto"), std::string::npos) << m;
  }
}

// A planes2 (codec 5) region of random bf16 bit patterns (lossless for any bits): its decode runs
// the fused interleave kernel, AVX2 or baseline.
struct Planes2Case {
  FieldGeometry g{DType::kBFloat16, 64, 96};
  std::vector<std::byte> raw, region;
  Planes2Case() {
    std::mt19937 rng(7);
    raw.resize(g.elements() * 2);
    for (std::byte& b : raw) b = std::byte{static_cast<uint8_t>(rng())};
    const Status st = Encode(CodecId::kPlanes2, g, raw, {}, &region);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
};

// The variable is read once per process: each setting runs in a child that re-executes this
// test binary (threadsafe death tests), so the parent's choice does not leak into it.
void DecodeInChild(const char* setting, StatusCode want) {
  ::setenv("LIBSHARD_PLANES_KERNEL", setting, 1);
  Planes2Case c;
  Decoder d;
  std::vector<std::byte> out(DecodedBytes(c.g, UINT64_MAX));
  const Status st = d.Decode(c.region, CodecId::kPlanes2, c.g, UINT64_MAX, out);
  if (st.code() != want) {
    std::fprintf(stderr, "got %s\n", st.ToString().c_str());
    std::exit(1);
  }
  if (st.ok() && out != c.raw) std::exit(2);
  if (!st.ok() && st.message().find("LIBSHARD_PLANES_KERNEL") == std::string::npos) std::exit(3);
  std::exit(0);
}

TEST(PlaneKernelSelectDeathTest, TheDecoderReturnsTheChoiceError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const bool avx2 = internal::HostCpuFeatures().avx2 && kAvx2Built;
  EXPECT_EXIT(DecodeInChild("sse2", StatusCode::kOk), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(DecodeInChild("auto", StatusCode::kOk), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(DecodeInChild("avx2", avx2 ? StatusCode::kOk : StatusCode::kUnsupported),
              testing::ExitedWithCode(0), "");
  EXPECT_EXIT(DecodeInChild("fastest", StatusCode::kInvalidArgument), testing::ExitedWithCode(0),
              "");
}

}  // namespace
}  // namespace libshard::codec
