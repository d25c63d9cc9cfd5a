#include "util/cpu_features.h"

#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define LIBSHARD_CPU_FEATURES_X86 1
#endif

namespace libshard::internal {

std::string_view CpuFeatureName(CpuFeature feature) {
  switch (feature) {
    case CpuFeature::kAvx2: return "AVX2";
    case CpuFeature::kAvx512F: return "AVX-512F";
  }
  return "?";
}

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
#if defined(LIBSHARD_CPU_FEATURES_X86)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return f;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  const bool avx = (ecx & (1u << 28)) != 0;
  if (!osxsave || !avx) return f;  // xgetbv itself needs OSXSAVE
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6u) == 0x6u;     // SSE and AVX state
  const bool zmm_state = (xcr0_lo & 0xE6u) == 0xE6u;   // and opmask, ZMM_Hi256, Hi16_ZMM
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return f;
  f.avx2 = ymm_state && (ebx & (1u << 5)) != 0;
  f.avx512f = zmm_state && (ebx & (1u << 16)) != 0;
#endif
  return f;
}

const CpuFeatures& HostCpuFeatures() {
  static const CpuFeatures features = DetectCpuFeatures();
  return features;
}

Status UnsupportedKernel(std::string_view variable, std::string_view value, CpuFeature missing,
                         std::string_view fallback) {
  const std::string var(variable);
  return Status::Unsupported(var + "=" + std::string(value) + " asks for a kernel that needs " +
                             std::string(CpuFeatureName(missing)) +
                             ", which this CPU (or its operating system) does not provide; "
                             "unset " + var + " (or set it to " + std::string(fallback) +
                             ") to use the kernel this machine runs");
}

}  // namespace libshard::internal
