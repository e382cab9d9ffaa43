// Options: everything a caller may ask of one attention call. The same struct
// flows from the public call to the kernels (they read it through the
// validated Params, see src/params.h); features add members here, never
// extra function arguments.
#pragma once

#include <cstdint>
#include <optional>

#include "sdpa/tensor_view.h"

namespace sdpa {

// Where query i sits among the keys: at position p = i + offset.
//   bottom_right: offset = Nkv - Nq (the last query is aligned with the last key;
//                 FlashAttention's and ONNX-with-a-cache convention; the default)
//   top_left:     offset = 0 (PyTorch's is_causal)
// Options::position_offsets, when set, gives the offset per batch entry instead.
enum class Align : std::uint8_t { bottom_right, top_left };

// What Options::scores receives (the stages of ONNX Attention's qk_matmul_output_mode).
enum class ScoresStage : std::uint8_t {
  scaled = 0,       // scale * q·k
  softcapped = 1,   // after the softcap (equal to `scaled` without one)
  masked = 2,       // after adding the float mask and ALiBi bias; -inf where a key is not visible
  probabilities = 3 // the softmax itself (0 at invisible keys, rows of 0 where nothing is visible)
};

// Instruction sets with a kernel. `automatic` picks the best one the CPU and OS
// support; naming one the CPU lacks is an error. The SDPA_ISA environment
// variable (auto|scalar|avx2|avx512|avx512bf16|amx) overrides `automatic`.
// avx512bf16 runs the avx512 float32 kernels and adds bfloat16 dot products
// (AVX512-BF16); amx runs the same float32 kernels and the bfloat16 products
// on AMX-BF16 tiles. New values are appended, so existing ones keep their numbers.
enum class Isa : std::uint8_t { automatic, scalar, avx2, avx512, neon, avx512bf16, amx };

// Largest probability matrix P (elements, B*H*Nq*Nkv) the library will fill:
// 2^28 elements, 1 GiB of float32. P exists for inspection and teaching; the
// attention itself never materialises it.
inline constexpr std::int64_t kMaxProbsElements = std::int64_t{1} << 28;

struct Options {
  // Multiplies Q·Kᵀ before the softmax. Unset means 1/sqrt(d), d = head size of Q and K.
  // Must be finite and > 0.
  std::optional<double> scale;

  // Causal masking: key j is visible to query i iff j <= p, p = i + offset (see
  // Align; bottom-right by default, so j <= i + (Nkv - Nq)). With Nq == Nkv this
  // is the usual lower triangle; with Nq < Nkv (a query block at the end of a KV
  // cache) the last query sees every key; with Nq > Nkv the first Nq - Nkv
  // queries see no key (their output is 0 and their lse is -inf).
  bool causal = false;

  // Alignment of queries against keys, for causal, window and ALiBi.
  Align align = Align::bottom_right;
  // Optional [B] int32 or int64: the offset of batch entry b (overrides align).
  TensorView position_offsets;
  // Optional [B] int32 or int64 in [0, Nkv]: keys j >= key_lengths[b] are
  // padding, invisible to every query of batch entry b.
  TensorView key_lengths;

  // Sliding window: query at position p sees keys p - window_left <= j <= p + window_right;
  // -1 = unbounded on that side (FlashAttention's window_size). Tiles wholly
  // outside the window are skipped, so cost grows with N·window, not N².
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;

  // Optional explicit mask, broadcastable to [B, H, Nq, Nkv] by NumPy rules
  // (rank 1..4, aligned from the right, each axis 1 or full size; read through
  // strides, zero for broadcast axes, never expanded). bool: true = may attend.
  // float32/float16: added to the scaled (and softcapped) scores; -inf disables a key.
  TensorView mask;

  // Optional ALiBi slopes, float32 [H] or [B, H]: bias -slope·|p - j| is added
  // to the score of key j for a query at position p (generated on the fly).
  TensorView alibi_slopes;

  // Softcap c > 0: s <- c·tanh(s / c) on the scaled score, before masks and
  // biases (so -inf stays -inf). 0 = off.
  double softcap = 0.0;

  // Optional attention sinks, float32 [H]: a per-head logit that joins the
  // softmax's denominator as an extra key whose value is zero. lse includes it.
  TensorView sinks;

  // Dropout on the attention probabilities (training). Each probability
  // P[b, h, i, j] is kept with probability 1 - dropout_p and scaled by
  // 1 / (1 - dropout_p), or zeroed: O = (P ∘ Z) · V. Whether key j is kept for
  // query i of (b, h) is sdpa::dropout_keep (sdpa/dropout.h), a Philox-4x32-10
  // function of (dropout_seed, dropout_offset, b, h, i, j): it does not depend
  // on tiling, ISA or thread count, and the backward regenerates it. A training
  // step advances dropout_offset (by 1 is enough: every (seed, offset) pair is
  // its own stream). lse and probs are those of the softmax before dropout.
  // With packed sequences, b is the sequence and i, j count within it.
  double dropout_p = 0.0;             // in [0, 1); 0 = off
  std::uint64_t dropout_seed = 0;
  std::uint64_t dropout_offset = 0;   // < 2^32
  // Optional output, bool [B, H, Nq, Nkv] (last axis contiguous, at most
  // kMaxProbsElements elements): the keep decision of every (i, j), visible or
  // not (1 = kept). With a KV cache (Nkv = capacity), as for probs, columns
  // past the longest sequence are not written. Written by the forward pass only.
  TensorView dropout_mask;

  // Storage. Q, K, V and O may each be float32, float16 or bfloat16 (mixed
  // freely, e.g. 16-bit K/V with float32 Q), read and written in place; the
  // fast path computes in float32 from the values as stored. lse, probs and
  // scores stay float32.
  //
  // int8 K/V (a quantised KV cache, DType::i8): K and V hold int8 values and
  // k_scales / v_scales their scales, float32 or float16, in the layout of K
  // and V with the last axis d / G (dv / G for V): element c of a row is
  // value[c] * scale[c / G], G values per scale (G = d / k_scales' last size,
  // e.g. 32 or 64). Appending k_new / v_new (float32/float16/bfloat16) to an
  // int8 cache quantises them (sdpa::quantize_int8, sdpa/serving.h). Unset
  // unless K (or V) is int8.
  TensorView k_scales;
  TensorView v_scales;
  // Round P to 16 bits before P·V, as FlashAttention and PyTorch do with
  // 16-bit inputs: with bfloat16 V on a CPU with AVX512-BF16 both products
  // then run on vdpbf16ps. Off: P stays float32 (the default precision policy,
  // README "16-bit storage"). Ignored unless V is float16 or bfloat16.
  bool round_p = false;

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
  // scores [B, H, Nq, Nkv]: the scores at `scores_stage` (ONNX qk_matmul_output),
  // at most kMaxProbsElements elements.
  TensorView scores;
  ScoresStage scores_stage = ScoresStage::scaled;
};

}  // namespace sdpa
