#include "format/checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

namespace libshard::format {

uint64_t Xxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t Xxh3WithHole(std::span<const std::byte> bytes, size_t hole) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  static constexpr std::byte kZeros[8] = {};
  XXH3_64bits_update(&state, bytes.data(), hole);
  XXH3_64bits_update(&state, kZeros, 8);
  XXH3_64bits_update(&state, bytes.data() + hole + 8, bytes.size() - hole - 8);
  return XXH3_64bits_digest(&state);
}

}  // namespace libshard::format
