// The AVX2+FMA inner loop of the FMA-peak measurement. This is the only file
// built with -mavx2 -mfma; machine.cpp calls it only after checking the CPU.
// It includes nothing from the standard library so that no inline function
// compiled here with AVX2 can be picked by the linker for use elsewhere.
//
// Why 12 chains: an FMA has a latency of 4-5 cycles and current x86 cores
// issue two per cycle, so at least 8-10 independent accumulators are needed
// to keep both pipes busy. 12 hides the latency with margin while the 12
// accumulators plus the two operands still fit in the 16 ymm registers, so
// the loop body is pure register-to-register FMAs with no spills.
#if defined(__x86_64__) || defined(__i386__)

#if !defined(__AVX2__) || !defined(__FMA__)
#error "fma_peak_avx2.cpp must be compiled with -mavx2 -mfma"
#endif

#include <immintrin.h>

#include <cstdint>

namespace sdpa::bench::detail {

// Runs `iters` steps of 12 independent chains acc = acc * a + b (12 FMAs on
// 8 lanes per step) and returns the sum of all lanes so the work is live.
float fma_chains_avx2(std::int64_t iters, float a, float b) {
  const __m256 va = _mm256_set1_ps(a);
  const __m256 vb = _mm256_set1_ps(b);
  __m256 c0 = _mm256_set1_ps(0.0f);
  __m256 c1 = _mm256_set1_ps(0.1f);
  __m256 c2 = _mm256_set1_ps(0.2f);
  __m256 c3 = _mm256_set1_ps(0.3f);
  __m256 c4 = _mm256_set1_ps(0.4f);
  __m256 c5 = _mm256_set1_ps(0.5f);
  __m256 c6 = _mm256_set1_ps(0.6f);
  __m256 c7 = _mm256_set1_ps(0.7f);
  __m256 c8 = _mm256_set1_ps(0.8f);
  __m256 c9 = _mm256_set1_ps(0.9f);
  __m256 c10 = _mm256_set1_ps(1.0f);
  __m256 c11 = _mm256_set1_ps(1.1f);
  for (std::int64_t i = 0; i < iters; ++i) {
    c0 = _mm256_fmadd_ps(c0, va, vb);
    c1 = _mm256_fmadd_ps(c1, va, vb);
    c2 = _mm256_fmadd_ps(c2, va, vb);
    c3 = _mm256_fmadd_ps(c3, va, vb);
    c4 = _mm256_fmadd_ps(c4, va, vb);
    c5 = _mm256_fmadd_ps(c5, va, vb);
    c6 = _mm256_fmadd_ps(c6, va, vb);
    c7 = _mm256_fmadd_ps(c7, va, vb);
    c8 = _mm256_fmadd_ps(c8, va, vb);
    c9 = _mm256_fmadd_ps(c9, va, vb);
    c10 = _mm256_fmadd_ps(c10, va, vb);
    c11 = _mm256_fmadd_ps(c11, va, vb);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                           _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

}  // namespace sdpa::bench::detail

#endif
