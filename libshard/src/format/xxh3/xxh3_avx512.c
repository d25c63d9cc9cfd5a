/* xxh3 with AVX-512 F (compiled with -mavx512f); called only where the CPU has AVX-512 F and the
 * OS saves the ZMM and opmask state (format/checksum.cc). */
#define LIBSHARD_XXH3_ISA avx512
#define XXH_VECTOR XXH_AVX512
#if !defined(__AVX512F__)
#error "xxh3_avx512.c must be compiled with -mavx512f"
#endif
#include "format/xxh3/xxh3_variant_impl.h"
