// Which build of the byte-plane kernels (codec/plane_kernels.h) runs: the baseline (SSE2 on
// x86-64) or AVX2, for the fused codec 5 interleave and the fp8 dequantization fast path. The
// same bits either way.
//
// LIBSHARD_PLANES_KERNEL=sse2|avx2 forces one (benchmarks, tests); unset, empty or "auto", the
// fastest this CPU runs (util/cpu_features.h). avx2 on a CPU without AVX2 is an error
// (Unsupported, naming the variable and the missing feature), never an illegal instruction:
// Decoder::Decode and DecodeFp8 return it before any kernel runs, and the kernels fall back to
// the baseline whenever the choice is not a supported AVX2.
#pragma once

#include <cstdint>

#include "libshard/status.h"
#include "util/cpu_features.h"

namespace libshard::codec {

enum class PlaneKernel : uint8_t { kBaseline, kAvx2 };

inline constexpr const char* kPlaneKernelVariable = "LIBSHARD_PLANES_KERNEL";

// The value of LIBSHARD_PLANES_KERNEL in the environment, or null when it is unset: the one
// place the library reads it.
const char* PlaneKernelSetting();

// The kernel for `setting` (null: unset) on a machine with `cpu`. InvalidArgument for a value
// other than sse2, avx2 and auto; Unsupported for avx2 where `cpu` lacks AVX2 (or the build
// has no AVX2 kernels: not x86-64).
Result<PlaneKernel> ChoosePlaneKernel(const char* setting, const internal::CpuFeatures& cpu);

// ChoosePlaneKernel(PlaneKernelSetting(), HostCpuFeatures()), decided at the first call.
const Result<PlaneKernel>& ActivePlaneKernel();

}  // namespace libshard::codec
