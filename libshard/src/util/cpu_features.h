// The CPU features every kernel dispatch of the library asks about: the xxh3 builds
// (format/checksum.cc) and the byte-plane kernels of the field codecs (codec/plane_kernels.cc).
//
// A feature counts only when the CPU has it and the OS saves the registers it uses across
// context switches (XCR0, read with xgetbv): a kernel or hypervisor can leave the AVX state
// disabled, and the first AVX instruction then faults with SIGILL although cpuid lists AVX2.
// Detected once, at first use (thread-safe); no instruction of a feature runs before this said
// the machine has it.
//
// A kernel chosen by an environment variable (LIBSHARD_PLANES_KERNEL=avx2) is a request the CPU
// may not be able to honour: UnsupportedKernel is the one error every dispatcher returns then,
// naming the variable, the value and the missing feature.
#pragma once

#include <cstdint>
#include <string_view>

#include "libshard/status.h"

namespace libshard::internal {

enum class CpuFeature : uint8_t {
  kAvx2,     // AVX2, with the YMM state enabled by the OS
  kAvx512F,  // AVX-512 F, with the opmask and ZMM states enabled by the OS
};

// "AVX2", "AVX-512F".
std::string_view CpuFeatureName(CpuFeature feature);

struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false;

  bool Has(CpuFeature feature) const {
    return feature == CpuFeature::kAvx2 ? avx2 : avx512f;
  }
};

// This machine's features (all false on other architectures than x86-64), detected at the
// first call.
const CpuFeatures& HostCpuFeatures();

// Detects them again, uncached (tests compare it with the compiler's own check).
CpuFeatures DetectCpuFeatures();

// Unsupported: "`variable`=`value` asks for a kernel that needs <feature>, which this CPU (or
// its operating system) does not provide; unset `variable` (or set it to `fallback`) to use
// the kernel this machine runs".
Status UnsupportedKernel(std::string_view variable, std::string_view value, CpuFeature missing,
                         std::string_view fallback);

}  // namespace libshard::internal
