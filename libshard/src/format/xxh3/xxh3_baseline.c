/* xxh3 for the compiler's default target (SSE2 on x86-64): runs on every CPU. */
#define LIBSHARD_XXH3_ISA baseline
#include "format/xxh3/xxh3_variant_impl.h"
