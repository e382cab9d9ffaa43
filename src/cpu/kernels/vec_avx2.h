// The thin vector wrapper over AVX2+FMA (8 float lanes). Included only by the
// AVX2 translation unit, which is compiled with -mavx2 -mfma -mf16c. Every
// function has internal linkage (see vec_scalar.h).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "half.h"

#include "cpu/kernels/exp2_coeffs.h"

namespace sdpa::cpu::avx2 {

struct Vec {
  __m256 v;
};
inline constexpr int W = 8;

static inline Vec vzero() { return {_mm256_setzero_ps()}; }
static inline Vec vset(float x) { return {_mm256_set1_ps(x)}; }
static inline Vec vload(const float* p) { return {_mm256_loadu_ps(p)}; }
static inline void vstore(float* p, Vec a) { _mm256_storeu_ps(p, a.v); }
static inline Vec vadd(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
static inline Vec vsub(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
static inline Vec vmul(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
static inline Vec vdiv(Vec a, Vec b) { return {_mm256_div_ps(a.v, b.v)}; }
static inline Vec vabs(Vec a) { return {_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v)}; }
// |a| with the sign of b.
static inline Vec vcopysign(Vec a, Vec b) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  return {_mm256_or_ps(_mm256_andnot_ps(sign, a.v), _mm256_and_ps(sign, b.v))};
}
static inline Vec vfma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
// x where p != 0 (NaN counts as nonzero), else 0.
static inline Vec vkeep_nonzero(Vec x, Vec p) {
  return {_mm256_and_ps(x.v, _mm256_cmp_ps(p.v, _mm256_setzero_ps(), _CMP_NEQ_UQ))};
}
static inline Vec vmax(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
static inline float hmax(Vec a) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
static inline float hsum(Vec a) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// 2^t for t <= 0 (and NaN), as vec_scalar.h's vexp2, lane by lane.
// With `lo`: 2^(t + lo), lo added to the reduced argument (see vec_scalar.h).
static inline Vec vexp2(Vec t, Vec lo) {
  namespace c = exp2_coeffs;
  // max(lo, t) returns t when t is NaN (maxps returns its second operand then),
  // so NaN survives the clamp; the clamp keeps the exponent bits in range.
  const __m256 tc = _mm256_max_ps(_mm256_set1_ps(c::min_exponent - 1.0f), t.v);
  const __m256 n = _mm256_round_ps(tc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_add_ps(_mm256_sub_ps(tc, n), lo.v);
  __m256 p = _mm256_set1_ps(c::c5);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c::c4));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c::c3));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c::c2));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c::c1));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c::c0));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  // t < -126 (including -inf) -> 0; the comparison is false for NaN, which stays NaN.
  const __m256 tiny = _mm256_cmp_ps(t.v, _mm256_set1_ps(c::min_exponent), _CMP_LT_OQ);
  return {_mm256_andnot_ps(tiny, r)};
}

static inline Vec vexp2(Vec t) { return vexp2(t, vzero()); }

// a*b rounded, and its rounding error exactly (by FMA).
static inline Vec vtwoprod(Vec a, float b, Vec* err) {
  const __m256 vb = _mm256_set1_ps(b), r = _mm256_mul_ps(a.v, vb);
  *err = {_mm256_fmsub_ps(a.v, vb, r)};
  return {r};
}

}  // namespace sdpa::cpu::avx2
