// attn_f32_6x16_avx2: AVX2+FMA kernels (8 float lanes, 6x16 register blocks;
// sizes from kernels.def). This file alone is compiled with -mavx2 -mfma
// -mf16c; dispatch calls it only on CPUs (and OSes) that support those.
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/vec_avx2.h"

namespace sdpa::cpu::avx2 {

inline constexpr KernelTile kTile = tiles::attn_f32_6x16_avx2;
static_assert(kTile.w == W, "kernels.def's W for attn_f32_6x16_avx2 must match vec_avx2.h");
inline constexpr int MR = kTile.mr;
inline constexpr int NV = kTile.nv;

#include "cpu/kernels/tile_kernels.inl"

#include "cpu/kernels/pack_kt_avx2.inl"
#include "cpu/kernels/dropout_avx2.inl"

}  // namespace sdpa::cpu::avx2

namespace sdpa::cpu {

void attn_f32_6x16_avx2(KernelSet& ks) {
  avx2::fill_kernel_set(ks);
  ks.pack_kt = avx2::pack_kt;
  ks.dropout = avx2::dropout_avx2;
}

}  // namespace sdpa::cpu
