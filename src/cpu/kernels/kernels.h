// Declarations stamped from kernels.def: one init_kernels_<ns>() per ISA fills
// a KernelSet's function pointers (sizes come from kernels.def itself).
#pragma once

#include "cpu/kernels/kernel_set.h"

namespace sdpa::cpu {

#define SDPA_KERNEL(isa, ns, br, bc) void init_kernels_##ns(KernelSet& ks);
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL

}  // namespace sdpa::cpu
