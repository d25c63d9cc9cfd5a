// xxh3-64 (seed 0), the checksum of the dataset format (docs/FORMAT.md §1), at the speed of the
// machine's vector unit: xxHash's code compiled for the baseline instruction set (SSE2 on
// x86-64), AVX2 and AVX-512, the fastest one the CPU and the OS support chosen once, at first
// use. Every build gives XXH3_64bits's value, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace libshard {

namespace internal {
struct Xxh3Ops;  // one build's entry points (libshard/src/format/checksum.cc)
}  // namespace internal

// XXH3_64bits(data, size).
uint64_t Xxh3(const void* data, size_t size);

// Streaming xxh3-64 (seed 0), for bytes that arrive in pieces: Digest() equals Xxh3 of the
// concatenation of every Update() since construction or Reset(). Where all the bytes are at
// hand, one Xxh3 call is cheaper. Copyable; allocates nothing.
class Xxh3Stream {
 public:
  Xxh3Stream();  // the build Xxh3 uses
  void Reset();
  void Update(const void* data, size_t size);
  void Update(std::span<const std::byte> bytes) { Update(bytes.data(), bytes.size()); }
  uint64_t Digest() const;

 private:
  friend struct internal::Xxh3Ops;
  explicit Xxh3Stream(const internal::Xxh3Ops* ops);
  static constexpr size_t kStateBytes = 1024;  // >= sizeof(XXH3_state_t), checked at build time
  const internal::Xxh3Ops* ops_;
  alignas(64) unsigned char state_[kStateBytes];
};

}  // namespace libshard
