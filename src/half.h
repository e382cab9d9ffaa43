// 16-bit floats (IEEE binary16 and bfloat16) and single elements of any
// dtype, by portable bit manipulation: used where an operand is read or
// written element by element. The kernels convert whole rows with their own
// vector code (src/cpu/kernels/convert.inl), to the same values.
#pragma once

#include <cstdint>
#include <cstring>

#include "sdpa/tensor_view.h"

namespace sdpa {

// IEEE binary16 to float32, exact (every half is a float).
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

inline float bf16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// float32 to bfloat16, round to nearest even; NaN stays a (quiet) NaN, overflow gives ±inf.
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

// Element `at` (in elements) of an array of dtype t, as a double. Floats,
// int8 (the raw value), bool (0 or 1), int32 and int64.
inline double load_element(const void* base, DType t, std::int64_t at) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[at];
    case DType::f64: return static_cast<const double*>(base)[at];
    case DType::f16: return half_to_float(static_cast<const std::uint16_t*>(base)[at]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[at]);
    case DType::boolean: return static_cast<const unsigned char*>(base)[at] != 0 ? 1.0 : 0.0;
    case DType::i32: return static_cast<const std::int32_t*>(base)[at];
    case DType::i64: return static_cast<double>(static_cast<const std::int64_t*>(base)[at]);
    case DType::i8: return static_cast<const std::int8_t*>(base)[at];
  }
  return 0;
}

// Writes x as element `at` of a float array (float32, float64, float16 or
// bfloat16); 16-bit values are rounded from float32 (x is float32's value
// wherever the library computes in float32).
inline void store_float(void* base, DType t, std::int64_t at, double x) {
  switch (t) {
    case DType::f64: static_cast<double*>(base)[at] = x; return;
    case DType::f16: static_cast<std::uint16_t*>(base)[at] = float_to_half(static_cast<float>(x)); return;
    case DType::bf16: static_cast<std::uint16_t*>(base)[at] = float_to_bf16(static_cast<float>(x)); return;
    default: static_cast<float*>(base)[at] = static_cast<float>(x); return;
  }
}

}  // namespace sdpa
