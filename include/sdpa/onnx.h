// The ONNX `Attention` operator (ai.onnx, opsets 23, 24 and 25) on top of
// sdpa::attention.
//
//   sdpa::onnx::AttentionInputs in;
//   in.Q = sdpa::TensorView::contiguous(q, {B, Sq, Hq * D});      // 3-D: q_num_heads required
//   in.K = sdpa::TensorView::contiguous(k, {B, Skv, Hkv * D});
//   in.V = sdpa::TensorView::contiguous(v, {B, Skv, Hkv * Dv});
//   sdpa::onnx::AttentionAttributes attr;
//   attr.q_num_heads = Hq;
//   attr.kv_num_heads = Hkv;
//   attr.is_causal = 1;
//   sdpa::onnx::AttentionOutputs out;
//   sdpa::onnx::attention(in, attr, out);   // out.Y: float32 [B, Sq, Hq * Dv]
//
// Inputs and attributes carry ONNX's names and meanings (see the operator's
// specification); every check throws sdpa::Error naming the ONNX input or
// attribute, and a rejected call leaves `out` unchanged. What the operator
// shares with sdpa::attention (shapes, scale, softcap, windows, mask
// broadcasting, nonpad_kv_seqlen's values) is checked there, once, and comes
// back under the ONNX name with the library's wording ("K: expected head size
// d=8 (from q), got 6 in [2, 2, 5, 6]").
//
// Types. Q, K and past_key share one type T1 and V and past_value one type T2,
// each float16, bfloat16, float32 or float64; Y and qk_matmul_output are T1,
// present_key T1, present_value T2. The fast path computes in float32 and the
// reference path (reference = true) in float64, from the values as stored:
// float16, bfloat16 and float32 inputs (float64 too on the reference path) are
// read in place through strided views, without copies, and Y is written in
// T1 directly; float64 on the fast path is converted to float32. past_key /
// past_value and the new keys are concatenated into present_key /
// present_value in their own types, and the call reads those.
// softmax_precision is accepted and checked, and the softmax is always computed
// at float32 (fast) or float64 (reference) precision, never lower.
//
// attn_mask: bool (true = may attend) or numeric (added to the scores; -inf
// disables a key); float16 and float32 masks are read in place, other numeric
// types are converted to float32. It broadcasts from the right against
// (B, q_num_heads, Sq, T), T = past length + Skv. From opset 24 its last axis may
// be shorter than T and is then padded with -inf (false); as in ONNX's
// reference implementation a last axis of 1 with T > 1 counts as short, not as
// broadcast, at opset 24 and later. At opset 23 the last axis must be T or 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "sdpa/error.h"
#include "sdpa/export.h"
#include "sdpa/tensor_view.h"

namespace sdpa::onnx {

// The optional inputs are absent when their view is unset (rank 0).
struct AttentionInputs {
  // (B, q_num_heads, Sq, D) or (B, Sq, q_num_heads·D); any strides, last axis contiguous
  // for in-place reads (otherwise a copy is made, in the same type).
  TensorView Q;
  // (B, kv_num_heads, Skv, D) or (B, Skv, kv_num_heads·D), same rank as Q.
  TensorView K;
  // (B, kv_num_heads, Skv, Dv) or (B, Skv, kv_num_heads·Dv), same rank as Q.
  TensorView V;
  // Rank 1..4, broadcastable to (B, q_num_heads, Sq, T); bool or numeric.
  TensorView attn_mask;
  // (B, kv_num_heads, P, D) and (B, kv_num_heads, P, Dv): both or neither.
  TensorView past_key, past_value;
  // int64 (B,): valid keys per batch entry (opset >= 24; not with past_key).
  TensorView nonpad_kv_seqlen;
};

// ONNX attributes; an unset optional is an attribute the node does not carry.
struct AttentionAttributes {
  std::int64_t opset = 24;                        // 23, 24 or 25
  std::int64_t is_causal = 0;                     // 0 or 1
  std::optional<float> scale;                     // default 1/sqrt(D); must be finite and > 0
  float softcap = 0.0f;                           // 0 = off, else > 0
  std::optional<std::int64_t> q_num_heads;        // required for 3-D inputs
  std::optional<std::int64_t> kv_num_heads;       // required for 3-D inputs
  std::optional<std::int64_t> softmax_precision;  // 1 (FLOAT), 10 (FLOAT16), 11 (DOUBLE), 16 (BFLOAT16)
  std::int64_t qk_matmul_output_mode = 0;         // 0..3
  std::int64_t left_window_size = -1;             // opset 25: -1 or >= 0
  std::int64_t right_window_size = -1;            // opset 25: -1 or >= 0
};

// An owned C-order tensor: an output of attention().
struct SDPA_API Tensor {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;  // empty: not produced
  std::vector<std::byte> data;      // numel() * dtype_size(dtype) bytes

  bool produced() const { return !shape.empty(); }
  std::int64_t numel() const;
  // A C-order view of the data (rank 3 or 4 here).
  TensorView view() const;
};

struct AttentionOutputs {
  // Which optional outputs to produce; Y always is.
  bool want_present_key = false;
  bool want_present_value = false;
  bool want_qk_matmul_output = false;

  // Filled by attention(): Y with Q's rank, (B, q_num_heads, Sq, Dv) or
  // (B, Sq, q_num_heads·Dv); present_key (B, kv_num_heads, T, D); present_value
  // (B, kv_num_heads, T, Dv); qk_matmul_output (B, q_num_heads, Sq, T), at
  // qk_matmul_output_mode: 0 = scale·QKᵀ, 1 = after the softcap, 2 = after the
  // mask and causal bias (-inf where a key is disallowed), 3 = the softmax
  // (zero rows where every key is disallowed). Outputs not wanted are left empty.
  Tensor Y, present_key, present_value, qk_matmul_output;
};

// Runs the operator. reference = true uses sdpa::reference_attention (float64).
// Throws sdpa::Error naming the ONNX input, output or attribute at fault.
SDPA_API void attention(const AttentionInputs& in, const AttentionAttributes& attr, AttentionOutputs& out,
               bool reference = false);

}  // namespace sdpa::onnx
