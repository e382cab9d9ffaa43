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
}

}  // namespace sdpa::cpu
