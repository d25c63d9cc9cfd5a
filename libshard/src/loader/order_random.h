// The random generator of the order contract (docs/ORDER.md §1.1): SplitMix64 and Lemire's bounded
// draw. Exact; any change breaks resume of saved states (tests/order_test.cc pins golden values).
#pragma once

#include <cstdint>

namespace libshard::order_random {

inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

constexpr uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The state every order of epoch `epoch` starts from: Mix(Mix(seed) + epoch).
constexpr uint64_t EpochKey(uint64_t seed, uint64_t epoch) { return Mix(Mix(seed) + epoch); }

// Section 2a: the generator state of window `w`'s unit shuffle.
inline constexpr uint64_t kBucketSalt = 0x6275636B65747321ull;  // "bucket!!"
constexpr uint64_t BucketWindowKey(uint64_t seed, uint64_t epoch, uint64_t w) {
  return Mix(EpochKey(seed, epoch) ^ Mix(w + kBucketSalt));
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() {
    state_ += kGolden;
    return Mix(state_);
  }
  // Uniform in [0, m), m >= 1 (Lemire, "Fast random integer generation in an interval", 2019).
  uint64_t Below(uint64_t m) {
    unsigned __int128 w = static_cast<unsigned __int128>(Next()) * m;
    uint64_t lo = static_cast<uint64_t>(w);
    if (lo < m) {
      const uint64_t t = (0 - m) % m;
      while (lo < t) {
        w = static_cast<unsigned __int128>(Next()) * m;
        lo = static_cast<uint64_t>(w);
      }
    }
    return static_cast<uint64_t>(w >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace libshard::order_random
