// The AVX-512F+FMA inner loop of the FMA-peak measurement. This is the only file
// built with -mavx512f; machine.cpp calls it only after checking the CPU.
// It includes nothing from the standard library so that no inline function
// compiled here with AVX-512F can be picked by the linker for use elsewhere.
//
// Why 12 chains: an FMA has a latency of 4-5 cycles and current x86 cores
// issue two per cycle, so at least 8-10 independent accumulators are needed
// to keep both pipes busy. 12 hides the latency with margin while the 12
// accumulators plus the two operands still fit in the 32 zmm registers, so
// the loop body is pure register-to-register FMAs with no spills.
#if defined(__x86_64__) || defined(__i386__)

#if !defined(__AVX512F__)
#error "fma_peak_avx512.cpp must be compiled with -mavx512f"
#endif

#include <immintrin.h>

#include <cstdint>

namespace sdpa::bench::detail {

// Runs `iters` steps of 12 independent chains acc = acc * a + b (12 FMAs on
// 16 lanes per step) and returns the sum of all lanes so the work is live.
float fma_chains_avx512(std::int64_t iters, float a, float b) {
  const __m512 va = _mm512_set1_ps(a);
  const __m512 vb = _mm512_set1_ps(b);
  __m512 c0 = _mm512_set1_ps(0.0f);
  __m512 c1 = _mm512_set1_ps(0.1f);
  __m512 c2 = _mm512_set1_ps(0.2f);
  __m512 c3 = _mm512_set1_ps(0.3f);
  __m512 c4 = _mm512_set1_ps(0.4f);
  __m512 c5 = _mm512_set1_ps(0.5f);
  __m512 c6 = _mm512_set1_ps(0.6f);
  __m512 c7 = _mm512_set1_ps(0.7f);
  __m512 c8 = _mm512_set1_ps(0.8f);
  __m512 c9 = _mm512_set1_ps(0.9f);
  __m512 c10 = _mm512_set1_ps(1.0f);
  __m512 c11 = _mm512_set1_ps(1.1f);
  for (std::int64_t i = 0; i < iters; ++i) {
    c0 = _mm512_fmadd_ps(c0, va, vb);
    c1 = _mm512_fmadd_ps(c1, va, vb);
    c2 = _mm512_fmadd_ps(c2, va, vb);
    c3 = _mm512_fmadd_ps(c3, va, vb);
    c4 = _mm512_fmadd_ps(c4, va, vb);
    c5 = _mm512_fmadd_ps(c5, va, vb);
    c6 = _mm512_fmadd_ps(c6, va, vb);
    c7 = _mm512_fmadd_ps(c7, va, vb);
    c8 = _mm512_fmadd_ps(c8, va, vb);
    c9 = _mm512_fmadd_ps(c9, va, vb);
    c10 = _mm512_fmadd_ps(c10, va, vb);
    c11 = _mm512_fmadd_ps(c11, va, vb);
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                           _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  return _mm512_reduce_add_ps(s);
}

}  // namespace sdpa::bench::detail

#endif
