// Dropout for AVX-512: Philox-4x32-10 on 16 counters per register (lane g
// holds counter g, one register per counter word), the 32x32 -> 64-bit
// products taken on even and odd lanes with vpmuludq, and the keep decisions
// of 64 keys gathered into four 16-bit masks. The same bits as
// philox::rounds10 and the generic dropout() (tests/backward_test.cpp holds the
// fast path's dropout to the oracle's). Included by the AVX-512 file only.

// hi and lo 32 bits of c * m, lane by lane.
static inline void mulhilo16(__m512i c, __m512i m, __m512i* hi, __m512i* lo) {
  const __m512i even = _mm512_mul_epu32(c, m);                          // lanes 0, 2, ...: 64-bit products
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);    // lanes 1, 3, ...
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// Bits 0..3 of x moved to bits 0, 4, 8, 12.
static inline unsigned spread_nibble(unsigned x) {
  return (x & 1u) | ((x & 2u) << 3) | ((x & 4u) << 6) | ((x & 8u) << 9);
}

static void dropout_avx512(const std::uint32_t* key, std::uint32_t qi, std::uint32_t bh, std::uint32_t offset,
                           std::uint32_t thr, std::int64_t t0, int n, float scale, float* row, int multiply) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u)), m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  const __m512i vthr = _mm512_set1_epi32(static_cast<int>(thr));
  const __m512 vscale = _mm512_set1_ps(scale);
  const std::int64_t end = t0 + n;
  std::int64_t j = t0;
  while (j < end) {
    const std::int64_t g0 = j >> 2;  // counters g0 .. g0 + 15: keys 4*g0 .. 4*g0 + 63
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(g0))), lanes);
    __m512i c1 = _mm512_set1_epi32(static_cast<int>(qi)), c2 = _mm512_set1_epi32(static_cast<int>(bh)),
            c3 = _mm512_set1_epi32(static_cast<int>(offset));
    std::uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; ++r) {
      __m512i hi0, lo0, hi1, lo1;
      mulhilo16(c0, m0, &hi0, &lo0);
      mulhilo16(c2, m1, &hi1, &lo1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
      c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
      c1 = lo1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // Bit g of keep[w]: word w of counter g0 + g is kept.
    const unsigned keep[4] = {_mm512_cmpge_epu32_mask(c0, vthr), _mm512_cmpge_epu32_mask(c1, vthr),
                              _mm512_cmpge_epu32_mask(c2, vthr), _mm512_cmpge_epu32_mask(c3, vthr)};
    // Keys 4*g0 + 16*q .. + 15 are counters 4q .. 4q + 3, words interleaved.
    const std::int64_t base = 4 * g0;
    for (int q = 0; q < 4 && j < end; ++q) {
      const std::int64_t k_lo = base + 16 * q;  // first key of this group of 16
      if (k_lo + 16 <= j) continue;
      unsigned bits = 0;
      for (int w = 0; w < 4; ++w) bits |= spread_nibble((keep[w] >> (4 * q)) & 15u) << w;
      const __m512 f = _mm512_maskz_mov_ps(static_cast<__mmask16>(bits), vscale);
      // Keys [max(j, k_lo), min(end, k_lo + 16)) of this group.
      const int from = static_cast<int>(j - k_lo), to = static_cast<int>((end < k_lo + 16 ? end : k_lo + 16) - k_lo);
      const __mmask16 m = static_cast<__mmask16>(((1u << to) - 1u) & ~((1u << from) - 1u));
      float* x = row + (j - t0) - from;
      const __m512 out = multiply ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x), f) : f;
      _mm512_mask_storeu_ps(x, m, out);
      j = k_lo + to;
    }
  }
}
