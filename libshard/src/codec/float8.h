// Scalar conversions between float32 and the 8- and 16-bit float formats the field codecs use
// (FORMAT.md §4.3.5): float8_e4m3fn (round to nearest even, saturating, no infinity), bfloat16 and
// float16 (round to nearest even). Pure functions on bit patterns; no state, thread-safe.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace libshard::codec {

inline constexpr float kE4M3Max = 448.0f;  // largest finite float8_e4m3fn
inline constexpr uint8_t kE4M3MaxCode = 0x7E;
inline constexpr uint8_t kE4M3NaN = 0x7F;

// float8_e4m3fn of v: round to nearest, ties to even; |v| > 448 saturates to ±448; NaN and ±inf
// become NaN (0x7F, sign kept). Branch-free (selects only), so loops over it vectorize and do not
// mispredict on data that straddles e4m3's subnormal range.
inline uint8_t F32ToE4M3(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t sign = (bits >> 24) & 0x80;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  // Normal range: round the float32 mantissa to 3 bits (ties to even) and rebias 127 -> 7; a carry
  // moves into the exponent, and anything past 448 saturates.
  const uint32_t rounded = (abs_bits + 0x7FFFFu + ((abs_bits >> 20) & 1)) >> 20;
  const uint32_t normal = std::min<uint32_t>(rounded - (120u << 3), kE4M3MaxCode);
  // Subnormal range (|v| < 2^-6): multiples of 2^-9. Adding 2^14 (whose ulp is 2^-9) rounds to
  // nearest even in hardware; 8 (rounding up to 2^-6) is the smallest normal's code, 0x08.
  // Clamped first so that inf and NaN never reach the float-to-integer conversion.
  const float a = std::bit_cast<float>(std::min(abs_bits, 0x3C800000u));
  const float r = (a + 16384.0f) - 16384.0f;  // not folded: IEEE arithmetic, no -ffast-math
  const uint32_t sub = static_cast<uint32_t>(r * 512.0f);
  uint32_t code = abs_bits < 0x3C800000u ? sub : normal;  // 0x3C800000 = 2^-6
  code = abs_bits >= 0x7F800000u ? kE4M3NaN : code;
  return static_cast<uint8_t>(sign | code);
}

inline float E4M3ToF32(uint8_t q) {
  const bool neg = (q & 0x80) != 0;
  const uint32_t e = (q >> 3) & 0xF;
  const uint32_t m = q & 0x7;
  float a;
  if (e == 0xF && m == 0x7) {
    a = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    a = static_cast<float>(m) * 0x1p-9f;
  } else {
    a = std::ldexp(1.0f + static_cast<float>(m) * 0.125f, static_cast<int>(e) - 7);
  }
  return neg ? -a : a;
}

inline float BF16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// bfloat16 of v, round to nearest even; NaN becomes the quiet NaN 0x7FC0 with v's sign.
inline uint16_t F32ToBF16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>(((bits >> 16) & 0x8000) | 0x7FC0);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F;
  const uint32_t m = h & 0x3FF;
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    const float a = static_cast<float>(m) * 0x1p-24f;
    return sign ? -a : a;
  }
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// float16 of v, round to nearest even, overflow to ±inf; NaN becomes 0x7E00 with v's sign.
inline uint16_t F32ToF16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return sign | 0x7E00;
  if (abs_bits >= 0x477FF000u) return sign | 0x7C00;  // ≥ 65520 rounds to inf
  const int exp = static_cast<int>(abs_bits >> 23) - 127;
  if (exp < -14) {
    // Subnormal (or zero): multiples of 2^-24, ties to even.
    const float m = std::bit_cast<float>(abs_bits) * 0x1p24f;
    uint32_t q = static_cast<uint32_t>(m);
    const float rem = m - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1))) ++q;
    return sign | static_cast<uint16_t>(q);  // q = 1024 is the smallest normal's code
  }
  uint32_t mant = abs_bits & 0x7FFFFFu;
  uint32_t m10 = mant >> 13;
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (m10 & 1))) ++m10;
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(exp + 15) << 10) + m10);
}

}  // namespace libshard::codec
