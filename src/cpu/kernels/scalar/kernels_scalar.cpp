// Scalar kernels: the portable reference the SIMD kernels are measured
// against, built for the baseline ISA.
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/vec_scalar.h"

namespace sdpa::cpu::scalar {

inline constexpr int MR = 4;

#include "cpu/kernels/tile_kernels.inl"

}  // namespace sdpa::cpu::scalar

namespace sdpa::cpu {

void init_kernels_scalar(KernelSet& ks) {
  ks.pack_kt = scalar::pack_kt_generic;
  ks.scores = scalar::scores;
  ks.scores_direct = scalar::scores_direct;
  ks.softmax_step = scalar::softmax_step;
  ks.pv = scalar::pv;
  ks.softcap = scalar::softcap;
  ks.probs = scalar::probs;
  ks.exp2 = scalar::exp2_array;
}

}  // namespace sdpa::cpu
