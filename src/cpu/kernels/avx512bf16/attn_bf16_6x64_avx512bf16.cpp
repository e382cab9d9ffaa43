// attn_bf16_6x64_avx512bf16: the AVX-512F float32 kernels of
// attn_f32_6x64_avx512, plus bfloat16 dot products with AVX512-BF16
// (vdpbf16ps: per 32-bit lane, acc += a[2i]·b[2i] + a[2i+1]·b[2i+1], both
// products exact in float32). This file alone is compiled with
// -mavx512bf16 (and AVX512BW/VL for the masked 16-bit moves); dispatch calls
// it only on CPUs (and OSes) that support all of them.
//
// Blocking: the bf16 kernels keep the 6x64 block of the float32 ones. Each
// step of scores_bf16 loads 4 vectors of key pairs, broadcasts 6 query pairs
// and issues 24 vdpbf16ps, i.e. two reduction steps of the float32 kernel per
// instruction; pv_bf16 does the same with P pairs against value pairs.
// Whether that is faster depends on the core: on Intel Emerald Rapids one
// vdpbf16ps zmm issues about every 2 cycles against 2 FMAs per cycle, so the
// bf16 kernels run at ~0.65x the float32 ones there (bench/attention_bench,
// BM_kernel_*), and bf16 storage is better served by widening to float32.
#include <cstring>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/vec_avx512.h"

namespace sdpa::cpu::avx512bf16 {

// The AVX-512F wrapper as it is: its functions have internal linkage, so this
// file's copies of them and of the kernels below are compiled with its flags.
using namespace avx512;

inline constexpr KernelTile kTile = tiles::attn_bf16_6x64_avx512bf16;
static_assert(kTile.w == W, "kernels.def's W for attn_bf16_6x64_avx512bf16 must match vec_avx512.h");
inline constexpr int MR = kTile.mr;
inline constexpr int NV = kTile.nv;

#include "cpu/kernels/tile_kernels.inl"
#include "cpu/kernels/pack_kt_avx2.inl"
#include "cpu/kernels/dropout_avx512.inl"

// ---- bfloat16 ------------------------------------------------------------------

// vdpbf16ps takes one pair per lane: d and n are padded to pairs only.
inline constexpr int kBf16KPad = 2;
inline constexpr int kBf16RPad = 1;

#include "cpu/kernels/bf16_pack.inl"

static inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

// Pairs per summation block: kDotChunk / 2 pairs are kDotChunk values, so the blocked
// summation and its error bound are those of the float32 `scores`.
inline constexpr int kPairChunk = kDotChunk / 2;

// Rows [0, M) of q2 (d2 apart) against the NR keys at kt2; S rows bc_pad apart.
template <int M>
static inline void scores_bf16_block(const std::uint16_t* q2, int d2, const std::uint16_t* kt2, int bc_pad,
                                     __m512 scale, float* s) {
  const int pairs = d2 / 2;
  __m512 acc[M][NV];
  for (int p0 = 0; p0 < pairs; p0 += kPairChunk) {
    const int p1 = min_int(pairs, p0 + kPairChunk);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int x = 0; x < NV; ++x) acc[m][x] = _mm512_setzero_ps();
    for (int c2 = p0; c2 < p1; ++c2) {
      const std::uint16_t* row = kt2 + 2 * static_cast<std::int64_t>(c2) * bc_pad;
      __m512bh b[NV];
#pragma GCC unroll 4
      for (int x = 0; x < NV; ++x) b[x] = as_bh(_mm512_loadu_si512(row + 2 * x * W));
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const __m512bh a = as_bh(_mm512_set1_epi32(static_cast<int>(load_word(q2 + m * d2 + 2 * c2))));
#pragma GCC unroll 4
        for (int x = 0; x < NV; ++x) acc[m][x] = _mm512_dpbf16_ps(acc[m][x], a, b[x]);
      }
    }
    // S = scale·block (first block) or S + scale·block: the scale costs nothing.
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int x = 0; x < NV; ++x) {
        float* dst = s + m * bc_pad + x * W;
        _mm512_storeu_ps(dst, p0 > 0 ? _mm512_fmadd_ps(acc[m][x], scale, _mm512_loadu_ps(dst))
                                     : _mm512_mul_ps(acc[m][x], scale));
      }
  }
  if (pairs == 0) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int x = 0; x < NV; ++x) _mm512_storeu_ps(s + m * bc_pad + x * W, _mm512_setzero_ps());
  }
}

// Column panels outermost, as in `scores`: one panel of kt2 (d x NR bf16,
// 16 KiB at d = 128) stays in L1 while every row strip sweeps it.
static void scores_bf16(const std::uint16_t* q2, int rows, int d, const std::uint16_t* kt2, int bc_pad, float scale,
                        float* s) {
  const int d2 = d + (d & 1);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int c0 = 0; c0 < bc_pad; c0 += NR) {
    const std::uint16_t* kc = kt2 + 2 * c0;
    int r = 0;
    for (; r + MR <= rows; r += MR) scores_bf16_block<MR>(q2 + r * d2, d2, kc, bc_pad, vscale, s + r * bc_pad + c0);
    const std::uint16_t* qr = q2 + r * d2;
    float* sr = s + r * bc_pad + c0;
    switch (rows - r) {
      case 0: break;
      case 1: scores_bf16_block<1>(qr, d2, kc, bc_pad, vscale, sr); break;
      case 2: scores_bf16_block<2>(qr, d2, kc, bc_pad, vscale, sr); break;
      case 3: scores_bf16_block<3>(qr, d2, kc, bc_pad, vscale, sr); break;
      case 4: scores_bf16_block<4>(qr, d2, kc, bc_pad, vscale, sr); break;
      default: scores_bf16_block<5>(qr, d2, kc, bc_pad, vscale, sr); break;
    }
  }
}

// Most keys per tile, and so pairs of P per row, pv_bf16 rounds at a time.
inline constexpr int kMaxPairs = kTile.bc / 2;

// Rows [0, M) of rounded P pairs (kMaxPairs apart) against n2 pairs of V,
// columns [0, NVB*W) of v2 and acc.
template <int M, int NVB>
static inline void pv_bf16_block(const std::uint32_t* pp, int n2, const std::uint16_t* v2, int dv_pad, float* acc,
                                 const float* alpha) {
  __m512 a[M][NVB];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const __m512 sc = _mm512_set1_ps(alpha ? alpha[m] : 1.0f);
#pragma GCC unroll 4
    for (int x = 0; x < NVB; ++x) a[m][x] = _mm512_mul_ps(_mm512_loadu_ps(acc + m * dv_pad + x * W), sc);
  }
  for (int j2 = 0; j2 < n2; ++j2) {
    const std::uint16_t* row = v2 + 2 * static_cast<std::int64_t>(j2) * dv_pad;
    __m512bh b[NVB];
#pragma GCC unroll 4
    for (int x = 0; x < NVB; ++x) b[x] = as_bh(_mm512_loadu_si512(row + 2 * x * W));
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512bh pm = as_bh(_mm512_set1_epi32(static_cast<int>(pp[m * kMaxPairs + j2])));
#pragma GCC unroll 4
      for (int x = 0; x < NVB; ++x) a[m][x] = _mm512_dpbf16_ps(a[m][x], pm, b[x]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
    for (int x = 0; x < NVB; ++x) _mm512_storeu_ps(acc + m * dv_pad + x * W, a[m][x]);
}

template <int M>
static void pv_bf16_rows(const std::uint32_t* pp, int n2, const std::uint16_t* v2, int dv_pad, float* acc,
                         const float* alpha) {
  int c = 0;
  for (; c + NR <= dv_pad; c += NR) pv_bf16_block<M, NV>(pp, n2, v2 + 2 * c, dv_pad, acc + c, alpha);
  for (; c < dv_pad; c += W) pv_bf16_block<M, 1>(pp, n2, v2 + 2 * c, dv_pad, acc + c, alpha);
}

// Row strips outermost: a strip's P is rounded once into pairs (on the stack,
// MR x kMaxPairs words), then swept against every column panel of V.
static void pv_bf16(const float* p, int rows, int n, int p_stride, const std::uint16_t* v2, int dv_pad, float* acc,
                    const float* alpha) {
  alignas(64) std::uint32_t pp[MR * kMaxPairs];
  const int n2 = (n + 1) / 2;
  for (int r = 0; r < rows; r += MR) {
    const int m_rows = min_int(MR, rows - r);
    for (int m = 0; m < m_rows; ++m) {
      const float* pr = p + static_cast<std::int64_t>(r + m) * p_stride;
      // Masked loads: P past n is neither read nor rounded (an odd n's last
      // pair gets a 0 second half).
      for (int j = 0; j < n; j += 2 * W) {
        const __mmask32 mask = first_lanes32(n - j);
        const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), pr + j);
        const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), pr + j + W);
        _mm512_store_si512(pp + m * kMaxPairs + j / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
    }
    const float* ar = alpha ? alpha + r : nullptr;
    float* accr = acc + static_cast<std::int64_t>(r) * dv_pad;
    switch (m_rows) {
      case 1: pv_bf16_rows<1>(pp, n2, v2, dv_pad, accr, ar); break;
      case 2: pv_bf16_rows<2>(pp, n2, v2, dv_pad, accr, ar); break;
      case 3: pv_bf16_rows<3>(pp, n2, v2, dv_pad, accr, ar); break;
      case 4: pv_bf16_rows<4>(pp, n2, v2, dv_pad, accr, ar); break;
      case 5: pv_bf16_rows<5>(pp, n2, v2, dv_pad, accr, ar); break;
      default: pv_bf16_rows<MR>(pp, n2, v2, dv_pad, accr, ar); break;
    }
  }
}

}  // namespace sdpa::cpu::avx512bf16

namespace sdpa::cpu {

void attn_bf16_6x64_avx512bf16(KernelSet& ks) {
  avx512bf16::fill_kernel_set(ks);
  ks.pack_kt = avx512bf16::pack_kt;
  ks.dropout = avx512bf16::dropout_avx512;
  ks.pack_q_bf16 = avx512bf16::pack_q_bf16;
  ks.pack_kt_bf16 = avx512bf16::pack_kt_bf16;
  ks.scores_bf16 = avx512bf16::scores_bf16;
  ks.pack_v_bf16 = avx512bf16::pack_v_bf16;
  ks.pv_bf16 = avx512bf16::pv_bf16;
  ks.bf16_kpad = avx512bf16::kBf16KPad;
  ks.bf16_rpad = avx512bf16::kBf16RPad;
}

}  // namespace sdpa::cpu
