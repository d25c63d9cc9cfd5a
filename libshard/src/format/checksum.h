// xxh3-64 checksums (FORMAT.md §1, §3.6, §4.1).
//
// Every xxh3 the library computes goes through here (or the public libshard/checksum.h, the same
// code), and it runs the fastest build of xxh3 the machine can execute: the system xxhash.h
// compiled once per instruction set (format/xxh3/) - the compiler's baseline (SSE2 on x86-64),
// AVX2 and AVX-512 F - one of them chosen once, at first use, from cpuid and from the register
// state the OS saves (xgetbv), as xxHash's own xxh_x86dispatch does. Every build gives the same
// value, bit for bit (XXH3_64bits, seed 0). LIBSHARD_XXH3=sse2|avx2|avx512 (or baseline) in the
// environment lowers the choice, to compare the builds in a benchmark; a build the CPU cannot
// run is never chosen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "libshard/checksum.h"

namespace libshard::format {

// XXH3-64, seed 0.
using libshard::Xxh3;
inline uint64_t Xxh3(std::span<const std::byte> bytes) { return Xxh3(bytes.data(), bytes.size()); }
using libshard::Xxh3Stream;

// A field checksum (index version 3, §3.9): the low 32 bits of the xxh3-64 of the field's bytes.
inline uint64_t FieldChecksum(const void* data, size_t size) {
  return Xxh3(data, size) & 0xffffffffu;
}
inline constexpr uint8_t kFieldChecksumWidth = 4;  // bytes of a field checksum column

// xxh3 of `bytes` with the 8 bytes at `hole` taken as zero (index §3.6, shard header §4.1).
// Precondition: hole + 8 <= bytes.size().
uint64_t Xxh3WithHole(std::span<const std::byte> bytes, size_t hole);

// The builds of xxh3 (instruction sets), slowest first.
enum class Xxh3Isa : uint8_t {
  kBaseline,  // the compiler's default target: SSE2 on x86-64
  kAvx2,
  kAvx512,    // AVX-512 F
};
// "sse2", "avx2", "avx512" (the baseline of another target: "neon", "scalar", ...).
std::string_view Xxh3IsaName(Xxh3Isa isa);
// The builds this CPU and OS can run, slowest first (kBaseline always).
const std::vector<Xxh3Isa>& SupportedXxh3Isas();
// The build Xxh3, Xxh3WithHole and Xxh3Stream use.
Xxh3Isa ActiveXxh3Isa();
// Through one given build (tests, benchmarks). Precondition: `isa` is supported (else abort).
uint64_t Xxh3Using(Xxh3Isa isa, const void* data, size_t size);
uint64_t Xxh3WithHoleUsing(Xxh3Isa isa, std::span<const std::byte> bytes, size_t hole);
Xxh3Stream Xxh3StreamUsing(Xxh3Isa isa);

}  // namespace libshard::format
