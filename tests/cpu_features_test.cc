// util/cpu_features: the detection agrees with the compiler's own check, and the error for a
// kernel the CPU cannot run names the variable, the value and the feature.
#include "util/cpu_features.h"

#include <gtest/gtest.h>

#include <string>

namespace libshard::internal {
namespace {

TEST(CpuFeaturesTest, DetectionAgreesWithTheCompiler) {
  const CpuFeatures& host = HostCpuFeatures();
  const CpuFeatures again = DetectCpuFeatures();
  EXPECT_EQ(host.avx2, again.avx2);
  EXPECT_EQ(host.avx512f, again.avx512f);
#if defined(__x86_64__) && defined(__GNUC__)
  // __builtin_cpu_supports reads cpuid and XCR0 as well (libgcc), independently of this code.
  __builtin_cpu_init();
  EXPECT_EQ(host.Has(CpuFeature::kAvx2), __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(host.Has(CpuFeature::kAvx512F), __builtin_cpu_supports("avx512f") != 0);
#else
  EXPECT_FALSE(host.avx2);
  EXPECT_FALSE(host.avx512f);
#endif
  // An AVX-512 F machine has AVX2 on every CPU that exists; a mismatch means a detection bug.
  if (host.avx512f) EXPECT_TRUE(host.avx2);
}

TEST(CpuFeaturesTest, HasReadsTheRightFlag) {
  CpuFeatures f;
  f.avx2 = true;
  EXPECT_TRUE(f.Has(CpuFeature::kAvx2));
  EXPECT_FALSE(f.Has(CpuFeature::kAvx512F));
  f = CpuFeatures{};
  f.avx512f = true;
  EXPECT_FALSE(f.Has(CpuFeature::kAvx2));
  EXPECT_TRUE(f.Has(CpuFeature::kAvx512F));
}

TEST(CpuFeaturesTest, UnsupportedKernelNamesVariableValueAndFeature) {
  const Status st = UnsupportedKernel("LIBSHARD_X", "avx512", CpuFeature::kAvx512F, "sse2");
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  const std::string& m = st.message();
  EXPECT_NE(m.find("LIBSHARD_X=avx512"), std::string::npos) << m;
  EXPECT_NE(m.find("AVX-512F"), std::string::npos) << m;
  EXPECT_NE(m.find("unset LIBSHARD_X (or set it to sse2)"), std::string::npos) << m;
}

}  // namespace
}  // namespace libshard::internal
