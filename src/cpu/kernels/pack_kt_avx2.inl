// K tile packing with AVX2 shuffles, shared by the AVX2 and AVX-512 kernel
// files (both are built with AVX2 enabled); included inside their namespaces.
//
// K tile transpose in 8x8 blocks: 8 key rows of 8 channels become 8 channel
// rows of 8 keys, in 24 shuffles instead of 64 scalar moves.
static void pack_kt(const float* const* k, int n, int d, float* kt, int bc_pad) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const float* const* src = k + j;
    int c = 0;
    for (; c + 8 <= d; c += 8) {
      __m256 r0 = _mm256_loadu_ps(src[0] + c), r1 = _mm256_loadu_ps(src[1] + c);
      __m256 r2 = _mm256_loadu_ps(src[2] + c), r3 = _mm256_loadu_ps(src[3] + c);
      __m256 r4 = _mm256_loadu_ps(src[4] + c), r5 = _mm256_loadu_ps(src[5] + c);
      __m256 r6 = _mm256_loadu_ps(src[6] + c), r7 = _mm256_loadu_ps(src[7] + c);
      const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      r0 = _mm256_permute2f128_ps(u0, u4, 0x20);
      r1 = _mm256_permute2f128_ps(u1, u5, 0x20);
      r2 = _mm256_permute2f128_ps(u2, u6, 0x20);
      r3 = _mm256_permute2f128_ps(u3, u7, 0x20);
      r4 = _mm256_permute2f128_ps(u0, u4, 0x31);
      r5 = _mm256_permute2f128_ps(u1, u5, 0x31);
      r6 = _mm256_permute2f128_ps(u2, u6, 0x31);
      r7 = _mm256_permute2f128_ps(u3, u7, 0x31);
      float* dst = kt + static_cast<std::int64_t>(c) * bc_pad + j;
      _mm256_storeu_ps(dst + 0 * bc_pad, r0);
      _mm256_storeu_ps(dst + 1 * bc_pad, r1);
      _mm256_storeu_ps(dst + 2 * bc_pad, r2);
      _mm256_storeu_ps(dst + 3 * bc_pad, r3);
      _mm256_storeu_ps(dst + 4 * bc_pad, r4);
      _mm256_storeu_ps(dst + 5 * bc_pad, r5);
      _mm256_storeu_ps(dst + 6 * bc_pad, r6);
      _mm256_storeu_ps(dst + 7 * bc_pad, r7);
    }
    for (; c < d; ++c)
      for (int jj = j; jj < j + 8; ++jj) kt[static_cast<std::int64_t>(c) * bc_pad + jj] = k[jj][c];
  }
  for (; j < n; ++j)
    for (int c = 0; c < d; ++c) kt[static_cast<std::int64_t>(c) * bc_pad + j] = k[j][c];
  for (int c = 0; c < d; ++c)
    for (int jj = n; jj < bc_pad; ++jj) kt[static_cast<std::int64_t>(c) * bc_pad + jj] = 0.0f;
}
