// Dropout for AVX2: as dropout_avx512.inl, 8 counters per register. AVX2 has
// no unsigned compare: u >= thr is tested as !(thr > u) on sign-flipped
// values. Included by the AVX2 file only.

static inline void mulhilo8(__m256i c, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(c, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// Bit g (g < 8) of the result: lane g of u is >= thr (unsigned).
static inline unsigned keep_mask8(__m256i u, __m256i thr_flipped) {
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i below = _mm256_cmpgt_epi32(thr_flipped, _mm256_xor_si256(u, sign));  // u < thr
  return ~static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(below))) & 0xFFu;
}

static void dropout_avx2(const std::uint32_t* key, std::uint32_t qi, std::uint32_t bh, std::uint32_t offset,
                         std::uint32_t thr, std::int64_t t0, int n, float scale, float* row, int multiply) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i bitv = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u)), m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  const __m256i thr_flipped = _mm256_set1_epi32(static_cast<int>(thr ^ 0x80000000u));
  const __m256 vscale = _mm256_set1_ps(scale);
  const std::int64_t end = t0 + n;
  std::int64_t j = t0;
  while (j < end) {
    const std::int64_t g0 = j >> 2;  // counters g0 .. g0 + 7: keys 4*g0 .. 4*g0 + 31
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(g0))), lanes);
    __m256i c1 = _mm256_set1_epi32(static_cast<int>(qi)), c2 = _mm256_set1_epi32(static_cast<int>(bh)),
            c3 = _mm256_set1_epi32(static_cast<int>(offset));
    std::uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; ++r) {
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(c0, m0, &hi0, &lo0);
      mulhilo8(c2, m1, &hi1, &lo1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
      c1 = lo1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const unsigned keep[4] = {keep_mask8(c0, thr_flipped), keep_mask8(c1, thr_flipped), keep_mask8(c2, thr_flipped),
                              keep_mask8(c3, thr_flipped)};
    // Keys 4*g0 + 8*q .. + 7 are counters 2q, 2q + 1, words interleaved.
    const std::int64_t base = 4 * g0;
    for (int q = 0; q < 4 && j < end; ++q) {
      const std::int64_t k_lo = base + 8 * q;
      if (k_lo + 8 <= j) continue;
      unsigned bits = 0;
      for (int w = 0; w < 4; ++w) {
        const unsigned x = (keep[w] >> (2 * q)) & 3u;
        bits |= ((x & 1u) | ((x & 2u) << 3)) << w;
      }
      const __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), bitv), bitv);
      const __m256 f = _mm256_and_ps(_mm256_castsi256_ps(on), vscale);
      const int from = static_cast<int>(j - k_lo), to = static_cast<int>((end < k_lo + 8 ? end : k_lo + 8) - k_lo);
      float* x = row + (j - t0) - from;
      if (from == 0 && to == 8) {
        _mm256_storeu_ps(x, multiply ? _mm256_mul_ps(_mm256_loadu_ps(x), f) : f);
      } else {
        alignas(32) float fs[8];
        _mm256_store_ps(fs, f);
        for (int e = from; e < to; ++e) x[e] = multiply ? x[e] * fs[e] : fs[e];
      }
      j = k_lo + to;
    }
  }
}
