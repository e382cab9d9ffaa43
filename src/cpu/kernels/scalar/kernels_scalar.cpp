// Scalar kernels: the portable reference the SIMD kernels are measured
// against, built for the baseline ISA.
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/vec_scalar.h"

namespace sdpa::cpu::scalar {

inline constexpr int MR = 4;
inline constexpr int NV = 2;

#include "cpu/kernels/tile_kernels.inl"

}  // namespace sdpa::cpu::scalar

namespace sdpa::cpu {

void init_kernels_scalar(KernelSet& ks) {
  scalar::fill_kernel_set(ks);
}

}  // namespace sdpa::cpu
