/* xxh3 with AVX2 (compiled with -mavx2); called only where the CPU has AVX2 and the OS saves the
 * YMM state (format/checksum.cc). */
#define LIBSHARD_XXH3_ISA avx2
#define XXH_VECTOR XXH_AVX2
#if !defined(__AVX2__)
#error "xxh3_avx2.c must be compiled with -mavx2"
#endif
#include "format/xxh3/xxh3_variant_impl.h"
