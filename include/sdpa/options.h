// Options: everything a caller may ask of one attention call. The same struct
// flows from the public call to the kernels (they read it through the
// validated Params, see src/params.h); features add members here, never
// extra function arguments.
#pragma once

#include <cstdint>
#include <optional>

#include "sdpa/tensor_view.h"

namespace sdpa {

// Instruction sets with a kernel. `automatic` picks the best one the CPU and OS
// support; naming one the CPU lacks is an error. The SDPA_ISA environment
// variable (scalar|avx2) overrides `automatic`.
enum class Isa : std::uint8_t { automatic, scalar, avx2, avx512, neon };

// Largest probability matrix P (elements, B*H*Nq*Nkv) the library will fill:
// 2^28 elements, 1 GiB of float32. P exists for inspection and teaching; the
// attention itself never materialises it.
inline constexpr std::int64_t kMaxProbsElements = std::int64_t{1} << 28;

struct Options {
  // Multiplies Q·Kᵀ before the softmax. Unset means 1/sqrt(d), d = head size of Q and K.
  // Must be finite and > 0.
  std::optional<double> scale;

  // Causal masking aligned to the bottom-right corner: key j is visible to
  // query i iff j <= i + (Nkv - Nq). With Nq == Nkv this is the usual lower
  // triangle; with Nq < Nkv (a query block at the end of a KV cache) the last
  // query sees every key; with Nq > Nkv the first Nq - Nkv queries see no key
  // (their output is 0 and their lse is -inf).
  bool causal = false;

  // Worker threads: 0 = one per hardware thread. Results are bitwise identical
  // for every thread count.
  int threads = 0;

  // Kernel instruction set (see Isa).
  Isa isa = Isa::automatic;

  // Optional outputs; leave unset when not wanted.
  // lse [B, H, Nq]: natural log of sum_j exp(scale * q_i·k_j) over the visible keys j
  //                 (-inf for a query with no visible key).
  // probs [B, H, Nq, Nkv]: the softmax probabilities (0 at invisible keys), last axis
  //                 contiguous, at most kMaxProbsElements elements.
  TensorView lse;
  TensorView probs;
};

}  // namespace sdpa
