/* xxh3-64 compiled once per instruction set (format/checksum.cc dispatches between them).
 *
 * Each variant is the system's xxhash.h compiled with XXH_INLINE_ALL (every xxHash function
 * static, so each translation unit holds its own private copy) and XXH_VECTOR set, in its own
 * C translation unit built with that instruction set enabled (-mavx2, -mavx512f): only these
 * entry points, with their own names, leave it. C, not C++, so no inline function with external
 * linkage compiled for AVX can be merged by the linker into code that runs before the CPU was
 * checked. Callers must only call a variant the CPU and the OS support (checksum.cc checks). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes (and alignment) of the caller-provided streaming state: at least sizeof(XXH3_state_t),
 * which each variant checks at compile time. */
#define LIBSHARD_XXH3_STATE_BYTES 1024
#define LIBSHARD_XXH3_STATE_ALIGN 64

#define LIBSHARD_XXH3_DECLARE(isa)                                                            \
  uint64_t libshard_xxh3_64_##isa(const void* data, size_t size);                             \
  /* xxh3 of data[0, size) with the 8 bytes at `hole` read as zero; hole + 8 <= size. */      \
  uint64_t libshard_xxh3_64_hole_##isa(const void* data, size_t size, size_t hole);           \
  void libshard_xxh3_reset_##isa(void* state);                                                \
  void libshard_xxh3_update_##isa(void* state, const void* data, size_t size);                \
  uint64_t libshard_xxh3_digest_##isa(const void* state);                                     \
  /* The XXH_VECTOR value the variant was compiled with (tests: the build is what it says). */ \
  int libshard_xxh3_vector_##isa(void);

/* What the compiler targets by default: SSE2 on x86-64, NEON on AArch64, scalar elsewhere. */
LIBSHARD_XXH3_DECLARE(baseline)
#if defined(LIBSHARD_XXH3_X86_VARIANTS)
LIBSHARD_XXH3_DECLARE(avx2)
LIBSHARD_XXH3_DECLARE(avx512)
#endif

#ifdef __cplusplus
}
#endif
