#include "codec/plane_kernel_select.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace libshard::codec {

const char* PlaneKernelSetting() { return std::getenv(kPlaneKernelVariable); }

Result<PlaneKernel> ChoosePlaneKernel(const char* setting, const internal::CpuFeatures& cpu) {
#if defined(__x86_64__) && defined(__GNUC__)
  constexpr bool kBuiltWithAvx2 = true;  // plane_kernels.cc compiles its AVX2 kernels
#else
  constexpr bool kBuiltWithAvx2 = false;
#endif
  const bool can_avx2 = kBuiltWithAvx2 && cpu.Has(internal::CpuFeature::kAvx2);
  if (setting == nullptr || setting[0] == '\0' || std::strcmp(setting, "auto") == 0)
    return can_avx2 ? PlaneKernel::kAvx2 : PlaneKernel::kBaseline;
  if (std::strcmp(setting, "sse2") == 0) return PlaneKernel::kBaseline;
  if (std::strcmp(setting, "avx2") == 0) {
    if (!can_avx2)
      return internal::UnsupportedKernel(kPlaneKernelVariable, setting,
                                         internal::CpuFeature::kAvx2, "sse2");
    return PlaneKernel::kAvx2;
  }
  return Status::InvalidArgument(std::string(kPlaneKernelVariable) + "='" + setting +
                                 "' is not a plane kernel; use sse2, avx2 or auto (or unset it)");
}

const Result<PlaneKernel>& ActivePlaneKernel() {
  static const Result<PlaneKernel> active =
      ChoosePlaneKernel(PlaneKernelSetting(), internal::HostCpuFeatures());
  return active;
}

}  // namespace libshard::codec
