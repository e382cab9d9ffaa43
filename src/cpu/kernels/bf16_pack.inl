// Packing of bfloat16 Q, K and V for the pair dot products (kernel_set.h's
// pack_q_bf16, pack_kt_bf16, pack_v_bf16), shared by the AVX512-BF16 and AMX
// kernel files (both built with AVX512BW and AVX2); included inside their
// namespaces after vec_avx512.h and tile_kernels.inl, with the set's padding
// defined first:
//   kBf16KPad  d2 = d rounded up to it; v2 holds n rounded up to it keys
//   kBf16RPad  q2 holds rows rounded up to it
// The pair instructions need 2 and 1; AMX tiles 32 (a tile row's 32 bf16) and 16.
static_assert(W == 16, "one zmm holds 16 pairs of bf16");
static_assert(kBf16KPad >= 2 && kBf16KPad % 2 == 0 && kBf16RPad >= 1, "pads are whole pairs and whole rows");

static inline int round_up_to(int x, int m) { return (x + m - 1) / m * m; }

static inline std::uint32_t load_word(const std::uint16_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

static inline void store_word(std::uint16_t* p, std::uint32_t w) { std::memcpy(p, &w, 4); }

// Pair c2 of a row of d values: (row[2*c2], row[2*c2 + 1]), 0 past d.
static inline std::uint32_t pair_at(const std::uint16_t* row, int c2, int d) {
  return 2 * c2 + 1 < d ? load_word(row + 2 * c2) : std::uint32_t{row[2 * c2]};
}

// Columns [0, count) of 32 set, for count in [0, 32].
static inline __mmask32 first_lanes32(int count) {
  return count >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (count > 0 ? count : 0)) - 1u);
}

// Rows of d values copied into rows of d2, zero past d and on the pad rows.
// Masked moves: nothing past a row's d values is read, nothing past q2's
// round_up(rows, kBf16RPad) x d2 written.
static void pack_q_bf16(const std::uint16_t* const* q, int rows, int d, std::uint16_t* q2) {
  const int d2 = round_up_to(d, kBf16KPad), rows_pad = round_up_to(rows, kBf16RPad);
  for (int r = 0; r < rows_pad; ++r) {
    std::uint16_t* dst = q2 + static_cast<std::int64_t>(r) * d2;
    int c = 0;
    if (r < rows)
      for (; c + 32 <= d; c += 32) _mm512_storeu_si512(dst + c, _mm512_loadu_si512(q[r] + c));
    for (; c < d2; c += 32) {
      const __m512i x = r < rows ? _mm512_maskz_loadu_epi16(first_lanes32(d - c), q[r] + c) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi16(dst + c, first_lanes32(d2 - c), x);
    }
  }
}

// 32-bit words, transposed in 8x8 blocks with the float shuffles of
// pack_kt_avx2.inl (shuffles move bits; no value is converted).
static inline void transpose8x8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Key row j is a row of d2/2 words; the tile is their transpose. Pair rows
// past d's (d2 > d + 1 with a pad over 2) are 0.
static void pack_kt_bf16(const std::uint16_t* const* k, int n, int d, std::uint16_t* kt2, int bc_pad) {
  const int whole = d / 2, pairs = (d + 1) / 2, pairs_pad = round_up_to(d, kBf16KPad) / 2;
  auto at = [&](int c2, int j) { return kt2 + 2 * (static_cast<std::int64_t>(c2) * bc_pad + j); };
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    int c2 = 0;
    for (; c2 + 8 <= whole; c2 += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k[j + i] + 2 * c2)));
      transpose8x8(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(at(c2 + i, j)), _mm256_castps_si256(r[i]));
    }
    for (; c2 < pairs; ++c2)
      for (int jj = j; jj < j + 8; ++jj) store_word(at(c2, jj), pair_at(k[jj], c2, d));
  }
  for (; j < n; ++j)
    for (int c2 = 0; c2 < pairs; ++c2) store_word(at(c2, j), pair_at(k[j], c2, d));
  for (int c2 = 0; c2 < pairs; ++c2)
    for (int jj = n; jj < bc_pad; ++jj) store_word(at(c2, jj), 0);
  for (int c2 = pairs; c2 < pairs_pad; ++c2) std::memset(at(c2, 0), 0, sizeof(std::uint32_t) * bc_pad);
}

// Rows 2*j2 and 2*j2 + 1 interleaved: output word c is (r0[c], r1[c]); pairs
// past n (n rounded up to kBf16KPad) are 0.
// vpermt2w indices interleaving two rows of 32 bf16 into pairs: kPairLo
// takes values 0..15 of both, kPairHi values 16..31.
alignas(64) inline constexpr std::uint16_t kPairLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                          37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                          11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
alignas(64) inline constexpr std::uint16_t kPairHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                          53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                          27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

static void pack_v_bf16(const std::uint16_t* const* v, int n, int dv, std::uint16_t* v2, int dv_pad) {
  const __m512i lo = _mm512_load_si512(kPairLo), hi = _mm512_load_si512(kPairHi);
  const int pairs_pad = round_up_to(n, kBf16KPad) / 2;
  for (int j2 = 0; j2 < pairs_pad; ++j2) {
    const std::uint16_t* r0 = 2 * j2 < n ? v[2 * j2] : nullptr;
    const std::uint16_t* r1 = 2 * j2 + 1 < n ? v[2 * j2 + 1] : nullptr;
    std::uint16_t* dst = v2 + 2 * static_cast<std::int64_t>(j2) * dv_pad;
    if (!r0) {
      std::memset(dst, 0, sizeof(std::uint32_t) * dv_pad);
      continue;
    }
    for (int c = 0; c < dv_pad; c += 2 * W) {
      const __mmask32 mask = first_lanes32(dv - c);
      const __m512i a = _mm512_maskz_loadu_epi16(mask, r0 + c);
      const __m512i b = r1 ? _mm512_maskz_loadu_epi16(mask, r1 + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + 2 * c, _mm512_permutex2var_epi16(a, lo, b));
      if (c + W < dv_pad) _mm512_storeu_si512(dst + 2 * (c + W), _mm512_permutex2var_epi16(a, hi, b));
    }
  }
}
