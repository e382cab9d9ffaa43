// IEEE binary16 to float32, exact (every half is a float). Portable bit
// manipulation: used where a float16 operand is read element by element.
#pragma once

#include <cstdint>
#include <cstring>

namespace sdpa {

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t man = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0x1Fu) {
    bits = sign | 0x7F800000u | (man << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);  // normal: rebias 15 -> 127
  } else if (man == 0) {
    bits = sign;  // ±0
  } else {
    // Subnormal half: normalise the mantissa.
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    bits = sign | static_cast<std::uint32_t>(112 - e) << 23 | ((man & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// float32 to binary16, round to nearest even; overflow gives ±inf, NaN stays NaN.
inline std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0);  // inf / NaN
  if (abs >= 0x477FF000u) return sign | 0x7C00u;                                        // rounds past 65504
  if (abs < 0x33000001u) return sign;                                                   // rounds to ±0
  std::uint32_t exp = abs >> 23;
  std::uint32_t man = (abs & 0x7FFFFFu) | 0x800000u;
  int shift = exp < 113 ? static_cast<int>(126 - exp) : 13;  // subnormal halves keep fewer bits
  std::uint32_t half_man = man >> shift;
  const std::uint32_t rest = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half_man & 1u))) ++half_man;
  if (exp < 113) return sign | static_cast<std::uint16_t>(half_man);
  return sign | static_cast<std::uint16_t>(((exp - 112) << 10) + (half_man - 0x400u));
}

}  // namespace sdpa
