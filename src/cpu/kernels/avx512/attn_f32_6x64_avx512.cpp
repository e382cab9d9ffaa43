// attn_f32_6x64_avx512: AVX-512F kernels (16 float lanes, 6x64 register
// blocks: 24 of the 32 zmm registers hold accumulators; sizes from
// kernels.def). This file alone is compiled with -mavx512f; dispatch calls it
// only on CPUs (and OSes) that support it.
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/vec_avx512.h"

namespace sdpa::cpu::avx512 {

inline constexpr KernelTile kTile = tiles::attn_f32_6x64_avx512;
static_assert(kTile.w == W, "kernels.def's W for attn_f32_6x64_avx512 must match vec_avx512.h");
inline constexpr int MR = kTile.mr;
inline constexpr int NV = kTile.nv;

#include "cpu/kernels/tile_kernels.inl"
#include "cpu/kernels/pack_kt_avx2.inl"
#include "cpu/kernels/dropout_avx512.inl"

}  // namespace sdpa::cpu::avx512

namespace sdpa::cpu {

void attn_f32_6x64_avx512(KernelSet& ks) {
  avx512::fill_kernel_set(ks);
  ks.pack_kt = avx512::pack_kt;
  ks.dropout = avx512::dropout_avx512;
}

}  // namespace sdpa::cpu
