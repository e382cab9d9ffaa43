// attn_f32_4x2_scalar: the portable reference the SIMD kernels are measured
// against (4x2 register blocks; sizes from kernels.def), built for the
// baseline ISA.
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/vec_scalar.h"

namespace sdpa::cpu::scalar {

inline constexpr KernelTile kTile = tiles::attn_f32_4x2_scalar;
static_assert(kTile.w == W, "kernels.def's W for attn_f32_4x2_scalar must match vec_scalar.h");
inline constexpr int MR = kTile.mr;
inline constexpr int NV = kTile.nv;

#include "cpu/kernels/tile_kernels.inl"

}  // namespace sdpa::cpu::scalar

namespace sdpa::cpu {

void attn_f32_4x2_scalar(KernelSet& ks) {
  scalar::fill_kernel_set(ks);
}

}  // namespace sdpa::cpu
