// The thin vector wrapper, one lane wide: the portable reference for the SIMD
// wrappers. Every function has internal linkage so that the same names built
// with other ISA flags in other translation units never collide.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "half.h"
#include <cstring>

#include "cpu/kernels/exp2_coeffs.h"

namespace sdpa::cpu::scalar {

struct Vec {
  float v;
};
inline constexpr int W = 1;

static inline Vec vzero() { return {0.0f}; }
static inline Vec vset(float x) { return {x}; }
static inline Vec vload(const float* p) { return {*p}; }
static inline void vstore(float* p, Vec a) { *p = a.v; }
static inline Vec vadd(Vec a, Vec b) { return {a.v + b.v}; }
static inline Vec vsub(Vec a, Vec b) { return {a.v - b.v}; }
static inline Vec vmul(Vec a, Vec b) { return {a.v * b.v}; }
static inline Vec vdiv(Vec a, Vec b) { return {a.v / b.v}; }
static inline Vec vabs(Vec a) { return {std::fabs(a.v)}; }
// |a| with the sign of b.
static inline Vec vcopysign(Vec a, Vec b) { return {std::copysign(a.v, b.v)}; }
// a*b + c
static inline Vec vfma(Vec a, Vec b, Vec c) { return {a.v * b.v + c.v}; }
// max that ignores NaN in `a` only when `b` is not NaN either: used for row maxima,
// where the driver detects NaN separately.
// x where p != 0 (NaN counts as nonzero), else 0.
static inline Vec vkeep_nonzero(Vec x, Vec p) { return {p.v == 0.0f ? 0.0f : x.v}; }
static inline Vec vmax(Vec a, Vec b) { return {a.v > b.v ? a.v : b.v}; }
static inline float hmax(Vec a) { return a.v; }
static inline float hsum(Vec a) { return a.v; }

// 2^t for t <= 0 (and NaN): range reduction t = n + f, n = round(t), |f| <= 1/2,
// 2^f by the polynomial, 2^n by building the exponent bits. -inf -> 0 exactly;
// t < -126 -> 0 (no denormals); NaN -> NaN.
// With `lo`: 2^(t + lo) for a small correction lo (|lo| <= ulp(t)), added to
// the reduced argument f, where it is not lost to t's rounding.
static inline Vec vexp2(Vec t, Vec lo) {
  namespace c = exp2_coeffs;
  if (t.v != t.v) return t;
  if (t.v < c::min_exponent) return {0.0f};
  // t > 0 reaches here only in a row holding a NaN score (the row max skips
  // NaN, so it can miss a larger score): that row's result is NaN whatever
  // this returns, but the conversion below must stay defined.
  if (t.v > 127.0f) return {__builtin_inff()};
  const float n = std::nearbyint(t.v);
  const float f = (t.v - n) + lo.v;
  float p = c::c5;
  p = p * f + c::c4;
  p = p * f + c::c3;
  p = p * f + c::c2;
  p = p * f + c::c1;
  p = p * f + c::c0;
  p = p * f + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;  // n in [-126, 0]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return {p * scale};
}
static inline Vec vexp2(Vec t) { return vexp2(t, vzero()); }

// a*b rounded, and its rounding error exactly (a product of two floats is exact in double).
static inline Vec vtwoprod(Vec a, float b, Vec* err) {
  const double x = static_cast<double>(a.v) * b;
  const float r = static_cast<float>(x);
  *err = {static_cast<float>(x - r)};
  return {r};
}

}  // namespace sdpa::cpu::scalar
