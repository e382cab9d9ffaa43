// Stamped from kernels.def: one function per kernel set, named like it, that
// fills a KernelSet's function pointers (dispatch fills the sizes from
// kernels.def itself), and each set's sizes as constants, which its
// translation unit compiles its register blocking from.
#pragma once

#include "cpu/kernels/kernel_set.h"

namespace sdpa::cpu {

// One kernel set's sizes, as the columns of kernels.def.
struct KernelTile {
  int w;   // float lanes per vector
  int mr;  // microkernel rows
  int nv;  // vectors per microkernel row
  int nr;  // microkernel columns, nv * w
  int br;  // query rows per block
  int bc;  // keys per tile
};

namespace tiles {
#define SDPA_KERNEL(isa, name, ns, w, mr, nv, br, bc) inline constexpr KernelTile name{w, mr, nv, (nv) * (w), br, bc};
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
}  // namespace tiles

// The invariants kernels.def states (MR's is in tile_kernels.inl, next to the
// code that relies on it). BC % NR: the driver allocates Kt and S for BC
// columns and pads a tile's n <= BC keys to a multiple of NR, which stays
// <= BC only then; NR = NV*W keeps every bc_pad a whole number of vectors.
#define SDPA_KERNEL(isa, name, ns, w, mr, nv, br, bc)                                           \
  static_assert((br) > 0 && (bc) > 0 && (w) > 0 && (nv) > 0, #name ": sizes must be positive"); \
  static_assert((bc) % ((nv) * (w)) == 0, #name ": BC must be a multiple of NR = NV*W");
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL

#define SDPA_KERNEL(isa, name, ns, w, mr, nv, br, bc) void name(KernelSet& ks);
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL

}  // namespace sdpa::cpu
