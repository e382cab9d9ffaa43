// KernelSet: the microkernels of one ISA, as function pointers, plus the tile
// sizes the driver uses with them. See kernels.def for the list and for the
// contract between driver and kernels. Shapes below: rows <= BR, n <= BC.
#pragma once

#include <cstdint>

#include "sdpa/options.h"
#include "sdpa/tensor_view.h"

namespace sdpa::cpu {

// Rows of K or V as stored (float16, bfloat16, or int8 with group scales),
// read by the decode kernels, which convert in registers. For int8, group is a
// multiple of the set's W. Each kernel prefetches, for every row it reads,
// the row `prefetch` bytes further on (0: none): a row some keys later in the
// same stream (and its scales, at the same distance in scale bytes).
struct StoredRows {
  const void* const* rows;    // rows[j]: key j's values
  DType dtype;                // f16, bf16 or i8
  const void* const* scales;  // int8: scales[j], key j's scales (dtype sdt); else nullptr
  DType sdt;
  int group;
  std::int64_t prefetch;
  int lead;                   // keys ahead to request through rows[] as the loop reaches them (0: none)
  int row_bytes;              // bytes of one row's values (and, int8, of its scales: scale_bytes)
  int scale_bytes;
  // The all-heads kernels (scores_heads_st, pv_heads_st): rows to request as
  // key j is read, ahead[j] (ahead_bytes of each head's row, and its scales at
  // ahead_scales[j]); nullptr (the array or an entry) requests nothing.
  const void* const* ahead;
  const void* const* ahead_scales;
  int ahead_bytes;
};

// Every K/V head of a decode item at once (the driver's Plan::all_heads, a
// paged cache): head h's key (value) rows are the given rows plus
// h*row_bytes bytes, its scales plus h*scale_bytes; its Q rows, S, acc and
// alpha are the given ones plus h times q, s, acc and alpha floats.
struct HeadSteps {
  int heads;
  std::int64_t row_bytes, scale_bytes;
  std::int64_t q, s, acc, alpha;
};

struct KernelSet {
  Isa isa;
  const char* name;  // kernels.def's name, e.g. "attn_f32_6x16_avx2"
  // Sizes, all from kernels.def (see KernelTile in kernels.h).
  int w;   // float lanes per vector: V rows are padded to a multiple of it
  int mr;  // microkernel rows: pv() and scores() take a block's rows in strips of mr
  int nr;  // microkernel columns: a score tile's keys are padded to a multiple of it
  int br;  // query rows per block
  int bc;  // keys per tile

  // Key and value rows are passed as row pointers (k[j] is key j's d floats):
  // contiguous, strided and paged caches all look the same to a kernel, and
  // run the same arithmetic.

  // kt[c*bc_pad + j] = k[j][c] for j < n, c < d; columns n..bc_pad are 0.
  void (*pack_kt)(const float* const* k, int n, int d, float* kt, int bc_pad);

  // out[c] = float(double(x[c]) * inv) for c < n: a row's float32 output
  // from its accumulator, the same bits as that scalar expression; returns
  // whether x[0, n) holds only finite values (checked in the same pass).
  bool (*scale_row)(const float* x, std::int64_t n, double inv, float* out);
  // out[c] = x[c] * scale for c < n: the same bits as that float32 product.
  void (*scale_copy)(const float* x, std::int64_t n, float scale, float* out);
  // Σ a[c]·b[c] over c < n in double: 8 partial sums (c mod 8), each in order
  // of c, added in order of their index; the products are exact, so every
  // kernel set gives the same bits.
  double (*dot_f64)(const float* a, const float* b, std::int64_t n);
  // Whether x[0, n) holds only finite values.
  bool (*all_finite)(const float* x, std::int64_t n);

  // S [rows x bc_pad] = Qs [rows x d] · Kt [d x bc_pad].
  void (*scores)(const float* qs, int rows, int d, const float* kt, int bc_pad, float* s);
  // scores() on a tile whose rows see keys [row_begin[r], row_end[r]): each
  // strip of mr rows computes the columns, in whole vectors, holding a key one
  // of its rows sees, with the same bits as scores(); other entries are left
  // as they were (the caller masks them).
  void (*scores_ranged)(const float* qs, int rows, int d, const float* kt, int bc_pad, float* s, const int* row_begin,
                        const int* row_end);

  // S [rows x n] (rows s_stride apart) = Qs [rows x d] · K[n x d]ᵀ, K read in
  // place: the kernel for blocks of few rows. Blocks of several rows request
  // the K rows about ahead_bytes on (through k[], so any layout) as the loop
  // reaches them; 0 requests nothing. One row has its own distance.
  void (*scores_direct)(const float* qs, int rows, int d, const float* const* k, int n, float* s, int s_stride,
                        int ahead_bytes);

  // Online-softmax step over a score tile whose invisible entries are -inf.
  // Per row r: m_new = max(m[r], max_j s[r,j]) (NaN is sticky), alpha[r] =
  // exp(m[r] - m_new), s[r,j] <- exp(s[r,j] - m_new), l[r] = l[r]*alpha[r] +
  // sum_j s[r,j], m[r] = m_new. A row with nothing visible yet keeps m = -inf,
  // gets s = 0, alpha = 0 (its accumulator is 0 anyway). With col_begin and
  // col_end (multiples of the vector width), row r reads and writes only
  // columns [col_begin[r], col_end[r]): those outside hold -inf, or are never
  // read after, and are left as they are; the results are the same bits as
  // over the whole row.
  void (*softmax_step)(float* s, int rows, int bc_pad, float* m, float* l, float* alpha, const int* col_begin,
                       const int* col_end);

  // acc [rows x dv_pad] = acc * alpha[row] + P [rows x n] · V [n x dv_pad].
  // P rows are `p_stride` apart; v[j] holds dv_pad readable floats. With row_begin and
  // row_end, row r only reads keys row_begin[r] <= j < row_end[r]: masked keys'
  // values are never touched, so a NaN there cannot reach the result.
  // Strips of several rows request the V rows about ahead_bytes on as they
  // reach them (0: nothing; decode blocks, whose V streams from memory);
  // one-row strips always request theirs a short distance ahead.
  void (*pv)(const float* p, int rows, int n, int p_stride, const float* const* v, int dv_pad, float* acc,
             const float* alpha, const int* row_begin, const int* row_end, int ahead_bytes);

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
  // Decode (blocks of at most 16 rows): the scores_direct and pv contracts
  // with K or V as stored. S [rows x n] = Qs·Kᵀ; acc [rows x dv] (rows
  // acc_stride apart) = acc·alpha[r] + P·V over every key j < n (no per-row
  // key ranges: the driver uses the float32 kernels on such tiles).
  void (*scores_direct_st)(const float* qs, int rows, int d, const StoredRows& k, int n, float* s, int s_stride);
  void (*pv_direct_st)(const float* p, int rows, int n, int p_stride, const StoredRows& v, int dv, float* acc,
                       int acc_stride, const float* alpha);
  // The same for every head of `hs` (and in float32 too), keys taken a few
  // at a time and, for each few, head after head: where a key's rows for all
  // heads lie side by side, each key's memory is read as one stream rather
  // than a piece of it per pass over the keys. Each head gets the bits
  // scores_direct_st (pv_direct_st) gives it alone, and in float32 those of
  // scores_direct (of pv, on V rows of whole vectors); alpha is applied
  // once, as there. Every head's part of the rows k.ahead[j] is requested as
  // key j is read.
  void (*scores_heads_st)(const float* qs, int rows, int d, const StoredRows& k, int n, float* s, int s_stride,
                          const HeadSteps& hs);
  void (*pv_heads_st)(const float* p, int rows, int n, int p_stride, const StoredRows& v, int dv, float* acc,
                      int acc_stride, const float* alpha, const HeadSteps& hs);

  // ---- bfloat16 storage: dot products of bf16 pairs (AVX512-BF16, AMX) -----
  // Set by kernel sets whose CPU has a bf16 dot product, nullptr in every
  // other. Values are bf16 bit patterns (std::uint16_t); pairs of them along
  // the reduction axis sit in one 32-bit word, low half first, which is what
  // the pair instructions (and AMX tiles) consume. A product of two bf16 is exact in float32
  // and sums are float32, so scores_bf16 errs as a float32 dot product of the
  // same values. The instructions treat subnormal inputs and results as 0
  // (the kernels run with FTZ/DAZ anyway). Kernels read only the d (dv)
  // values of each row they are given; pads they write are 0.
  //   d2 = d rounded up to bf16_kpad (even); n <= bc <= bc_pad, bc_pad a
  //   multiple of nr; dv_pad a multiple of w, >= dv; rows_pad = rows rounded
  //   up to bf16_rpad. Pads are 1 row and 2 values for the pair instructions.

  // q2 [rows_pad x d2]: q2[r*d2 + c] = q[r][c] for r < rows, c < d (bits
  // copied), 0 elsewhere.
  void (*pack_q_bf16)(const std::uint16_t* const* q, int rows, int d, std::uint16_t* q2);

  // The key tile in pairs along d: word (c2, j), at kt2 + 2*(c2*bc_pad + j),
  // holds (k[j][2*c2], k[j][2*c2 + 1]) for c2 < d2/2, j < n; the second half
  // is 0 past d, and columns n..bc_pad are 0.
  void (*pack_kt_bf16)(const std::uint16_t* const* k, int n, int d, std::uint16_t* kt2, int bc_pad);

  // S [rows_pad x bc_pad] = scale · (Q · Kᵀ), from pack_q_bf16's q2 and
  // pack_kt_bf16's kt2 (padding contributes 0; pad rows of S are 0). The sums
  // are float32 (blocked as in `scores`, or in AMX tiles).
  void (*scores_bf16)(const std::uint16_t* q2, int rows, int d, const std::uint16_t* kt2, int bc_pad, float scale,
                      float* s);

  // The value tile in pairs along the keys: word (j2, c), at v2 + 2*(j2*dv_pad
  // + c), holds (v[2*j2][c], v[2*j2 + 1][c]) for j2 < n_pad/2 (n_pad = n
  // rounded up to bf16_kpad), c < dv; halves past n are 0, and columns
  // dv..dv_pad are 0.
  void (*pack_v_bf16)(const std::uint16_t* const* v, int n, int dv, std::uint16_t* v2, int dv_pad);

  // acc [rows x dv_pad] = acc * alpha[r] + bf16(P) [rows x n] · V, V from
  // pack_v_bf16's v2 (same n and dv_pad). P (float32, rows p_stride apart, n
  // read per row) is rounded to bf16 to nearest even, as vcvtne2ps2bf16 does;
  // products and sums are float32. alpha may be nullptr (1). No per-row key
  // ranges, unlike pv: every row reads all n keys, so a NaN or inf in any of
  // the tile's V rows reaches every row even where its P entry is 0. Only
  // acc's `rows` rows are read and written.
  void (*pv_bf16)(const float* p, int rows, int n, int p_stride, const std::uint16_t* v2, int dv_pad, float* acc,
                  const float* alpha);

  // How the driver uses the bf16 members. bf16_kpad: d2 is d rounded up to a
  // multiple of it (2 for pair instructions, 32 for AMX tiles), and v2 holds
  // n rounded up to it keys; bf16_rpad: q2 and S hold rows rounded up to it
  // (pack_q_bf16 zero-fills the extra rows). bf16_fast: the bf16 products run
  // faster than the float32 kernels on this CPU, so the driver uses them for
  // bfloat16 Q·Kᵀ (exact products: the default precision policy holds) and,
  // with Options::round_p, for P·V; otherwise only the float32 kernels run.
  int bf16_kpad = 2;
  int bf16_rpad = 1;
  bool bf16_fast = false;

  // ---- float32 on bf16 tiles: three parts per value (AMX) -------------------
  // Set where bf16 products run so much faster than float32 FMAs that three
  // bf16 parts per value still win (AMX), nullptr in every other set. A
  // float32 x is x0 + x1 + x2, each part a bf16 to nearest even of what the
  // parts before it leave, exactly so for |x| above about 2^-110 (bf16's
  // normal range); a product takes the six part products q_i·k_j with
  // i + j <= 2 (what is left out is below 2^-23 of it), the five small ones
  // summed first, then q0·k0: so a sum errs as a float32 dot product of the
  // same values, plus under two float32 roundings of each product. Inf or NaN
  // in an operand makes NaN parts, which reach the sums. Shapes and padding
  // are the bf16 members' (bf16_kpad, bf16_rpad); each array holds three of
  // their layouts, one per part.

  // q3: pack_q_bf16's [rows_pad x d2] layout of Qs = scale * Q, Q's float32
  // rows q[0, rows) of d values, each product rounded to float32 (so Qs
  // holds scale_copy's values), part p at q3 + p*rows_pad*d2.
  void (*pack_q_x3)(const float* const* q, int rows, int d, float scale, std::uint16_t* q3) = nullptr;
  // kt3: pack_kt_bf16's layout of float32 key rows, part p at kt3 + p*d2*bc_pad.
  void (*pack_kt_x3)(const float* const* k, int n, int d, std::uint16_t* kt3, int bc_pad) = nullptr;
  // S [rows_pad x bc_pad] = Qs·Kᵀ (no scale: Qs has it), pad rows 0. With
  // row_begin and row_end (else nullptr), row r sees keys [row_begin[r],
  // row_end[r]): each strip of bf16_rpad*2 rows computes only the tiles of
  // columns holding a key one of its rows sees, with the same bits; other
  // entries are left as they were (the caller masks them).
  void (*scores_x3)(const std::uint16_t* q3, int rows, int d, const std::uint16_t* kt3, int bc_pad, float* s,
                    const int* row_begin, const int* row_end) = nullptr;
  // v3: pack_v_bf16's layout of float32 value rows, part p at v3 +
  // p*n_pad*dv_pad (n_pad: n rounded up to bf16_kpad).
  void (*pack_v_x3)(const float* const* v, int n, int dv, std::uint16_t* v3, int dv_pad) = nullptr;
  // acc [rows x dv_pad] = acc * alpha[r] + P·V, P float32 (rows p_stride
  // apart, n read per row) split into parts here, V from pack_v_x3. alpha may
  // be nullptr (1). n <= 4*bc (the driver's widest float32 tile). Without
  // col_begin and col_end (nullptr), every row reads all n keys, as pv_bf16
  // does; with them, row r reads P only in [col_begin[r], col_end[r]) and
  // takes it as 0 elsewhere (softmax_step's columns), and V is read only in
  // the chunks of keys some row of a strip reads. Only acc's `rows` rows are
  // read and written. work: x3_pv_work 16-bit values of scratch (P's parts),
  // fastest 64-byte aligned, so that the kernel's stack stays small.
  void (*pv_x3)(const float* p, int rows, int n, int p_stride, const std::uint16_t* v3, int dv_pad, float* acc,
                const float* alpha, const int* col_begin, const int* col_end, std::uint16_t* work) = nullptr;
  int x3_pv_work = 0;
};

}  // namespace sdpa::cpu
