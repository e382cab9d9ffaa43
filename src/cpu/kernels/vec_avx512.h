// The thin vector wrapper over AVX-512F (16 float lanes). Included only by the
// AVX-512 translation unit, compiled with -mavx512f (and AVX2/FMA/F16C). Every
// function has internal linkage (see vec_scalar.h).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "half.h"

#include "cpu/kernels/exp2_coeffs.h"

namespace sdpa::cpu::avx512 {

struct Vec {
  __m512 v;
};
inline constexpr int W = 16;

static inline Vec vzero() { return {_mm512_setzero_ps()}; }
static inline Vec vset(float x) { return {_mm512_set1_ps(x)}; }
static inline Vec vload(const float* p) { return {_mm512_loadu_ps(p)}; }
// W lanes from 16-bit or int8 storage, as float32 (exact for 16-bit).
static inline Vec vload_f16(const std::uint16_t* p) { return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))}; }
static inline Vec vload_bf16(const std::uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
}
static inline Vec vload_i8(const std::int8_t* p) {
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
}
static inline void vstore(float* p, Vec a) { _mm512_storeu_ps(p, a.v); }
static inline Vec vadd(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
static inline Vec vsub(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
static inline Vec vmul(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
static inline Vec vdiv(Vec a, Vec b) { return {_mm512_div_ps(a.v, b.v)}; }
static inline Vec vabs(Vec a) { return {_mm512_abs_ps(a.v)}; }
// |a| with the sign of b.
static inline Vec vcopysign(Vec a, Vec b) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i r = _mm512_or_si512(_mm512_andnot_si512(sign, _mm512_castps_si512(a.v)),
                                    _mm512_and_si512(sign, _mm512_castps_si512(b.v)));
  return {_mm512_castsi512_ps(r)};
}
static inline Vec vfma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
// x where p != 0 (NaN counts as nonzero), else 0.
static inline Vec vkeep_nonzero(Vec x, Vec p) {
  return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p.v, _mm512_setzero_ps(), _CMP_NEQ_UQ), x.v)};
}
static inline Vec vmax(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
static inline float hmax(Vec a) { return _mm512_reduce_max_ps(a.v); }
static inline float hsum(Vec a) { return _mm512_reduce_add_ps(a.v); }

// 2^t for t <= 0 (and NaN), as vec_scalar.h's vexp2, lane by lane.
// With `lo`: 2^(t + lo), lo added to the reduced argument (see vec_scalar.h).
// The same polynomial as vec_scalar.h; 2^n is applied by VSCALEFPS, which
// takes n as a float, so no integer conversion or clamp of t is needed: a
// lane with t < -126 (-inf included, whose reduced argument is NaN) is set
// to 0 by the final mask, as vec_scalar.h does. Results are the same bits.
static inline Vec vexp2(Vec t, Vec lo) {
  namespace c = exp2_coeffs;
  const __m512 n = _mm512_roundscale_ps(t.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_add_ps(_mm512_sub_ps(t.v, n), lo.v);
  __m512 p = _mm512_set1_ps(c::c5);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c::c4));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c::c3));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c::c2));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c::c1));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c::c0));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  const __m512 r = _mm512_scalef_ps(p, n);
  // t < -126 (including -inf) -> 0; the comparison is false for NaN, which stays NaN.
  const __mmask16 tiny = _mm512_cmp_ps_mask(t.v, _mm512_set1_ps(c::min_exponent), _CMP_LT_OQ);
  return {_mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), r)};
}

static inline Vec vexp2(Vec t) { return vexp2(t, vzero()); }

// a*b rounded, and its rounding error exactly (by FMA).
static inline Vec vtwoprod(Vec a, float b, Vec* err) {
  const __m512 vb = _mm512_set1_ps(b), r = _mm512_mul_ps(a.v, vb);
  *err = {_mm512_fmsub_ps(a.v, vb, r)};
  return {r};
}

}  // namespace sdpa::cpu::avx512
