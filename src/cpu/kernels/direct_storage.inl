// Decode kernels on K/V as stored (float16, bfloat16, int8 with group
// scales): the scores_direct and pv loops with the conversion done in
// registers, so the bytes read from memory are the stored ones and nothing is
// written back. Decode reads each K/V byte once with a few FMAs per byte:
// memory-bound, and on one core bound by how many cache lines are in flight,
// so each row read also requests the row a tile ahead (StoredRows::prefetch).
// Included by tile_kernels.inl inside an ISA's namespace (W, Vec, vload_*).

struct LoadF32 {
  static Vec vec(const void* r, const void*, int c) { return vload(static_cast<const float*>(r) + c); }
  static float one(const void* r, const void*, int c) { return static_cast<const float*>(r)[c]; }
};

struct LoadF16 {
  static Vec vec(const void* r, const void*, int c) { return vload_f16(static_cast<const std::uint16_t*>(r) + c); }
  static float one(const void* r, const void*, int c) { return convert_f16_one(static_cast<const std::uint16_t*>(r)[c]); }
};

struct LoadBF16 {
  static Vec vec(const void* r, const void*, int c) { return vload_bf16(static_cast<const std::uint16_t*>(r) + c); }
  static float one(const void* r, const void*, int c) {
    const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(r)[c]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

// int8 with float32 (F16 = false) or float16 scales; the group is a power of
// two and a multiple of W, so a vector never straddles two groups and the
// group of column c is a shift away.
template <bool F16>
struct LoadI8 {
  int shift;  // log2 of the group
  float scale(const void* sc, int c) const {
    const int g = c >> shift;
    return F16 ? convert_f16_one(static_cast<const std::uint16_t*>(sc)[g]) : static_cast<const float*>(sc)[g];
  }
  Vec vec(const void* r, const void* sc, int c) const {
    return vmul(vload_i8(static_cast<const std::int8_t*>(r) + c), vset(scale(sc, c)));
  }
  float one(const void* r, const void* sc, int c) const {
    return static_cast<float>(static_cast<const std::int8_t*>(r)[c]) * scale(sc, c);
  }
};

static inline void prefetch_row(const StoredRows& t, int j) {
  if (t.prefetch == 0) return;
  const char* r = static_cast<const char*>(t.rows[j]) + t.prefetch;
  for (int off = 0; off < t.row_bytes; off += 64) __builtin_prefetch(r + off, 0, 3);
  if (t.scales) __builtin_prefetch(static_cast<const char*>(t.scales[j]) + t.prefetch / t.row_bytes * t.scale_bytes, 0, 3);
}

// The row t.lead keys after key j of these n, through the row pointers
// (float32 rows of decode blocks of several rows, any layout).
static inline void lead_row(const StoredRows& t, int j, int n) {
  if (t.lead == 0 || j + t.lead >= n) return;
  const char* r = static_cast<const char*>(t.rows[j + t.lead]);
  for (int off = 0; off < t.row_bytes; off += 64) __builtin_prefetch(r + off, 0, 3);
}

static inline const void* scale_row(const StoredRows& t, int j) { return t.scales ? t.scales[j] : nullptr; }

// M rows x KK keys (M*KK <= 8 accumulator chains), one accumulator vector
// per (row, key); each chain is cut every kChunk steps into a running total
// (blocked summation, as in scores_block), so each key's sum is the same for
// any KK and either loop order.
template <int M, int KK, class L>
static inline void scores_st_block(const L& ld, const float* qs, int d, const StoredRows& k, int j, float* s,
                                   int s_stride) {
  const void* kr[KK];
  const void* ks[KK];
#pragma GCC unroll 8
  for (int x = 0; x < KK; ++x) {
    kr[x] = k.rows[j + x];
    ks[x] = scale_row(k, j + x);
  }
  Vec acc[M][KK], tot[M][KK];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < KK; ++x) acc[m][x] = tot[m][x] = vzero();
  constexpr int kChunk = 8;
  int c = 0, step = 0;
  if (M == 1 && d % W == 0 && d <= kChunk * W) {
    // One row (MHA decode): each key's row read start to end in turn, a
    // sequential stream per key that the prefetchers follow (measured 15-20%
    // faster from DRAM than the keys side by side). One chunk: no totals.
#pragma GCC unroll 8
    for (int x = 0; x < KK; ++x)
      for (int cc = 0; cc < d; cc += W) acc[0][x] = vfma(vload(qs + cc), ld.vec(kr[x], ks[x], cc), acc[0][x]);
    c = d;
  } else if (M == 1 && d % W == 0) {
    // The same chunk by chunk (narrower vectors, larger d), each chunk
    // closed into the totals as the loop below does. Kept apart from the
    // one-chunk case above: taken for it too, it measured 10% slower (AVX-512).
    for (int c0 = 0; c0 < d; c0 += kChunk * W) {
      const int c1 = min_int(d, c0 + kChunk * W);
#pragma GCC unroll 8
      for (int x = 0; x < KK; ++x)
        for (int cc = c0; cc < c1; cc += W) acc[0][x] = vfma(vload(qs + cc), ld.vec(kr[x], ks[x], cc), acc[0][x]);
      if (c1 - c0 == kChunk * W)
#pragma GCC unroll 8
        for (int x = 0; x < KK; ++x) {
          tot[0][x] = vadd(tot[0][x], acc[0][x]);
          acc[0][x] = vzero();
        }
    }
    c = d;
  }
  for (; c + W <= d; c += W) {
    Vec b[KK];
#pragma GCC unroll 8
    for (int x = 0; x < KK; ++x) b[x] = ld.vec(kr[x], ks[x], c);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const Vec a = vload(qs + m * d + c);
#pragma GCC unroll 8
      for (int x = 0; x < KK; ++x) acc[m][x] = vfma(a, b[x], acc[m][x]);
    }
    if (++step == kChunk) {
      step = 0;
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
        for (int x = 0; x < KK; ++x) {
          tot[m][x] = vadd(tot[m][x], acc[m][x]);
          acc[m][x] = vzero();
        }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < KK; ++x) {
      float t = hsum(vadd(tot[m][x], acc[m][x]));
      for (int cc = c; cc < d; ++cc) t += qs[m * d + cc] * ld.one(kr[x], ks[x], cc);
      s[m * s_stride + x] = t;
    }
}

// Keys KK at a time: 4 for one row, 2 for more (8 chains at most).
template <int M, class L>
static void scores_st_rows(const L& ld, const float* qs, int d, const StoredRows& k, int n, float* s, int s_stride,
                           bool prefetch) {
  constexpr int KK = M == 1 ? 4 : 2;
  int j = 0;
  for (; j + KK <= n; j += KK) {
    if (prefetch)
#pragma GCC unroll 8
      for (int x = 0; x < KK; ++x) {
        prefetch_row(k, j + x);
        lead_row(k, j + x, n);
      }
    scores_st_block<M, KK>(ld, qs, d, k, j, s + j, s_stride);
  }
  for (; j < n; ++j) {
    if (prefetch) {
      prefetch_row(k, j);
      lead_row(k, j, n);
    }
    scores_st_block<M, 1>(ld, qs, d, k, j, s + j, s_stride);
  }
}

template <class L>
static void scores_st(const L& ld, const float* qs, int rows, int d, const StoredRows& k, int n, float* s, int s_stride) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) scores_st_rows<4>(ld, qs + r * d, d, k, n, s + r * s_stride, s_stride, r == 0);
  const bool first = r == 0;
  switch (rows - r) {
    case 0: break;
    case 1: scores_st_rows<1>(ld, qs + r * d, d, k, n, s + r * s_stride, s_stride, first); break;
    case 2: scores_st_rows<2>(ld, qs + r * d, d, k, n, s + r * s_stride, s_stride, first); break;
    default: scores_st_rows<3>(ld, qs + r * d, d, k, n, s + r * s_stride, s_stride, first); break;
  }
}

static void scores_direct_st(const float* qs, int rows, int d, const StoredRows& k, int n, float* s, int s_stride) {
  switch (k.dtype) {
    case DType::f16: scores_st(LoadF16{}, qs, rows, d, k, n, s, s_stride); return;
    case DType::bf16: scores_st(LoadBF16{}, qs, rows, d, k, n, s, s_stride); return;
    default:
      if (k.sdt == DType::f16)
        scores_st(LoadI8<true>{__builtin_ctz(static_cast<unsigned>(k.group))}, qs, rows, d, k, n, s, s_stride);
      else
        scores_st(LoadI8<false>{__builtin_ctz(static_cast<unsigned>(k.group))}, qs, rows, d, k, n, s, s_stride);
      return;
  }
}

// Rows [0, M) of P against every key, columns [c0, c0 + NV_*W) of V and acc.
template <int M, int NV_, class L>
static inline void pv_st_block(const L& ld, const float* p, int p_stride, const StoredRows& v, int n, int c0,
                               float* acc, int acc_stride, const float* alpha, bool prefetch) {
  Vec a[M][NV_];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const Vec sc = vset(alpha ? alpha[m] : 1.0f);
#pragma GCC unroll 8
    for (int x = 0; x < NV_; ++x) a[m][x] = vmul(vload(acc + m * acc_stride + c0 + x * W), sc);
  }
  for (int j = 0; j < n; ++j) {
    if (prefetch) prefetch_row(v, j);
    const void *r = v.rows[j], *sr = scale_row(v, j);
    Vec b[NV_];
#pragma GCC unroll 8
    for (int x = 0; x < NV_; ++x) b[x] = ld.vec(r, sr, c0 + x * W);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const Vec pm = vset(p[m * p_stride + j]);
#pragma GCC unroll 8
      for (int x = 0; x < NV_; ++x) a[m][x] = vfma(pm, b[x], a[m][x]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV_; ++x) vstore(acc + m * acc_stride + c0 + x * W, a[m][x]);
}

template <int M, class L>
static void pv_st_rows(const L& ld, const float* p, int p_stride, const StoredRows& v, int n, int dv, float* acc,
                       int acc_stride, const float* alpha, bool prefetch) {
  int c = 0;
  // One or two rows (MHA decode): wider column blocks, so each V row is
  // streamed in as few sweeps as the registers allow (a whole row of 128
  // floats with AVX-512).
  constexpr int kWide = M <= 2 ? (W >= 16 ? 8 : 4) : NV;
  for (; c + kWide * W <= dv; c += kWide * W) {
    pv_st_block<M, kWide>(ld, p, p_stride, v, n, c, acc, acc_stride, alpha, prefetch);
    prefetch = false;  // each row once
  }
  for (; c + NV * W <= dv; c += NV * W) {
    pv_st_block<M, NV>(ld, p, p_stride, v, n, c, acc, acc_stride, alpha, prefetch);
    prefetch = false;
  }
  for (; c + W <= dv; c += W) {
    pv_st_block<M, 1>(ld, p, p_stride, v, n, c, acc, acc_stride, alpha, prefetch);
    prefetch = false;
  }
  // Columns past the last whole vector, one by one.
  for (int m = 0; m < M; ++m)
    for (int cc = c; cc < dv; ++cc) {
      float x = acc[m * acc_stride + cc] * (alpha ? alpha[m] : 1.0f);
      for (int j = 0; j < n; ++j) x += p[m * p_stride + j] * ld.one(v.rows[j], scale_row(v, j), cc);
      acc[m * acc_stride + cc] = x;
    }
}

template <class L>
static void pv_st(const L& ld, const float* p, int rows, int n, int p_stride, const StoredRows& v, int dv, float* acc,
                  int acc_stride, const float* alpha) {
  int r = 0;
  for (; r + 4 <= rows; r += 4)
    pv_st_rows<4>(ld, p + r * p_stride, p_stride, v, n, dv, acc + r * acc_stride, acc_stride, alpha + r, r == 0);
  const float* pr = p + r * p_stride;
  float* ar = acc + r * acc_stride;
  const bool first = r == 0;
  switch (rows - r) {
    case 0: break;
    case 1: pv_st_rows<1>(ld, pr, p_stride, v, n, dv, ar, acc_stride, alpha + r, first); break;
    case 2: pv_st_rows<2>(ld, pr, p_stride, v, n, dv, ar, acc_stride, alpha + r, first); break;
    default: pv_st_rows<3>(ld, pr, p_stride, v, n, dv, ar, acc_stride, alpha + r, first); break;
  }
}

// Dot products of one query row with keys [0, n) (float32 rows, d a multiple
// of W; D = d when fixed at compile time, else 0): each key's row read start
// to end, in chunks of kChunk vectors, summed in exactly the order of
// scores_st_block<1, KK>, so both give the same bits. Rows kRowAheadK bytes
// on are requested 4 keys at a time as the loop reaches them.
template <int D>
static void scores_row_f32(const float* qs, int dn, const float* const* k, int n, float* s) {
  constexpr int kChunk = 8;
  const int d = D ? D : dn;
  const int fit = (kRowAheadK / (d * 4) + 3) / 4 * 4;
  const int ahead = fit > 4 ? fit : 4;  // keys, a multiple of 4
  auto dot = [&](const float* kr) {
    Vec acc = vzero(), tot = vzero();
#pragma GCC unroll 16
    for (int c0 = 0; c0 < d; c0 += kChunk * W) {
      const int c1 = min_int(d, c0 + kChunk * W);
#pragma GCC unroll 16
      for (int c = c0; c < c1; c += W) acc = vfma(vload(qs + c), vload(kr + c), acc);
      if (d > kChunk * W && c1 - c0 == kChunk * W) {
        tot = vadd(tot, acc);
        acc = vzero();
      }
    }
    return hsum(vadd(tot, acc));
  };
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    if (j + ahead + 4 <= n)
#pragma GCC unroll 4
      for (int x = 0; x < 4; ++x) {
        const char* r = reinterpret_cast<const char*>(k[j + ahead + x]);
#pragma GCC unroll 16
        for (int o = 0; o < d * 4; o += 64) __builtin_prefetch(r + o, 0, 3);
      }
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x) s[j + x] = dot(k[j + x]);
  }
  for (; j < n; ++j) s[j] = dot(k[j]);
}

// S = Qs·Kᵀ for decode blocks (1-16 rows) on float32 K rows read in place:
// transposing each K tile would cost more than the scores themselves. One
// row: scores_row_f32 (d fixed where it is 64 or 128: the loop unrolled whole
// measured 2-5% faster from DRAM). More rows: the stored-row kernel with a
// float32 load, without prefetch (the driver requests their tiles ahead,
// prefetch_tile).
static void scores_direct(const float* qs, int rows, int d, const float* const* k, int n, float* s, int s_stride,
                          int ahead_bytes) {
  if (rows == 1 && d % W == 0) {
    switch (d) {
      case 64: scores_row_f32<64>(qs, d, k, n, s); return;
      case 128: scores_row_f32<128>(qs, d, k, n, s); return;
      default: scores_row_f32<0>(qs, d, k, n, s); return;
    }
  }
  StoredRows t{};
  t.rows = reinterpret_cast<const void* const*>(k);
  t.dtype = DType::f32;
  t.row_bytes = d * 4;
  if (ahead_bytes > 0) t.lead = ahead_bytes / t.row_bytes > 1 ? ahead_bytes / t.row_bytes : 1;
  scores_st(LoadF32{}, qs, rows, d, t, n, s, s_stride);
}

static void pv_direct_st(const float* p, int rows, int n, int p_stride, const StoredRows& v, int dv, float* acc,
                         int acc_stride, const float* alpha) {
  switch (v.dtype) {
    case DType::f16: pv_st(LoadF16{}, p, rows, n, p_stride, v, dv, acc, acc_stride, alpha); return;
    case DType::bf16: pv_st(LoadBF16{}, p, rows, n, p_stride, v, dv, acc, acc_stride, alpha); return;
    default:
      if (v.sdt == DType::f16)
        pv_st(LoadI8<true>{__builtin_ctz(static_cast<unsigned>(v.group))}, p, rows, n, p_stride, v, dv, acc, acc_stride, alpha);
      else
        pv_st(LoadI8<false>{__builtin_ctz(static_cast<unsigned>(v.group))}, p, rows, n, p_stride, v, dv, acc, acc_stride, alpha);
      return;
  }
}

// Keys per step of the all-heads kernels: the rows of this many keys are read
// together, head after head (scores: the 4 keys of scores_st's one-row
// blocks; P·V: 16, so that each head's accumulators are loaded and stored
// once per 16 keys: on AMD Zen 5, 8 measured about as fast as 4 and 16 from
// DRAM and faster than 4 from cache; alternated in one process on Intel
// Xeon, H = 32, Hkv = 8, d = 128, 16 and 32 measured 1-5% faster than 8 in
// float32 and float16, from cache and from DRAM, 1 and 2 threads).
constexpr int kHeadKeys = 4;
constexpr int kHeadValueKeys = 16;

// Head h's rows (and scales) of keys [j0, j0 + nb) into r (sc), and a request
// for head h's part of the rows k.ahead names for those keys. The requests
// (the driver's kHeadAheadBytes ahead) bring lines to L2 only (prefetcht1): in
// float32, alternated in one process against requests to L1 (H = 32, Hkv =
// 8, d = 128, Intel Xeon), 3-6% faster at Nkv = 1024 and 16384, 1 and 2
// threads; float16 the same either way.
static inline void head_rows(const StoredRows& k, const HeadSteps& hs, int h, int j0, int nb, const void** r,
                             const void** sc) {
  const std::int64_t off = h * hs.row_bytes, soff = h * hs.scale_bytes;
  for (int x = 0; x < nb; ++x) {
    r[x] = static_cast<const char*>(k.rows[j0 + x]) + off;
    if (k.scales) sc[x] = static_cast<const char*>(k.scales[j0 + x]) + soff;
    if (!k.ahead || !k.ahead[j0 + x]) continue;
    const char* a = static_cast<const char*>(k.ahead[j0 + x]) + off;
    for (int o = 0; o < k.ahead_bytes; o += 64) __builtin_prefetch(a + o, 0, 2);
    if (k.ahead_scales) __builtin_prefetch(static_cast<const char*>(k.ahead_scales[j0 + x]) + soff, 0, 2);
  }
}

template <class L>
static void scores_heads(const L& ld, const float* qs, int rows, int d, const StoredRows& k, int n, float* s,
                         int s_stride, const HeadSteps& hs) {
  const void* r[kHeadKeys];
  const void* sc[kHeadKeys];
  StoredRows kh = k;
  kh.rows = r;
  kh.scales = k.scales ? sc : nullptr;
  kh.prefetch = 0;
  kh.ahead = nullptr;
  for (int j0 = 0; j0 < n; j0 += kHeadKeys) {
    const int nb = min_int(kHeadKeys, n - j0);
    for (int h = 0; h < hs.heads; ++h) {
      head_rows(k, hs, h, j0, nb, r, sc);
      scores_st(ld, qs + h * hs.q, rows, d, kh, nb, s + h * hs.s + j0, s_stride);
    }
  }
}

template <class L>
static void pv_heads(const L& ld, const float* p, int rows, int n, int p_stride, const StoredRows& v, int dv,
                     float* acc, int acc_stride, const float* alpha, const HeadSteps& hs) {
  static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // decode blocks: at most 16 rows
  const void* r[kHeadValueKeys];
  const void* sc[kHeadValueKeys];
  StoredRows vh = v;
  vh.rows = r;
  vh.scales = v.scales ? sc : nullptr;
  vh.prefetch = 0;
  vh.ahead = nullptr;
  for (int j0 = 0; j0 < n; j0 += kHeadValueKeys) {
    const int nb = min_int(kHeadValueKeys, n - j0);
    for (int h = 0; h < hs.heads; ++h) {
      head_rows(v, hs, h, j0, nb, r, sc);
      // alpha with the first keys only; then x·1, which changes no bit.
      pv_st(ld, p + h * hs.s + j0, rows, nb, p_stride, vh, dv, acc + h * hs.acc, acc_stride,
            j0 == 0 && alpha ? alpha + h * hs.alpha : ones);
    }
  }
}

static void scores_heads_st(const float* qs, int rows, int d, const StoredRows& k, int n, float* s, int s_stride,
                            const HeadSteps& hs) {
  switch (k.dtype) {
    case DType::f32: scores_heads(LoadF32{}, qs, rows, d, k, n, s, s_stride, hs); return;
    case DType::f16: scores_heads(LoadF16{}, qs, rows, d, k, n, s, s_stride, hs); return;
    case DType::bf16: scores_heads(LoadBF16{}, qs, rows, d, k, n, s, s_stride, hs); return;
    default:
      if (k.sdt == DType::f16)
        scores_heads(LoadI8<true>{__builtin_ctz(static_cast<unsigned>(k.group))}, qs, rows, d, k, n, s, s_stride, hs);
      else
        scores_heads(LoadI8<false>{__builtin_ctz(static_cast<unsigned>(k.group))}, qs, rows, d, k, n, s, s_stride, hs);
      return;
  }
}

static void pv_heads_st(const float* p, int rows, int n, int p_stride, const StoredRows& v, int dv, float* acc,
                        int acc_stride, const float* alpha, const HeadSteps& hs) {
  switch (v.dtype) {
    case DType::f32: pv_heads(LoadF32{}, p, rows, n, p_stride, v, dv, acc, acc_stride, alpha, hs); return;
    case DType::f16: pv_heads(LoadF16{}, p, rows, n, p_stride, v, dv, acc, acc_stride, alpha, hs); return;
    case DType::bf16: pv_heads(LoadBF16{}, p, rows, n, p_stride, v, dv, acc, acc_stride, alpha, hs); return;
    default:
      if (v.sdt == DType::f16)
        pv_heads(LoadI8<true>{__builtin_ctz(static_cast<unsigned>(v.group))}, p, rows, n, p_stride, v, dv, acc,
                 acc_stride, alpha, hs);
      else
        pv_heads(LoadI8<false>{__builtin_ctz(static_cast<unsigned>(v.group))}, p, rows, n, p_stride, v, dv, acc,
                 acc_stride, alpha, hs);
      return;
  }
}
