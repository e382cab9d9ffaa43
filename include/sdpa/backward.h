// The backward pass of scaled dot-product attention (training).
//
// Given the forward's inputs and Options, the O and lse it saved, and dO (the
// gradient of the loss with respect to O), writes dQ, dK, dV and, with
// attention sinks, dsinks:
//
//   sdpa::Options opt;  opt.causal = true;  opt.lse = lse_view;   // forward, saving lse
//   sdpa::attention(q, k, v, o, opt);
//   opt.lse = {};
//   sdpa::attention_backward(q, k, v, o, lse_view, d_o, {.dq = dq, .dk = dk, .dv = dv}, opt);
//
// Every forward feature is differentiated: causal (both alignments, per-batch
// offsets), windows, key padding, bool and float masks, ALiBi, softcap, sinks,
// GQA/MQA (dK and dV of a K/V head are summed over the query heads that read
// it), dv != d, custom scale, dropout (the same keep decisions as the forward,
// regenerated from the seed and offset) and packed variable-length batches.
// Not differentiated, as constants of the call: the float mask, the ALiBi
// slopes, the scale, the softcap, the offsets and lengths. Options' optional
// outputs (lse, probs, scores, dropout_mask) are not written by the backward.
//
// Memory: O(N·d) (a float32 dQ accumulator per key slice, see
// src/cpu/backward.cpp) plus per-thread working memory; no N x N buffer.
// Results are bitwise identical for every thread count.
#pragma once

#include <cstdint>

#include "sdpa/export.h"
#include "sdpa/options.h"
#include "sdpa/tensor_view.h"

namespace sdpa {

// The gradients a backward call writes. dq, dk, dv have the shapes (and
// layouts of their own choosing) of q, k, v; all three are required.
// dsinks [H] is optional and allowed only when Options::sinks is set.
struct Gradients {
  TensorView dq{}, dk{}, dv{};
  TensorView dsinks{};
};

// Fast path, float32. o [B, H, Nq, dv] and lse [B, H, Nq] as the forward wrote
// them (lse from Options::lse); d_o [B, H, Nq, dv].
SDPA_API void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                                 const TensorView& lse, const TensorView& d_o, const Gradients& grads,
                                 const Options& opt = {});

// The float64 oracle of the same call: plain loops that recompute the forward
// in double (o and lse are checked but not read) and accumulate the gradients
// in double. Inputs and outputs may be float32 or float64.
SDPA_API void reference_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                           const TensorView& o, const TensorView& lse, const TensorView& d_o,
                                           const Gradients& grads, const Options& opt = {});

// Packed variable-length batches (see attention_varlen): q, dq [total_q, H, d],
// k, dk [total_k, Hkv, d], v, dv [total_k, Hkv, dv], o, d_o [total_q, H, dv],
// lse [H, total_q].
SDPA_API void attention_varlen_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                        const TensorView& o, const TensorView& lse, const TensorView& d_o,
                                        const Gradients& grads, const TensorView& cu_seqlens_q,
                                        const TensorView& cu_seqlens_k, const Options& opt = {},
                                        std::int64_t max_seqlen_q = -1, std::int64_t max_seqlen_k = -1,
                                        bool reference = false);

}  // namespace sdpa
