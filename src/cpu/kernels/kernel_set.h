// KernelSet: the microkernels of one ISA, as function pointers, plus the tile
// sizes the driver uses with them. See kernels.def for the list and for the
// contract between driver and kernels. Shapes below: rows <= BR, n <= BC.
#pragma once

#include <cstdint>

#include "sdpa/options.h"
#include "sdpa/tensor_view.h"

namespace sdpa::cpu {

struct KernelSet {
  Isa isa;
  const char* name;  // kernels.def's name, e.g. "attn_f32_6x16_avx2"
  // Sizes, all from kernels.def (see KernelTile in kernels.h).
  int w;   // float lanes per vector: V rows are padded to a multiple of it
  int nr;  // microkernel columns: a score tile's keys are padded to a multiple of it
  int br;  // query rows per block
  int bc;  // keys per tile

  // Key and value rows are passed as row pointers (k[j] is key j's d floats):
  // contiguous, strided and paged caches all look the same to a kernel, and
  // run the same arithmetic.

  // kt[c*bc_pad + j] = k[j][c] for j < n, c < d; columns n..bc_pad are 0.
  void (*pack_kt)(const float* const* k, int n, int d, float* kt, int bc_pad);

  // S [rows x bc_pad] = Qs [rows x d] · Kt [d x bc_pad].
  void (*scores)(const float* qs, int rows, int d, const float* kt, int bc_pad, float* s);

  // S [rows x n] (rows s_stride apart) = Qs [rows x d] · K[n x d]ᵀ, K read in
  // place: the kernel for blocks of few rows.
  void (*scores_direct)(const float* qs, int rows, int d, const float* const* k, int n, float* s, int s_stride);

  // Online-softmax step over a score tile whose invisible entries are -inf.
  // Per row r: m_new = max(m[r], max_j s[r,j]) (NaN is sticky), alpha[r] =
  // exp(m[r] - m_new), s[r,j] <- exp(s[r,j] - m_new), l[r] = l[r]*alpha[r] +
  // sum_j s[r,j], m[r] = m_new. A row with nothing visible yet keeps m = -inf,
  // gets s = 0, alpha = 0 (its accumulator is 0 anyway).
  void (*softmax_step)(float* s, int rows, int bc_pad, float* m, float* l, float* alpha);

  // acc [rows x dv_pad] = acc * alpha[row] + P [rows x n] · V [n x dv_pad].
  // P rows are `p_stride` apart; v[j] holds dv_pad readable floats. With row_begin and
  // row_end, row r only reads keys row_begin[r] <= j < row_end[r]: masked keys'
  // values are never touched, so a NaN there cannot reach the result.
  void (*pv)(const float* p, int rows, int n, int p_stride, const float* const* v, int dv_pad, float* acc,
             const float* alpha, const int* row_begin, const int* row_end);

  // s <- c·tanh(s / c) over [rows x bc_pad].
  void (*softcap)(float* s, int rows, int bc_pad, float c);

  // s[r,j] <- exp(s[r,j] - m[r]) * inv_l[r] over [rows x bc_pad] (the probabilities).
  void (*probs)(float* s, int rows, int bc_pad, const float* m, const float* inv_l);

  // The backward (src/cpu/backward.cpp).
  // acc [rows x dv_pad] += Pᵀ·V: P is stored [n x rows] (rows p_stride apart),
  // acc row m gains sum_{j<n} P[j*p_stride + m] * v[j][:dv_pad].
  void (*pvt)(const float* p, int rows, int n, int p_stride, const float* const* v, int dv_pad, float* acc);
  // Over [rows x bc_pad]: dp <- dS = p·(z·dp - d[r]) (· (1 - (tc·inv_cap)²)
  // with tc, the softcapped scores), 0 where p is 0; then p <- p·z. z (the
  // dropout factors, [rows x bc_pad]) and tc may be nullptr.
  void (*grad_scores)(float* p, float* dp, int rows, int bc_pad, const float* d, const float* z, const float* tc,
                      float inv_cap);

  // Dropout factors of keys t0 .. t0 + n - 1 for query i of slice bh (the
  // rule of src/philox.h: key[2], counter (j/4, i, bh, offset), kept iff the
  // word >= thr): row[j] = kept ? scale : 0, or row[j] *= that with multiply.
  void (*dropout)(const std::uint32_t* key, std::uint32_t i, std::uint32_t bh, std::uint32_t offset,
                  std::uint32_t thr, std::int64_t t0, int n, float scale, float* row, int multiply);

  // y[i] = 2^x[i] for x[i] <= 0, the kernels' own exp (exposed for tests).
  void (*exp2)(const float* x, float* y, std::int64_t n);

  // Storage (kernels/convert.inl). dst[0..n) = the n float16 or bfloat16
  // values at src (dt), exactly.
  void (*to_f32)(const void* src, DType dt, int n, float* dst);
  // dst[c] = src[c] * scale[c / group], c < n (n % group == 0), the scales
  // float32 or float16 (sdt), the product rounded to float32.
  void (*dequant_i8)(const std::int8_t* src, const void* scales, DType sdt, int group, int n, float* dst);
};

}  // namespace sdpa::cpu
