/* The body of one xxh3 variant (xxh3_variants.h): included by xxh3_<isa>.c after it defines
 * LIBSHARD_XXH3_ISA (and XXH_VECTOR, and is compiled with the matching -m flags). */
#ifndef LIBSHARD_XXH3_ISA
#error "define LIBSHARD_XXH3_ISA before including xxh3_variant_impl.h"
#endif

#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "format/xxh3/xxh3_variants.h"

#define LIBSHARD_XXH3_CAT2(a, b) a##b
#define LIBSHARD_XXH3_CAT(a, b) LIBSHARD_XXH3_CAT2(a, b)
#define LIBSHARD_XXH3_FN(name) LIBSHARD_XXH3_CAT(name, LIBSHARD_XXH3_ISA)

_Static_assert(sizeof(XXH3_state_t) <= LIBSHARD_XXH3_STATE_BYTES,
               "LIBSHARD_XXH3_STATE_BYTES is smaller than this xxhash.h's XXH3_state_t");
_Static_assert(_Alignof(XXH3_state_t) <= LIBSHARD_XXH3_STATE_ALIGN,
               "XXH3_state_t needs more alignment than LIBSHARD_XXH3_STATE_ALIGN");

uint64_t LIBSHARD_XXH3_FN(libshard_xxh3_64_)(const void* data, size_t size) {
  return XXH3_64bits(data, size);
}

uint64_t LIBSHARD_XXH3_FN(libshard_xxh3_64_hole_)(const void* data, size_t size, size_t hole) {
  static const unsigned char kZeros[8] = {0};
  const unsigned char* p = (const unsigned char*)data;
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, p, hole);
  XXH3_64bits_update(&state, kZeros, 8);
  XXH3_64bits_update(&state, p + hole + 8, size - hole - 8);
  return XXH3_64bits_digest(&state);
}

void LIBSHARD_XXH3_FN(libshard_xxh3_reset_)(void* state) {
  XXH3_64bits_reset((XXH3_state_t*)state);
}

void LIBSHARD_XXH3_FN(libshard_xxh3_update_)(void* state, const void* data, size_t size) {
  XXH3_64bits_update((XXH3_state_t*)state, data, size);
}

uint64_t LIBSHARD_XXH3_FN(libshard_xxh3_digest_)(const void* state) {
  return XXH3_64bits_digest((const XXH3_state_t*)state);
}

int LIBSHARD_XXH3_FN(libshard_xxh3_vector_)(void) { return XXH_VECTOR; }
