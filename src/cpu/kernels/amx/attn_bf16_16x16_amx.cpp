// attn_bf16_16x16_amx: the AVX-512F float32 kernels of attn_f32_6x64_avx512
// and the bfloat16 packing of attn_bf16_6x64_avx512bf16, with the two bf16
// products on AMX tiles (tdpbf16ps: a 16x16 float32 tile += a 16x32 bf16
// tile times a 32x16 one, taken as 16 rows of pairs; each product of two bf16
// is exact in float32 and the sums are float32). This file alone is compiled
// with -mamx-tile -mamx-bf16 (plus the AVX512-BF16 file's flags); dispatch
// calls it only on CPUs that have AMX-BF16 and once Linux has granted the
// process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM).
//
// Shapes: tiles of 16 rows and 32 bf16 of reduction, so d2 is d rounded up to
// 32 (pack_q_bf16 and pack_kt_bf16 zero-fill it), v2 holds n rounded up to 32
// keys, and q2 and S hold rows rounded up to 16 (bf16_kpad = 32, bf16_rpad =
// 16). kt2 is the documented pair layout as it is: 16 of its pair rows,
// 16 keys wide, are one B tile with a row stride of bc_pad words; likewise
// v2's pair rows with a stride of dv_pad words.
//
// Blocking: both products run 2x2 blocks of output tiles (tmm0-3), two A
// tiles (tmm4-5) and two B tiles (tmm6-7), i.e. the eight tile registers of
// palette 1, all configured 16 rows x 64 bytes.
//
// Tile configuration: the tile registers and TILECFG are caller-saved state
// (x86-64 psABI), so nothing can rely on a configuration surviving a call
// into other code, and these kernels cannot rely on one surviving between
// their own calls (another AMX user on the thread may change or release it).
// Every call therefore loads its configuration first and releases the tiles
// before returning, leaving the thread's AMX state as it found it: INIT, and
// no extra state for context switches to save.
#include <immintrin.h>

#include <cstring>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/vec_avx512.h"

namespace sdpa::cpu::amx {

// The AVX-512F wrapper as it is: its functions have internal linkage, so this
// file's copies of them and of the kernels below are compiled with its flags.
using namespace avx512;

inline constexpr KernelTile kTile = tiles::attn_bf16_16x16_amx;
static_assert(kTile.w == W, "kernels.def's W for attn_bf16_16x16_amx must match vec_avx512.h");
inline constexpr int MR = kTile.mr;
inline constexpr int NV = kTile.nv;

#include "cpu/kernels/tile_kernels.inl"
#include "cpu/kernels/pack_kt_avx2.inl"
#include "cpu/kernels/dropout_avx512.inl"

// ---- bfloat16 on AMX -----------------------------------------------------------

// A tile row holds 32 bf16 (64 bytes); a tile has 16 rows.
inline constexpr int kBf16KPad = 32;
inline constexpr int kBf16RPad = 16;
static_assert(kTile.br % kBf16RPad == 0, "a block's rows are whole tiles");

#include "cpu/kernels/bf16_pack.inl"

inline constexpr int kTileRows = 16;
inline constexpr int kTileBytes = 64;
inline constexpr int kTileK = kTileBytes / 2;      // bf16 of reduction per tile row
inline constexpr int kTileCols = kTileBytes / 4;  // float32 (or pair) columns per tile

// LDTILECFG's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
  std::uint8_t palette;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

static constexpr TileConfig make_config() {
  TileConfig c{};
  c.palette = 1;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = kTileBytes;
    c.rows[t] = kTileRows;
  }
  return c;
}
alignas(64) static constexpr TileConfig kConfig = make_config();

// Configures the tiles for one call and releases them at its end.
struct TileScope {
  TileScope() { _tile_loadconfig(&kConfig); }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// S (rows bc_pad apart, 16*RT x 16*CT) = scale · A·B over d2 = whole tiles of
// reduction: q2 rows d2 apart, kt2 pair rows bc_pad words apart.
template <int RT, int CT>
static inline void scores_amx_block(const std::uint16_t* q2, int d2, const std::uint16_t* kt2, int bc_pad,
                                    __m512 scale, float* s) {
  const long q_stride = 2L * d2, kt_stride = 4L * bc_pad, s_stride = 4L * bc_pad;
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) _tile_zero(2);
  if constexpr (RT > 1 && CT > 1) _tile_zero(3);
  for (int c = 0; c < d2; c += kTileK) {
    // Pair row c/2 of kt2, the block's first key.
    const std::uint16_t* b = kt2 + static_cast<std::int64_t>(c) * bc_pad;
    _tile_loadd(4, q2 + c, q_stride);
    _tile_loadd(6, b, kt_stride);
    if constexpr (RT > 1) _tile_loadd(5, q2 + static_cast<std::int64_t>(kTileRows) * d2 + c, q_stride);
    if constexpr (CT > 1) _tile_loadd(7, b + 2 * kTileCols, kt_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (CT > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (RT > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (RT > 1 && CT > 1) _tile_dpbf16ps(3, 5, 7);
  }
  float* s1 = s + static_cast<std::int64_t>(kTileRows) * bc_pad;
  _tile_stored(0, s, s_stride);
  if constexpr (CT > 1) _tile_stored(1, s + kTileCols, s_stride);
  if constexpr (RT > 1) _tile_stored(2, s1, s_stride);
  if constexpr (RT > 1 && CT > 1) _tile_stored(3, s1 + kTileCols, s_stride);
  // In place, while the block is in L1. (Scaling one block later, to overlap
  // with the next block's products, measured no faster.)
  for (int r = 0; r < RT * kTileRows; ++r)
#pragma GCC unroll 2
    for (int x = 0; x < CT; ++x) {
      float* dst = s + static_cast<std::int64_t>(r) * bc_pad + x * kTileCols;
      _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_loadu_ps(dst), scale));
    }
}

// Row strips of 32 (the 2x2 block) over every column pair: q2's strip (8 KiB
// at d = 128) is reloaded per column pair from L1, kt2 (16 KiB) stays there.
static void scores_bf16(const std::uint16_t* q2, int rows, int d, const std::uint16_t* kt2, int bc_pad, float scale,
                        float* s) {
  const int d2 = round_up_to(d, kBf16KPad), rt = (rows + kTileRows - 1) / kTileRows, ct = bc_pad / kTileCols;
  const __m512 vscale = _mm512_set1_ps(scale);
  const TileScope tiles;
  for (int r = 0; r < rt; r += 2) {
    const std::uint16_t* qr = q2 + static_cast<std::int64_t>(r) * kTileRows * d2;
    float* sr = s + static_cast<std::int64_t>(r) * kTileRows * bc_pad;
    for (int c = 0; c < ct; c += 2) {
      const std::uint16_t* kc = kt2 + 2 * c * kTileCols;
      float* sc = sr + c * kTileCols;
      const bool two_rows = r + 1 < rt, two_cols = c + 1 < ct;
      if (two_rows && two_cols) scores_amx_block<2, 2>(qr, d2, kc, bc_pad, vscale, sc);
      else if (two_rows) scores_amx_block<2, 1>(qr, d2, kc, bc_pad, vscale, sc);
      else if (two_cols) scores_amx_block<1, 2>(qr, d2, kc, bc_pad, vscale, sc);
      else scores_amx_block<1, 1>(qr, d2, kc, bc_pad, vscale, sc);
    }
  }
}

// P is rounded per strip of two tiles of rows into this buffer, n rounded up
// to whole tiles of keys (zero past n and past the strip's rows).
inline constexpr int kMaxKeys = (kTile.bc + kTileK - 1) / kTileK * kTileK;
inline constexpr long kPStride = 2L * kMaxKeys;  // bytes between rows of the buffer

// acc (rows dv_pad apart, `m` rows, 16*CT columns) = acc·alpha + A·B, A the
// rounded strip (two tiles of rows if RT = 2), B v2's pair rows dv_pad words
// apart; the product goes through `out` so that rows past m are never touched.
template <int RT, int CT>
static inline void pv_amx_block(const std::uint16_t* pp, int kk, const std::uint16_t* v2, int dv_pad, float* acc,
                                int m, const float* alpha, float* out) {
  const long v_stride = 4L * dv_pad, out_stride = 4L * kTileCols * 2;
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) _tile_zero(2);
  if constexpr (RT > 1 && CT > 1) _tile_zero(3);
  for (int j = 0; j < kk; j += kTileK) {
    // Pair row j/2 of v2, the block's first column.
    const std::uint16_t* b = v2 + static_cast<std::int64_t>(j) * dv_pad;
    _tile_loadd(4, pp + j, kPStride);
    _tile_loadd(6, b, v_stride);
    if constexpr (RT > 1) _tile_loadd(5, pp + kTileRows * kMaxKeys + j, kPStride);
    if constexpr (CT > 1) _tile_loadd(7, b + 2 * kTileCols, v_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (CT > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (RT > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (RT > 1 && CT > 1) _tile_dpbf16ps(3, 5, 7);
  }
  // out: 32 rows x 32 floats, the 2x2 block as one row-major matrix.
  float* out1 = out + kTileRows * 2 * kTileCols;
  _tile_stored(0, out, out_stride);
  if constexpr (CT > 1) _tile_stored(1, out + kTileCols, out_stride);
  if constexpr (RT > 1) _tile_stored(2, out1, out_stride);
  if constexpr (RT > 1 && CT > 1) _tile_stored(3, out1 + kTileCols, out_stride);
  for (int r = 0; r < m; ++r) {
    const __m512 a = _mm512_set1_ps(alpha ? alpha[r] : 1.0f);
#pragma GCC unroll 2
    for (int x = 0; x < CT; ++x) {
      float* dst = acc + static_cast<std::int64_t>(r) * dv_pad + x * kTileCols;
      const __m512 pv = _mm512_load_ps(out + r * 2 * kTileCols + x * kTileCols);
      _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_loadu_ps(dst), a, pv));
    }
  }
}

static void pv_bf16(const float* p, int rows, int n, int p_stride, const std::uint16_t* v2, int dv_pad, float* acc,
                    const float* alpha) {
  alignas(64) std::uint16_t pp[2 * kTileRows * kMaxKeys];
  alignas(64) float out[2 * kTileRows * 2 * kTileCols];
  const int kk = round_up_to(n, kBf16KPad), ct = dv_pad / kTileCols;
  const TileScope tiles;
  for (int r0 = 0; r0 < rows; r0 += 2 * kTileRows) {
    const int m = min_int(2 * kTileRows, rows - r0);
    const bool two_rows = m > kTileRows;
    // Masked loads: P past n is neither read nor rounded; the rows past m of
    // the strip's last tile are 0.
    for (int i = 0; i < (two_rows ? 2 : 1) * kTileRows; ++i) {
      std::uint16_t* dst = pp + i * kMaxKeys;
      const float* pr = p + static_cast<std::int64_t>(r0 + (i < m ? i : 0)) * p_stride;
      for (int j = 0; j < kk; j += 2 * W) {
        const __mmask32 mask = i < m ? first_lanes32(n - j) : 0;
        const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), pr + j);
        const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), pr + j + W);
        _mm512_store_si512(dst + j, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
    }
    const float* ar = alpha ? alpha + r0 : nullptr;
    float* accr = acc + static_cast<std::int64_t>(r0) * dv_pad;
    for (int c = 0; c < ct; c += 2) {
      const std::uint16_t* vc = v2 + 2 * c * kTileCols;
      float* accc = accr + c * kTileCols;
      const bool two_cols = c + 1 < ct;
      if (two_rows && two_cols) pv_amx_block<2, 2>(pp, kk, vc, dv_pad, accc, m, ar, out);
      else if (two_rows) pv_amx_block<2, 1>(pp, kk, vc, dv_pad, accc, m, ar, out);
      else if (two_cols) pv_amx_block<1, 2>(pp, kk, vc, dv_pad, accc, m, ar, out);
      else pv_amx_block<1, 1>(pp, kk, vc, dv_pad, accc, m, ar, out);
    }
  }
}


// ---- float32 on AMX: each value as three bf16 parts -----------------------------

// x = x0 + x1 + x2 exactly: x0 = bf16(x), x1 = bf16(x - x0), x2 = bf16(x - x0 -
// x1), each to nearest even. A float32 has 24 significant bits and each part
// takes 8 of them, so the last remainder is a bf16 itself; only parts below
// bf16's normal range (x under about 2^-110) are lost, as the instructions
// read subnormal inputs as 0. Inf and NaN make NaN parts, so they reach the
// sums. The parts of 32 values at once: lo = values 0..15, hi = 16..31.
static inline __m512 widen_lo(__m512i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(b)), 16));
}
static inline __m512 widen_hi(__m512i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(b, 1)), 16));
}
static inline void split3(__m512 lo, __m512 hi, __m512i* parts) {
  parts[0] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  lo = _mm512_sub_ps(lo, widen_lo(parts[0]));
  hi = _mm512_sub_ps(hi, widen_hi(parts[0]));
  parts[1] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  lo = _mm512_sub_ps(lo, widen_lo(parts[1]));
  hi = _mm512_sub_ps(hi, widen_hi(parts[1]));
  parts[2] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Splits `count` rows of `n` floats (rows[i]) into three arrays of bf16 rows,
// `stride` values apart, part p at out + p * part, columns [k0, k1) (k0 and
// k1 multiples of 32): values past n are 0, and only n values of each row
// are read. With begin and end, row i holds only its columns [begin[i],
// end[i]), the rest 0 and not read. With scale, the parts are those of
// x * scale (rounded to float32 first, as scale_copy does).
static void split_rows(const float* const* rows, int count, int n, int k0, int k1, std::uint16_t* out,
                       std::int64_t part, int stride, const int* begin = nullptr, const int* end = nullptr,
                       float scale = 1.0f) {
  const bool scaled = scale != 1.0f;
  const __m512 vs = _mm512_set1_ps(scale);
  for (int i = 0; i < count; ++i) {
    const float* src = rows[i];
    std::uint16_t* dst = out + static_cast<std::int64_t>(i) * stride;
    const int b = begin ? begin[i] : 0, e = end ? min_int(end[i], n) : n;
    for (int c = k0; c < k1; c += 2 * W) {
      const __mmask32 mask = first_lanes32(e - c) & ~first_lanes32(b - c);
      __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), src + c);
      __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), src + c + W);
      if (scaled) {
        lo = _mm512_mul_ps(lo, vs);
        hi = _mm512_mul_ps(hi, vs);
      }
      __m512i parts[3];
      split3(lo, hi, parts);
      for (int p = 0; p < 3; ++p) _mm512_storeu_si512(dst + p * part + c, parts[p]);
    }
  }
}

// The products of the parts that a float32 result needs: every q_i·k_j with
// i + j <= 2. Those left out (i + j >= 3) are below 2^-23 of |q·k| together,
// as one float32 rounding of the product. The five small ones are summed
// first, while the sum is small, then q0·k0 on top: the big products' sum
// rounds as a float32 dot product does, and the small ones' roundings are
// 2^-8 of that.

// C (16*RT x 16*CT in tiles 0-3) += Σ parts of A·B over `kk` (whole tiles of
// reduction): A's part p at a + p*a_part, rows a_stride bytes apart, chunk c
// at + c values; B's at b + p*b_part, pair rows b_stride bytes apart, chunk c
// at + c*b_chunk values. Tiles 4-5 hold A, 6-7 B.
template <int RT, int CT>
static inline void x3_products(const std::uint16_t* a, std::int64_t a_part, long a_stride, std::int64_t a_row16,
                               const std::uint16_t* b, std::int64_t b_part, long b_stride, std::int64_t b_chunk,
                               int kk) {
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) _tile_zero(2);
  if constexpr (RT > 1 && CT > 1) _tile_zero(3);
  auto load_a = [&](int p, int c) {
    const std::uint16_t* x = a + p * a_part + c;
    _tile_loadd(4, x, a_stride);
    if constexpr (RT > 1) _tile_loadd(5, x + a_row16, a_stride);
  };
  auto load_b = [&](int p, int c) {
    const std::uint16_t* x = b + p * b_part + static_cast<std::int64_t>(c) * b_chunk;
    _tile_loadd(6, x, b_stride);
    if constexpr (CT > 1) _tile_loadd(7, x + 2 * kTileCols, b_stride);
  };
  auto dp = [&]() {
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (CT > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (RT > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (RT > 1 && CT > 1) _tile_dpbf16ps(3, 5, 7);
  };
  for (int c = 0; c < kk; c += kTileK) {
    // The small products as (A part, B part): (0,1) (0,2) (1,1) (1,0) (2,0),
    // so that A and B are reloaded only where the part changes.
    load_a(0, c);
    load_b(1, c);
    dp();
    load_b(2, c);
    dp();
    load_a(1, c);
    load_b(1, c);
    dp();
    load_b(0, c);
    dp();
    load_a(2, c);
    dp();
  }
  for (int c = 0; c < kk; c += kTileK) {
    load_a(0, c);
    load_b(0, c);
    dp();
  }
}

// q3: the three parts of Qs = scale * Q (Q's rows q[0, rows)), each [rows_pad
// x d2] (pack_q_bf16's layout).
static void pack_q_x3(const float* const* q, int rows, int d, float scale, std::uint16_t* q3) {
  const int d2 = round_up_to(d, kBf16KPad), rows_pad = round_up_to(rows, kBf16RPad);
  const std::int64_t part = static_cast<std::int64_t>(rows_pad) * d2;
  for (int r0 = 0; r0 < rows; r0 += kTileRows)
    split_rows(q + r0, min_int(kTileRows, rows - r0), d, 0, d2, q3 + static_cast<std::int64_t>(r0) * d2, part, d2,
               nullptr, nullptr, scale);
  for (int p = 0; p < 3; ++p)
    for (int r = rows; r < rows_pad; ++r) std::memset(q3 + p * part + static_cast<std::int64_t>(r) * d2, 0, 2 * d2);
}

// 32-bit words of 16 vectors, transposed: r[i] word j <-> r[j] word i. Words
// are interleaved within 128-bit lanes, then pairs of words, then the lanes
// are gathered (4 x 16 shuffles; bits move, nothing is converted).
static inline void transpose16x16(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[m + c], lane L: rows m..m+3 of column 4L + c.
  __m512i u[16];
  for (int m = 0; m < 16; m += 4) {
    u[m] = _mm512_unpacklo_epi64(t[m], t[m + 2]);
    u[m + 1] = _mm512_unpackhi_epi64(t[m], t[m + 2]);
    u[m + 2] = _mm512_unpacklo_epi64(t[m + 1], t[m + 3]);
    u[m + 3] = _mm512_unpackhi_epi64(t[m + 1], t[m + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i w0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), w1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i w2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i w3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(w0, w2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(w0, w2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(w1, w3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(w1, w3, 0xDD);
  }
}

// kt3: the three parts of the key tile, each [d2/2 pair rows x bc_pad words]
// (pack_kt_bf16's layout), part p at kt3 + p * d2 * bc_pad. Sixteen keys and
// 32 values at a time: each key's 32 values split into 16 words per part,
// then each part's 16x16 words transposed. (Two 8x8 transposes in ymm took
// 1.3x the time at d = 128, 64 keys, one thread, for the same bits.)
static void pack_kt_x3(const float* const* k, int n, int d, std::uint16_t* kt3, int bc_pad) {
  const int d2 = round_up_to(d, kBf16KPad);
  const std::int64_t part = static_cast<std::int64_t>(d2) * bc_pad;
  auto at = [&](int p, int c2, int j) { return kt3 + p * part + 2 * (static_cast<std::int64_t>(c2) * bc_pad + j); };
  for (int j = 0; j < n; j += kTileCols) {
    const int keys = min_int(kTileCols, n - j);
    for (int c = 0; c < d2; c += 2 * W) {
      const __mmask32 mask = first_lanes32(d - c);
      __m512i r[3][kTileCols];
      for (int i = 0; i < kTileCols; ++i) {
        __m512i parts[3] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
        if (i < keys) {
          const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), k[j + i] + c);
          const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), k[j + i] + c + W);
          split3(lo, hi, parts);
        }
        for (int p = 0; p < 3; ++p) r[p][i] = parts[p];
      }
      for (int p = 0; p < 3; ++p) {
        transpose16x16(r[p]);
        for (int i = 0; i < kTileCols; ++i) _mm512_storeu_si512(at(p, c / 2 + i, j), r[p][i]);
      }
    }
  }
  // Columns from n rounded up to 16 on are 0.
  const int filled = round_up_to(n, kTileCols);
  for (int p = 0; p < 3; ++p)
    for (int c2 = 0; c2 < d2 / 2; ++c2)
      if (filled < bc_pad) std::memset(at(p, c2, filled), 0, sizeof(std::uint32_t) * (bc_pad - filled));
}

// Tiles [lo, hi) of `size` columns holding the union of rows [r0, r1)'s
// ranges [begin[r], end[r]) (empty ones add nothing); lo = hi when none.
static inline void union_tiles(const int* begin, const int* end, int r0, int r1, int size, int& lo, int& hi) {
  int b = 1 << 30, e = 0;
  for (int r = r0; r < r1; ++r)
    if (begin[r] < end[r]) {
      b = begin[r] < b ? begin[r] : b;
      e = end[r] > e ? end[r] : e;
    }
  if (b >= e) {
    lo = hi = 0;
    return;
  }
  lo = b / size;
  hi = (e + size - 1) / size;
}

// S [rows_pad x bc_pad] = Qs·Kᵀ from the parts. With row_begin and row_end,
// each strip of 32 rows computes only the 16-column tiles that hold a key
// one of its rows sees (the same bits as all of them), leaving the rest.
static void scores_x3(const std::uint16_t* q3, int rows, int d, const std::uint16_t* kt3, int bc_pad, float* s,
                      const int* row_begin, const int* row_end) {
  const int d2 = round_up_to(d, kBf16KPad), rows_pad = round_up_to(rows, kBf16RPad);
  const int rt = rows_pad / kTileRows;
  const std::int64_t q_part = static_cast<std::int64_t>(rows_pad) * d2, k_part = static_cast<std::int64_t>(d2) * bc_pad;
  const long q_stride = 2L * d2, kt_stride = 4L * bc_pad, s_stride = 4L * bc_pad;
  const TileScope tiles;
  for (int r = 0; r < rt; r += 2) {
    const std::uint16_t* qr = q3 + static_cast<std::int64_t>(r) * kTileRows * d2;
    float* sr = s + static_cast<std::int64_t>(r) * kTileRows * bc_pad;
    float* sr1 = sr + static_cast<std::int64_t>(kTileRows) * bc_pad;
    const std::int64_t q16 = static_cast<std::int64_t>(kTileRows) * d2;
    int c0 = 0, ct = bc_pad / kTileCols;
    if (row_begin) union_tiles(row_begin, row_end, r * kTileRows, min_int(rows, (r + 2) * kTileRows), kTileCols, c0, ct);
    for (int c = c0; c < ct; c += 2) {
      const std::uint16_t* kc = kt3 + 2 * c * kTileCols;
      float* sc = sr + c * kTileCols;
      const bool two_rows = r + 1 < rt, two_cols = c + 1 < ct;
      if (two_rows && two_cols) {
        x3_products<2, 2>(qr, q_part, q_stride, q16, kc, k_part, kt_stride, bc_pad, d2);
        _tile_stored(0, sc, s_stride);
        _tile_stored(1, sc + kTileCols, s_stride);
        _tile_stored(2, sr1 + c * kTileCols, s_stride);
        _tile_stored(3, sr1 + c * kTileCols + kTileCols, s_stride);
      } else if (two_rows) {
        x3_products<2, 1>(qr, q_part, q_stride, q16, kc, k_part, kt_stride, bc_pad, d2);
        _tile_stored(0, sc, s_stride);
        _tile_stored(2, sr1 + c * kTileCols, s_stride);
      } else if (two_cols) {
        x3_products<1, 2>(qr, q_part, q_stride, q16, kc, k_part, kt_stride, bc_pad, d2);
        _tile_stored(0, sc, s_stride);
        _tile_stored(1, sc + kTileCols, s_stride);
      } else {
        x3_products<1, 1>(qr, q_part, q_stride, q16, kc, k_part, kt_stride, bc_pad, d2);
        _tile_stored(0, sc, s_stride);
      }
    }
  }
}

// v3: the three parts of the value tile, each [n_pad/2 pair rows x dv_pad
// words] (pack_v_bf16's layout, n_pad = n rounded up to 32), part p at
// v3 + p * n_pad * dv_pad.
static void pack_v_x3(const float* const* v, int n, int dv, std::uint16_t* v3, int dv_pad) {
  const __m512i lo = _mm512_load_si512(kPairLo), hi = _mm512_load_si512(kPairHi);
  const int pairs_pad = round_up_to(n, kBf16KPad) / 2;
  const std::int64_t part = 2 * static_cast<std::int64_t>(pairs_pad) * dv_pad;
  for (int j2 = 0; j2 < pairs_pad; ++j2) {
    const float* r0 = 2 * j2 < n ? v[2 * j2] : nullptr;
    const float* r1 = 2 * j2 + 1 < n ? v[2 * j2 + 1] : nullptr;
    if (!r0) {
      for (int p = 0; p < 3; ++p)
        std::memset(v3 + p * part + 2 * static_cast<std::int64_t>(j2) * dv_pad, 0, sizeof(std::uint32_t) * dv_pad);
      continue;
    }
    for (int c = 0; c < dv_pad; c += 2 * W) {
      const __mmask32 mask = first_lanes32(dv - c);
      __m512i a[3], b[3] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
      split3(_mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), r0 + c),
             _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), r0 + c + W), a);
      if (r1)
        split3(_mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), r1 + c),
               _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), r1 + c + W), b);
      for (int p = 0; p < 3; ++p) {
        std::uint16_t* dst = v3 + p * part + 2 * static_cast<std::int64_t>(j2) * dv_pad;
        _mm512_storeu_si512(dst + 2 * c, _mm512_permutex2var_epi16(a[p], lo, b[p]));
        if (c + W < dv_pad) _mm512_storeu_si512(dst + 2 * (c + W), _mm512_permutex2var_epi16(a[p], hi, b[p]));
      }
    }
  }
}

// Keys a P·V tile on parts may hold: the driver's widest float32 tile
// (four times the set's BC: make_plan's x3 tiles at d > 64).
inline constexpr int kX3Keys = 4 * kMaxKeys;

// P's parts of two strips (one being multiplied, the next being split): the
// caller's scratch, kernel_set.h's x3_pv_work.
inline constexpr int kPvX3Work = 2 * 3 * 2 * kTileRows * kX3Keys;

// acc [rows x dv_pad] = acc·alpha + P·V from the parts of P (split here, per
// strip of 32 rows) and V (pack_v_x3). With col_begin and col_end, row r's P
// is read in [col_begin[r], col_end[r]) only, 0 elsewhere, and each strip
// runs over the 32-key chunks that hold those columns of its rows (the same
// bits: the chunks left out add exact zeros).
//
// Software-pipelined: the vector work runs while the tile unit computes. For
// each column block, the products are issued first; then, before their
// results are stored, the previous block's results are added into acc and a
// share of the next strip's rows of P is split. (Split first, then
// multiplied, it measured 1.5x slower than the products alone at d = 128.)
static void pv_x3(const float* p, int rows, int n, int p_stride, const std::uint16_t* v3, int dv_pad, float* acc,
                  const float* alpha, const int* col_begin, const int* col_end, std::uint16_t* work) {
  std::uint16_t* const pp[2] = {work, work + kPvX3Work / 2};
  alignas(64) float out[2][2 * kTileRows * 2 * kTileCols];
  const int kk = round_up_to(n, kBf16KPad), ct = dv_pad / kTileCols;
  const std::int64_t p_part = 2 * kTileRows * kX3Keys, v_part = static_cast<std::int64_t>(kk) * dv_pad;
  const long p_stride_b = 2L * kX3Keys, v_stride = 4L * dv_pad, out_stride = 4L * kTileCols * 2;
  const std::int64_t p_row16 = static_cast<std::int64_t>(kTileRows) * kX3Keys;
  constexpr int kStrip = 2 * kTileRows;
  // Each strip's chunks of keys [k0, k1) (multiples of 32).
  constexpr int kMaxStrips = (kTile.br + kStrip - 1) / kStrip;
  int k0s[kMaxStrips], k1s[kMaxStrips];
  for (int st = 0; st * kStrip < rows; ++st) {
    k0s[st] = 0, k1s[st] = kk;
    if (!col_begin) continue;
    int lo, hi;
    union_tiles(col_begin, col_end, st * kStrip, min_int(rows, (st + 1) * kStrip), kTileK, lo, hi);
    k0s[st] = lo * kTileK, k1s[st] = min_int(hi * kTileK, kk);
  }
  // Rows [i0, i1) of strip st into buffer b: split, or 0 past rows.
  auto split_strip = [&](int st, int i0, int i1, std::uint16_t* b) {
    const int r0 = st * kStrip, k0 = k0s[st], k1 = k1s[st];
    if (k0 >= k1) return;
    const float* rp[kStrip];
    const int m = min_int(kStrip, rows - r0), e = min_int(i1, m);
    for (int i = i0; i < e; ++i) rp[i - i0] = p + static_cast<std::int64_t>(r0 + i) * p_stride;
    if (e > i0)
      split_rows(rp, e - i0, n, k0, k1, b + i0 * kX3Keys, p_part, kX3Keys, col_begin ? col_begin + r0 + i0 : nullptr,
                 col_end ? col_end + r0 + i0 : nullptr);
    for (int part = 0; part < 3; ++part)
      for (int i = std::max(i0, m); i < i1; ++i) std::memset(b + part * p_part + i * kX3Keys + k0, 0, 2 * (k1 - k0));
  };
  // acc rows [r0, r0 + m), columns of block c, += out (alpha first).
  auto add_out = [&](int r0, int m, int c, const float* o) {
    const int cols = c + 1 < ct ? 2 : 1;
    float* accc = acc + static_cast<std::int64_t>(r0) * dv_pad + c * kTileCols;
    for (int r = 0; r < m; ++r) {
      const __m512 a = _mm512_set1_ps(alpha ? alpha[r0 + r] : 1.0f);
      for (int x = 0; x < cols; ++x) {
        float* dst = accc + static_cast<std::int64_t>(r) * dv_pad + x * kTileCols;
        const __m512 pv = _mm512_load_ps(o + r * 2 * kTileCols + x * kTileCols);
        _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_loadu_ps(dst), a, pv));
      }
    }
  };
  const int blocks = (ct + 1) / 2;
  split_strip(0, 0, kStrip, pp[0]);
  alignas(64) static constexpr float kZeros[2 * kTileRows * 2 * kTileCols] = {};
  const TileScope tiles;
  // The block whose results wait in out[pending & 1] (-1: none), its strip.
  int pending = -1, pending_r0 = 0, pending_c = 0, pending_m = 0, stored = 0;
  for (int r0 = 0, strip = 0; r0 < rows; r0 += kStrip, ++strip) {
    const int m = min_int(kStrip, rows - r0);
    const bool two_rows = m > kTileRows, more = r0 + kStrip < rows;
    const int k0 = k0s[strip], len = k1s[strip] - k0;
    const std::uint16_t* cur = pp[strip & 1] + k0;
    std::uint16_t* next = pp[(strip + 1) & 1];
    if (len <= 0) {
      // No key of this tile for these rows: acc·alpha only.
      for (int bi = 0; bi < blocks; ++bi) add_out(r0, m, 2 * bi, kZeros);
      if (more) split_strip(strip + 1, 0, kStrip, next);
      continue;
    }
    for (int bi = 0; bi < blocks; ++bi) {
      const int c = 2 * bi;
      const std::uint16_t* vc = v3 + 2 * c * kTileCols + static_cast<std::int64_t>(k0) * dv_pad;
      const bool two_cols = c + 1 < ct;
      if (two_rows && two_cols) x3_products<2, 2>(cur, p_part, p_stride_b, p_row16, vc, v_part, v_stride, dv_pad, len);
      else if (two_rows) x3_products<2, 1>(cur, p_part, p_stride_b, p_row16, vc, v_part, v_stride, dv_pad, len);
      else if (two_cols) x3_products<1, 2>(cur, p_part, p_stride_b, p_row16, vc, v_part, v_stride, dv_pad, len);
      else x3_products<1, 1>(cur, p_part, p_stride_b, p_row16, vc, v_part, v_stride, dv_pad, len);
      // Meanwhile: the previous block into acc, a share of the next strip.
      if (pending >= 0) add_out(pending_r0, pending_m, pending_c, out[pending & 1]);
      if (more) split_strip(strip + 1, bi * kStrip / blocks, (bi + 1) * kStrip / blocks, next);
      float* o = out[stored & 1];
      float* o1 = o + kTileRows * 2 * kTileCols;
      _tile_stored(0, o, out_stride);
      if (two_cols) _tile_stored(1, o + kTileCols, out_stride);
      if (two_rows) _tile_stored(2, o1, out_stride);
      if (two_rows && two_cols) _tile_stored(3, o1 + kTileCols, out_stride);
      pending = stored++;
      pending_r0 = r0, pending_c = c, pending_m = m;
    }
  }
  if (pending >= 0) add_out(pending_r0, pending_m, pending_c, out[pending & 1]);
}

}  // namespace sdpa::cpu::amx

namespace sdpa::cpu {

void attn_bf16_16x16_amx(KernelSet& ks) {
  amx::fill_kernel_set(ks);
  ks.pack_kt = amx::pack_kt;
  ks.dropout = amx::dropout_avx512;
  ks.pack_q_bf16 = amx::pack_q_bf16;
  ks.pack_kt_bf16 = amx::pack_kt_bf16;
  ks.scores_bf16 = amx::scores_bf16;
  ks.pack_v_bf16 = amx::pack_v_bf16;
  ks.pv_bf16 = amx::pv_bf16;
  ks.bf16_kpad = amx::kBf16KPad;
  ks.bf16_rpad = amx::kBf16RPad;
  ks.bf16_fast = true;
  ks.pack_q_x3 = amx::pack_q_x3;
  ks.pack_kt_x3 = amx::pack_kt_x3;
  ks.scores_x3 = amx::scores_x3;
  ks.pack_v_x3 = amx::pack_v_x3;
  ks.pv_x3 = amx::pv_x3;
  ks.x3_pv_work = amx::kPvX3Work;
}

}  // namespace sdpa::cpu
