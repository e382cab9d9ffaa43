// The microkernels, written once over the vector wrapper and stamped per ISA:
// an ISA's translation unit opens namespace sdpa::cpu::<isa>, includes its
// vec_<isa>.h (Vec, W, v* functions), defines MR and NV from its kernels.def
// row and includes this file. Nothing here may name a std:: template: each ISA's copy must stay in
// its own namespace, compiled with its own flags.
//
// Register blocking (S and PV alike): an MR x NR block of accumulators, NR =
// NV*W columns, so each step loads NV vectors of one operand, broadcasts MR
// scalars of the other and issues NV*MR independent FMAs. With AVX2 (16 ymm),
// MR = 6, NV = 2: 12 accumulators + 2 operands + 1 broadcast = 15 registers,
// and 12 independent chains cover the FMA latency (4 cycles x 2 ports = 8 in
// flight needed); each step costs 8 loads for 12 FMAs. With AVX-512 (32 zmm),
// NV = 4: 24 accumulators + 4 + 1 = 29 registers, 10 loads for 24 FMAs, which
// keeps the two 512-bit load ports from limiting the FMAs.

inline constexpr int NR = NV * W;
// scores() and pv() run full MR-row strips, then switch on the 0..MR-1 rows
// left over with cases up to 5.
static_assert(MR >= 1 && MR <= 6, "the remainder switches in scores() and pv() cover MR <= 6");

static inline int min_int(int a, int b) { return a < b ? a : b; }

// A compile-time int for the row-count switches (no std:: template here).
template <int N>
struct IntConst {
  static constexpr int value = N;
};

// ---- S = Qs · Kt -------------------------------------------------------------

// Length of the FMA chains the score dot products are cut into (see
// scores_block). Each chunk ends in a load, add and store of the block's S;
// at 32 rather than 16, half as many: the hot tile kernels (Zen 4, d = 128)
// ran 1.04x (AVX-512) and 1.02-1.10x (AVX2) faster, prefill 1.01-1.02x at 1
// thread. The sums' bound grows from (16 + d/16)·u to (32 + d/32)·u: 36·u
// at d = 128, against 128·u for a plain float32 dot product.
inline constexpr int kDotChunk = 32;

// NC column vectors (NV, or fewer at a ranged tile's edge: each vector's
// sums are the same either way).
template <int M, int NC = NV>
static inline void scores_block(const float* qs, int d, const float* kt, int bc_pad, float* s) {
  Vec acc[M][NC];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NC; ++x) acc[m][x] = vzero();
  // Blocked summation: d is cut into chunks of kDotChunk, each summed from
  // zero in registers and then added to S. One FMA chain over all of d
  // accumulates rounding error ~d·u (what a plain float32 GEMM does); chunks
  // bring it to ~(kDotChunk + d/kDotChunk)·u for one load, add and store per
  // accumulator per chunk (1/kDotChunk of the FMAs).
  for (int c0 = 0; c0 < d; c0 += kDotChunk) {
    const int c1 = min_int(d, c0 + kDotChunk);
    if (c0 > 0) {
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
        for (int x = 0; x < NC; ++x) acc[m][x] = vzero();
    }
    for (int c = c0; c < c1; ++c) {
      Vec b[NC];
#pragma GCC unroll 8
      for (int x = 0; x < NC; ++x) b[x] = vload(kt + static_cast<std::int64_t>(c) * bc_pad + x * W);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const Vec a = vset(qs[m * d + c]);
#pragma GCC unroll 8
        for (int x = 0; x < NC; ++x) acc[m][x] = vfma(a, b[x], acc[m][x]);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
      for (int x = 0; x < NC; ++x) {
        float* dst = s + m * bc_pad + x * W;
        vstore(dst, c0 > 0 ? vadd(vload(dst), acc[m][x]) : acc[m][x]);
      }
  }
  if (d == 0) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
      for (int x = 0; x < NC; ++x) vstore(s + m * bc_pad + x * W, acc[m][x]);
  }
}

// Column panels outermost: one panel of Kt (d x NR floats, 32 KiB at d = 128
// with AVX-512) stays in L1 while every row strip sweeps it.
static void scores(const float* qs, int rows, int d, const float* kt, int bc_pad, float* s) {
  for (int c0 = 0; c0 < bc_pad; c0 += NR) {
    int r = 0;
    for (; r + MR <= rows; r += MR) scores_block<MR>(qs + r * d, d, kt + c0, bc_pad, s + r * bc_pad + c0);
    const float* qr = qs + r * d;
    float* sr = s + r * bc_pad + c0;
    switch (rows - r) {
      case 0: break;
      case 1: scores_block<1>(qr, d, kt + c0, bc_pad, sr); break;
      case 2: scores_block<2>(qr, d, kt + c0, bc_pad, sr); break;
      case 3: scores_block<3>(qr, d, kt + c0, bc_pad, sr); break;
      case 4: scores_block<4>(qr, d, kt + c0, bc_pad, sr); break;
      default: scores_block<5>(qr, d, kt + c0, bc_pad, sr); break;
    }
  }
}

// Columns [c0, c0 + nc*W) of an M-row strip, nc <= NV.
template <int M>
static inline void scores_cols(int nc, const float* qs, int d, const float* kt, int bc_pad, float* s) {
  if (nc >= NV) {
    scores_block<M>(qs, d, kt, bc_pad, s);
    return;
  }
  switch (nc) {
    case 1: scores_block<M, 1>(qs, d, kt, bc_pad, s); break;
    case 2:
      if constexpr (NV > 2) scores_block<M, 2>(qs, d, kt, bc_pad, s);
      break;
    default:
      if constexpr (NV > 3) scores_block<M, 3>(qs, d, kt, bc_pad, s);
      break;
  }
}

// scores() where rows see different keys (a causal diagonal, a window's
// edge): each MR-row strip computes only the column vectors that hold a key
// one of its rows sees, [row_begin, row_end) per row. The other entries of s
// are left as they were: the caller sets them to -inf. Computed entries are
// the same bits as scores() gives.
static void scores_ranged(const float* qs, int rows, int d, const float* kt, int bc_pad, float* s,
                          const int* row_begin, const int* row_end) {
  for (int c0 = 0; c0 < bc_pad; c0 += NR) {
    for (int r = 0; r < rows; r += MR) {
      const int m = min_int(MR, rows - r);
      int b = bc_pad, e = 0;
      for (int i = r; i < r + m; ++i)
        if (row_begin[i] < row_end[i]) {
          b = min_int(b, row_begin[i]);
          e = row_end[i] > e ? row_end[i] : e;
        }
      int v0 = b / W * W, v1 = min_int((e + W - 1) / W * W, c0 + NR);
      if (v0 < c0) v0 = c0;
      if (v0 >= v1) continue;
      const int nc = (v1 - v0) / W;
      const float* qr = qs + r * d;
      const float* kc = kt + v0;
      float* sr = s + r * bc_pad + v0;
      if (m == MR) {
        scores_cols<MR>(nc, qr, d, kc, bc_pad, sr);
        continue;
      }
      switch (m) {
        case 1: scores_cols<1>(nc, qr, d, kc, bc_pad, sr); break;
        case 2: scores_cols<2>(nc, qr, d, kc, bc_pad, sr); break;
        case 3: scores_cols<3>(nc, qr, d, kc, bc_pad, sr); break;
        case 4: scores_cols<4>(nc, qr, d, kc, bc_pad, sr); break;
        default: scores_cols<5>(nc, qr, d, kc, bc_pad, sr); break;
      }
    }
  }
}

// ---- K tile packing (transpose) ----------------------------------------------

static void pack_kt_generic(const float* const* k, int n, int d, float* kt, int bc_pad) {
  for (int j = 0; j < n; ++j) {
    const float* src = k[j];
    for (int c = 0; c < d; ++c) kt[static_cast<std::int64_t>(c) * bc_pad + j] = src[c];
  }
  for (int c = 0; c < d; ++c)
    for (int j = n; j < bc_pad; ++j) kt[static_cast<std::int64_t>(c) * bc_pad + j] = 0.0f;
}

// ---- online softmax ------------------------------------------------------------

inline constexpr float kLog2e = 1.44269504088896340736f;
inline constexpr float kLog2eLo = 1.9259629911266175e-08f;  // log2(e) - kLog2e

// e^x = 2^(x·log2 e) for x = s - m <= 0. The product x·log2(e) is carried as
// hi + lo (its rounding error by FMA, plus x times log2(e)'s own rounding),
// and lo enters the exp's reduced argument: rounding x·log2(e) to one float
// would perturb the weight by |x|·2^-24 relative, which at |s - m| ~ 100 is
// larger than the error of the scores themselves.
static inline Vec vexp_diff(Vec x) {
  Vec err;
  const Vec hi = vtwoprod(x, kLog2e, &err);
  return vexp2(hi, vfma(x, vset(kLog2eLo), err));
}

static inline float exp2_scalar(float t) {
  float buf[W];
  vstore(buf, vexp2(vset(t)));
  return buf[0];
}

// Rows are taken kSoftmaxRows at a time, each pass over all of them before
// the next: the row maxima, then exp and the row sums, then alpha and l for
// the group in whole vectors. Each row's work is a short dependent chain
// (a reduction, a scalar exp); one pass over many rows keeps the chains of
// different rows in flight together.
inline constexpr int kSoftmaxRows = 16;

static void softmax_step(float* s, int rows, int bc_pad, float* m, float* l, float* alpha, const int* col_begin,
                         const int* col_end) {
  const float kNegInf = -__builtin_inff();
  for (int r0 = 0; r0 < rows; r0 += kSoftmaxRows) {
    const int g = min_int(kSoftmaxRows, rows - r0);
    float mu[kSoftmaxRows], m_new[kSoftmaxRows], sums[kSoftmaxRows], arg[kSoftmaxRows + W];
    int cb[kSoftmaxRows], ce[kSoftmaxRows];
    for (int r = 0; r < g; ++r) {
      cb[r] = col_begin ? col_begin[r0 + r] : 0;
      ce[r] = col_end ? col_end[r0 + r] : bc_pad;
    }
    for (int r = 0; r < g; ++r) {
      const float* row = s + static_cast<std::int64_t>(r0 + r) * bc_pad;
      Vec mx = vset(kNegInf);
      for (int j = cb[r]; j < ce[r]; j += W) mx = vmax(mx, vload(row + j));
      const float m_old = m[r0 + r];
      const float m_tile = hmax(mx);
      float mn = m_old != m_old ? m_old : (m_tile > m_old ? m_tile : m_old);
      if (mn == kNegInf) {
        // Nothing finite seen: either the row is still empty or the max skipped a
        // NaN. A NaN must reach the output, so make it the row's max.
        for (int j = cb[r]; j < ce[r]; ++j)
          if (row[j] != row[j]) mn = row[j];
      }
      m_new[r] = mn;
      // Rows still empty use 0 as the offset: every entry is -inf and exp gives 0.
      mu[r] = mn == kNegInf ? 0.0f : mn;
    }
    for (int r = 0; r < g; ++r) {
      float* row = s + static_cast<std::int64_t>(r0 + r) * bc_pad;
      const Vec vmu = vset(mu[r]);
      Vec sum = vzero();
      // Columns outside [cb, ce) would add exp(-inf) = +0 to each lane: the
      // sums are the same without them.
      for (int j = cb[r]; j < ce[r]; j += W) {
        // exp(s - m): s - m <= 0 cannot overflow, unlike s*log2(e) near FLT_MAX.
        const Vec p = vexp_diff(vsub(vload(row + j), vmu));
        vstore(row + j, p);
        sum = vadd(sum, p);
      }
      sums[r] = hsum(sum);
    }
    for (int r = 0; r < g; ++r) arg[r] = m[r0 + r] - mu[r];
    for (int r = g; r < kSoftmaxRows + W; ++r) arg[r] = 0.0f;
    for (int r = 0; r < g; r += W) vstore(arg + r, vexp_diff(vload(arg + r)));
    for (int r = 0; r < g; ++r) {
      alpha[r0 + r] = arg[r];
      l[r0 + r] = l[r0 + r] * arg[r] + sums[r];
      m[r0 + r] = m_new[r];
    }
  }
}

static void probs(float* s, int rows, int bc_pad, const float* m, const float* inv_l) {
  for (int r = 0; r < rows; ++r) {
    float* row = s + static_cast<std::int64_t>(r) * bc_pad;
    const Vec vmu = vset(m[r]), vinv = vset(inv_l[r]);
    for (int j = 0; j < bc_pad; j += W) vstore(row + j, vmul(vexp_diff(vsub(vload(row + j), vmu)), vinv));
  }
}

static void exp2_array(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + W <= n; i += W) vstore(y + i, vexp2(vload(x + i)));
  for (; i < n; ++i) y[i] = exp2_scalar(x[i]);
}

// ---- acc = acc * alpha + P · V -------------------------------------------------

// How far ahead of their reads the one-row float32 kernels (scores_row_f32,
// pv_block<1, NV>) request rows: a short distance, so that the requests stay
// just ahead of the loads and cross 4 KiB pages (where the hardware
// prefetchers stop) before them. H = Hkv = 32, Nkv = 16384, d = 64 and 128,
// Zen 5: 2 KiB of K and 1 KiB of V measured 5-15% faster than no request at
// 2 threads and 12-20% at 1 thread; 4-8 KiB ahead, less so.
constexpr int kRowAheadK = 2048;
constexpr int kRowAheadV = 1024;

// Keys ahead a strip of M rows requests V rows (ahead_bytes of a pv call):
// one row always kRowAheadV bytes (at least one key), several rows
// ahead_bytes (none when 0).
template <int M>
static inline int pv_lead(int ahead_bytes, int dv_pad) {
  const int bytes = M == 1 ? kRowAheadV : ahead_bytes;
  if (bytes <= 0) return 0;
  const int keys = bytes / (dv_pad * 4);
  return keys > 1 ? keys : 1;
}

// Rows [0, M) of P against keys [j0, j1), columns [0, NV*W) of V and acc.
// The V rows `lead` keys on are requested as the loop reaches them (none
// when 0; decode, V in DRAM).
template <int M, int NV>
static inline void pv_block(const float* p, int p_stride, const float* const* v, int c0, int j0, int j1, float* acc,
                            int acc_stride, const float* alpha, int lead) {
  Vec a[M][NV];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const Vec sc = vset(alpha ? alpha[m] : 1.0f);
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) a[m][x] = vmul(vload(acc + m * acc_stride + x * W), sc);
  }
  for (int j = j0; j < j1; ++j) {
    Vec b[NV];
    if (lead > 0 && j + lead < j1)
#pragma GCC unroll 16
      for (int o = 0; o < NV * W * 4; o += 64) __builtin_prefetch(reinterpret_cast<const char*>(v[j + lead] + c0) + o, 0, 3);
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) b[x] = vload(v[j] + c0 + x * W);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const Vec pm = vset(p[m * p_stride + j]);
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) a[m][x] = vfma(pm, b[x], a[m][x]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) vstore(acc + m * acc_stride + x * W, a[m][x]);
}

// All column strips of a strip of M rows.
// Columns [c0, c1) of a strip of M rows.
template <int M>
static void pv_strip(const float* p, int p_stride, const float* const* v, int j0, int j1, int dv_pad, float* acc,
                     const float* alpha, int c0, int c1, int ahead_bytes) {
  const int lead = pv_lead<M>(ahead_bytes, dv_pad);
  int c = c0;
  // One row: 8 accumulators where the set's strips are narrower (AVX2), so
  // that a tile's V is swept half as many times.
  constexpr int kRowVecs = W > 1 && 2 * NV < 8 ? 8 : 2 * NV;
  if (M == 1)
    for (; c + kRowVecs * W <= c1; c += kRowVecs * W) pv_block<M, kRowVecs>(p, p_stride, v, c, j0, j1, acc + c, dv_pad, alpha, lead);
  if (M == 1)
    for (; c + 2 * NV * W <= c1; c += 2 * NV * W) pv_block<M, 2 * NV>(p, p_stride, v, c, j0, j1, acc + c, dv_pad, alpha, lead);
  for (; c + NV * W <= c1; c += NV * W) pv_block<M, NV>(p, p_stride, v, c, j0, j1, acc + c, dv_pad, alpha, lead);
  for (; c < c1; c += W) pv_block<M, 1>(p, p_stride, v, c, j0, j1, acc + c, dv_pad, alpha, lead);
}

template <int M>
static void pv_rows(const float* p, int p_stride, const float* const* v, int n, int dv_pad, float* acc,
                    const float* alpha, const int* row_begin, const int* row_end, int c0, int c1, int ahead_bytes) {
  if (!row_end) {
    pv_strip<M>(p, p_stride, v, 0, n, dv_pad, acc, alpha, c0, c1, ahead_bytes);
    return;
  }
  // Masked tile: all M rows share the keys [lo, hi) every one of them sees;
  // then each row alone takes the rest of its own range, so no row reads a key
  // it may not see.
  int lo = 0, hi = n;
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    lo = row_begin[m] > lo ? row_begin[m] : lo;
    hi = min_int(hi, row_end[m]);
  }
  if (hi < lo) hi = lo;
  pv_strip<M>(p, p_stride, v, lo, hi, dv_pad, acc, alpha, c0, c1, ahead_bytes);  // also applies alpha to every row
  for (int m = 0; m < M; ++m) {
    const float* pm = p + m * p_stride;
    float* am = acc + m * dv_pad;
    const int b = row_begin[m], e = row_end[m];
    if (b < lo) pv_strip<1>(pm, p_stride, v, b, min_int(lo, e), dv_pad, am, nullptr, c0, c1, ahead_bytes);
    if (e > hi) pv_strip<1>(pm, p_stride, v, hi > b ? hi : b, e, dv_pad, am, nullptr, c0, c1, ahead_bytes);
  }
}

// Row strips outermost: a strip's P rows stay in L1 across V's column panels.
static void pv(const float* p, int rows, int n, int p_stride, const float* const* v, int dv_pad, float* acc,
               const float* alpha, const int* row_begin, const int* row_end, int ahead_bytes) {
  auto b_at = [&](int r0) { return row_end ? row_begin + r0 : nullptr; };
  auto e_at = [&](int r0) { return row_end ? row_end + r0 : nullptr; };
  int r = 0;
  for (; r + MR <= rows; r += MR)
    pv_rows<MR>(p + r * p_stride, p_stride, v, n, dv_pad, acc + r * dv_pad, alpha + r, b_at(r), e_at(r), 0, dv_pad, ahead_bytes);
  const float* pr = p + r * p_stride;
  float* ar = acc + r * dv_pad;
  switch (rows - r) {
    case 0: break;
    case 1: pv_rows<1>(pr, p_stride, v, n, dv_pad, ar, alpha + r, b_at(r), e_at(r), 0, dv_pad, ahead_bytes); break;
    case 2: pv_rows<2>(pr, p_stride, v, n, dv_pad, ar, alpha + r, b_at(r), e_at(r), 0, dv_pad, ahead_bytes); break;
    case 3: pv_rows<3>(pr, p_stride, v, n, dv_pad, ar, alpha + r, b_at(r), e_at(r), 0, dv_pad, ahead_bytes); break;
    case 4: pv_rows<4>(pr, p_stride, v, n, dv_pad, ar, alpha + r, b_at(r), e_at(r), 0, dv_pad, ahead_bytes); break;
    default: pv_rows<5>(pr, p_stride, v, n, dv_pad, ar, alpha + r, b_at(r), e_at(r), 0, dv_pad, ahead_bytes); break;
  }
}

// ---- The backward: acc += Pᵀ · V, and dS -----------------------------------------

// acc [M x NV_*W] (rows acc_stride apart) += Pᵀ·V over j < n, where P is
// stored [n x p_stride]: row m of the product reads P[j*p_stride + m], M
// consecutive floats per step (no transposed copy of P is made).
template <int M, int NV_>
static inline void pvt_block(const float* p, int p_stride, const float* const* v, int c0, int n, float* acc,
                             int acc_stride) {
  Vec a[M][NV_];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV_; ++x) a[m][x] = vload(acc + m * acc_stride + x * W);
  for (int j = 0; j < n; ++j) {
    Vec b[NV_];
#pragma GCC unroll 8
    for (int x = 0; x < NV_; ++x) b[x] = vload(v[j] + c0 + x * W);
    const float* pj = p + static_cast<std::int64_t>(j) * p_stride;
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const Vec pm = vset(pj[m]);
#pragma GCC unroll 8
      for (int x = 0; x < NV_; ++x) a[m][x] = vfma(pm, b[x], a[m][x]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV_; ++x) vstore(acc + m * acc_stride + x * W, a[m][x]);
}

// Column panels of V outermost, as in scores().
static void pvt(const float* p, int rows, int n, int p_stride, const float* const* v, int dv_pad, float* acc) {
  for (int c0 = 0; c0 < dv_pad; c0 += NR) {
    const int c1 = min_int(dv_pad, c0 + NR);
    auto strip = [&](auto m_const, int r) {
      constexpr int M = decltype(m_const)::value;
      int c = c0;
      for (; c + NV * W <= c1; c += NV * W) pvt_block<M, NV>(p + r, p_stride, v, c, n, acc + r * dv_pad + c, dv_pad);
      for (; c < c1; c += W) pvt_block<M, 1>(p + r, p_stride, v, c, n, acc + r * dv_pad + c, dv_pad);
    };
    int r = 0;
    for (; r + MR <= rows; r += MR) strip(IntConst<MR>{}, r);
    switch (rows - r) {
      case 0: break;
      case 1: strip(IntConst<1>{}, r); break;
      case 2: strip(IntConst<2>{}, r); break;
      case 3: strip(IntConst<3>{}, r); break;
      case 4: strip(IntConst<4>{}, r); break;
      default: strip(IntConst<5>{}, r); break;
    }
  }
}

// Over [rows x bc_pad]: dp <- dS = p·(z·dp - d[r]), times 1 - (tc/cap)² through
// a softcap (tc: the softcapped scores), 0 where p is 0 (so a masked key's dP,
// whatever its values, stays out); then p <- p·z. z: dropout factors, or
// nullptr; tc: nullptr without a softcap.
static void grad_scores(float* p, float* dp, int rows, int bc_pad, const float* d, const float* z, const float* tc,
                        float inv_cap) {
  const Vec one = vset(1.0f), vinv = vset(inv_cap);
  for (int r = 0; r < rows; ++r) {
    const std::int64_t at = static_cast<std::int64_t>(r) * bc_pad;
    float* pr = p + at;
    float* dr = dp + at;
    const Vec vd = vset(d[r]);
    for (int j = 0; j < bc_pad; j += W) {
      Vec pj = vload(pr + j), g = vload(dr + j);
      if (z) {
        const Vec zj = vload(z + at + j);
        g = vmul(g, zj);
        vstore(pr + j, vmul(pj, zj));
      }
      Vec ds = vmul(pj, vsub(g, vd));
      if (tc) {
        const Vec th = vmul(vload(tc + at + j), vinv);
        ds = vmul(ds, vsub(one, vmul(th, th)));
      }
      vstore(dr + j, vkeep_nonzero(ds, pj));
    }
  }
}

// ---- Dropout: Philox-4x32-10 over 16 counters at a time -------------------------
//
// The keep rule of src/philox.h (counter (j/4, i, bh, offset), key, word j % 4
// >= thr), written as plain loops over arrays of counters so that the
// compiler turns each round into vector multiplies for this ISA. The words
// are the same bits as philox::rounds10's (tests/dropout_test.cpp and the
// backward tests hold the kernels to the oracle).
inline constexpr int kPhiloxLanes = 16;
// Counters in 64-bit lanes (values below 2^32), as many as a vector holds:
// GCC's vector extensions turn each product into this ISA's multiplies.
inline constexpr int kPhiloxVec = W >= 2 ? W / 2 : 1;
typedef std::uint64_t PhiloxU64 __attribute__((vector_size(8 * kPhiloxVec)));

// row[j] <- (kept ? scale : 0), or row[j] *= that with multiply, for keys
// t0 .. t0 + n - 1 of query i in slice bh.
static void dropout(const std::uint32_t* key, std::uint32_t qi, std::uint32_t bh, std::uint32_t offset,
                    std::uint32_t thr, std::int64_t t0, int n, float scale, float* row, int multiply) {
  constexpr int kVecs = kPhiloxLanes / kPhiloxVec;
  const std::uint64_t lo32 = 0xFFFFFFFFu;
  const std::int64_t end = t0 + n;
  std::int64_t j = t0;
  while (j < end) {
    const std::int64_t g0 = j >> 2;
    PhiloxU64 c0[kVecs], c1[kVecs], c2[kVecs], c3[kVecs];
    for (int v = 0; v < kVecs; ++v)
      for (int e = 0; e < kPhiloxVec; ++e) {
        c0[v][e] = static_cast<std::uint32_t>(g0 + v * kPhiloxVec + e);
        c1[v][e] = qi;
        c2[v][e] = bh;
        c3[v][e] = offset;
      }
    std::uint64_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; ++r) {
      for (int v = 0; v < kVecs; ++v) {
        const PhiloxU64 p0 = c0[v] * std::uint64_t{0xD2511F53u}, p1 = c2[v] * std::uint64_t{0xCD9E8D57u};
        c0[v] = (p1 >> 32) ^ c1[v] ^ k0;
        c2[v] = (p0 >> 32) ^ c3[v] ^ k1;
        c1[v] = p1 & lo32;
        c3[v] = p0 & lo32;
      }
      k0 = (k0 + 0x9E3779B9u) & lo32;
      k1 = (k1 + 0xBB67AE85u) & lo32;
    }
    // Factors of keys 4*g0 ..: word w of counter g is key 4*(g0 + g) + w.
    float f[4 * kPhiloxLanes];
    for (int v = 0; v < kVecs; ++v)
      for (int e = 0; e < kPhiloxVec; ++e) {
        const int g = v * kPhiloxVec + e;
        f[4 * g] = c0[v][e] >= thr ? scale : 0.0f;
        f[4 * g + 1] = c1[v][e] >= thr ? scale : 0.0f;
        f[4 * g + 2] = c2[v][e] >= thr ? scale : 0.0f;
        f[4 * g + 3] = c3[v][e] >= thr ? scale : 0.0f;
      }
    const std::int64_t stop = end < (g0 + kPhiloxLanes) * 4 ? end : (g0 + kPhiloxLanes) * 4;
    const float* fj = f + (j - 4 * g0);
    float* x = row + (j - t0);
    const int m = static_cast<int>(stop - j);
    if (multiply) {
      for (int e = 0; e < m; ++e) x[e] *= fj[e];
    } else {
      for (int e = 0; e < m; ++e) x[e] = fj[e];
    }
    j = stop;
  }
}

// s <- c·tanh(s/c) over [rows x bc_pad]. tanh|x| = (1 - t)/(1 + t) with
// t = exp(-2|x|) <= 1, so the kernels' exp2 (defined for arguments <= 0)
// serves; the sign is restored after. tanh(±inf) = ±1, NaN stays NaN.
static void softcap(float* s, int rows, int bc_pad, float c) {
  const Vec vc = vset(c), vinv = vset(1.0f / c), vm2log2e = vset(-2.0f * kLog2e), one = vset(1.0f);
  for (int r = 0; r < rows; ++r) {
    float* row = s + static_cast<std::int64_t>(r) * bc_pad;
    for (int j = 0; j < bc_pad; j += W) {
      const Vec x = vmul(vload(row + j), vinv);
      const Vec ax = vabs(x);
      const Vec t = vexp2(vmul(ax, vm2log2e));
      const Vec th = vdiv(vsub(one, t), vadd(one, t));
      vstore(row + j, vmul(vcopysign(th, x), vc));
    }
  }
}

// Fills a KernelSet's function pointers with this ISA's kernels (dispatch
// sets its sizes from kernels.def); pack_kt is left to the ISA file (the
// generic one, or a faster one of its own).
#include "cpu/kernels/convert.inl"
#include "cpu/kernels/direct_storage.inl"

// ---- A row's output ------------------------------------------------------------

// 1 where x is Inf or NaN (exponent bits all ones), else 0: branch-free, so
// the loops that OR it over a row vectorize.
static inline std::uint32_t not_finite(float x) {
  std::uint32_t u;
  __builtin_memcpy(&u, &x, sizeof u);
  return static_cast<std::uint32_t>((u & 0x7f800000u) == 0x7f800000u);
}

// out[c] = float(double(x[c]) * inv): rounded once from double, as the
// scalar expression is; returns whether x held only finite values, checked
// in the same pass. The loop is left to the compiler to vectorize with this
// set's flags.
static bool scale_row(const float* __restrict x, std::int64_t n, double inv, float* __restrict out) {
  std::uint32_t bad = 0;
  for (std::int64_t c = 0; c < n; ++c) {
    bad |= not_finite(x[c]);
    out[c] = static_cast<float>(static_cast<double>(x[c]) * inv);
  }
  return bad == 0;
}

static void scale_copy(const float* __restrict x, std::int64_t n, float scale, float* __restrict out) {
  std::int64_t c = 0;
  const Vec vs = vset(scale);
  for (; c + W <= n; c += W) vstore(out + c, vmul(vload(x + c), vs));
  for (; c < n; ++c) out[c] = x[c] * scale;
}

static double dot_f64(const float* __restrict a, const float* __restrict b, std::int64_t n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t c = 0;
  for (; c + 8 <= n; c += 8)
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) part[k] += static_cast<double>(a[c + k]) * static_cast<double>(b[c + k]);
  for (int k = 0; c < n; ++c, ++k) part[k] += static_cast<double>(a[c]) * static_cast<double>(b[c]);
  double sum = 0;
  for (double x : part) sum += x;
  return sum;
}

// Whether x[0, n) holds only finite values.
static bool all_finite_row(const float* x, std::int64_t n) {
  std::uint32_t bad = 0;
  for (std::int64_t c = 0; c < n; ++c) bad |= not_finite(x[c]);
  return bad == 0;
}

static void fill_kernel_set(KernelSet& ks) {
  ks.scale_row = scale_row;
  ks.scale_copy = scale_copy;
  ks.dot_f64 = dot_f64;
  ks.all_finite = all_finite_row;
  ks.to_f32 = convert_to_f32;
  ks.dequant_i8 = dequant_i8;
  ks.scores_direct_st = scores_direct_st;
  ks.pv_direct_st = pv_direct_st;
  ks.scores_heads_st = scores_heads_st;
  ks.pv_heads_st = pv_heads_st;
  ks.pack_kt = pack_kt_generic;
  ks.scores = scores;
  ks.scores_ranged = scores_ranged;
  ks.scores_direct = scores_direct;
  ks.softmax_step = softmax_step;
  ks.pv = pv;
  ks.softcap = softcap;
  ks.probs = probs;
  ks.exp2 = exp2_array;
  ks.pvt = pvt;
  ks.dropout = dropout;
  ks.grad_scores = grad_scores;
}
