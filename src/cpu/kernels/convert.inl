// Storage conversion, included by tile_kernels.inl in every ISA's namespace:
// rows of float16, bfloat16 or int8 (times its group scales) to float32, the
// values the float32 kernels then compute from. float16 uses F16C's
// vcvtph2ps where the file is compiled with it (AVX2 and AVX-512 sets),
// bfloat16 is a 16-bit shift, int8 a widening and a multiply: each is exact
// for 16-bit values, and the int8 product is rounded once to float32, as a
// plain float32 implementation's value * scale is.
//
// Included inside a namespace: the intrinsics headers come in through the
// vec_*.h header the including file has already included.

static inline float convert_f16_one(std::uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return half_to_float(h);
#endif
}

static void convert_to_f32(const void* src, DType dt, int n, float* dst) {
  const auto* s = static_cast<const std::uint16_t*>(src);
  int c = 0;
  if (dt == DType::bf16) {
    for (; c < n; ++c) {
      const std::uint32_t bits = static_cast<std::uint32_t>(s[c]) << 16;
      std::memcpy(dst + c, &bits, sizeof bits);
    }
    return;
  }
#if defined(__AVX512F__)
  for (; c + 16 <= n; c += 16)
    _mm512_storeu_ps(dst + c, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + c))));
#endif
#if defined(__F16C__)
  for (; c + 8 <= n; c += 8)
    _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + c))));
#endif
  for (; c < n; ++c) dst[c] = convert_f16_one(s[c]);
}

static void dequant_i8(const std::int8_t* src, const void* scales, DType sdt, int group, int n, float* dst) {
  for (int g0 = 0, s = 0; g0 < n; g0 += group, ++s) {
    const float scale = sdt == DType::f16 ? convert_f16_one(static_cast<const std::uint16_t*>(scales)[s])
                                          : static_cast<const float*>(scales)[s];
    for (int c = g0; c < g0 + group; ++c) dst[c] = static_cast<float>(src[c]) * scale;
  }
}
