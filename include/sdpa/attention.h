// Scaled dot-product attention:  O = softmax(Q·Kᵀ · scale) · V.
//
// Usage (float32, [B, H, N, d] memory):
//   sdpa::Options opt;                    // scale = 1/sqrt(d), not causal
//   sdpa::attention(sdpa::TensorView::contiguous(q, {B, H, Nq, d}),
//                   sdpa::TensorView::contiguous(k, {B, Hkv, Nkv, d}),
//                   sdpa::TensorView::contiguous(v, {B, Hkv, Nkv, dv}),
//                   sdpa::TensorView::contiguous(o, {B, H, Nq, dv}), opt);
//
// Shapes and every invariant are checked here, once; a bad call throws
// sdpa::Error and writes nothing.
#pragma once

#include <string>
#include <vector>

#include "sdpa/error.h"
#include "sdpa/export.h"
#include "sdpa/options.h"
#include "sdpa/tensor_view.h"

namespace sdpa {

// The fast path: tiled, online softmax, O(N·d) memory. Q, K, V, O (and lse,
// probs) are float32.
SDPA_API void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
               const Options& opt = {});

// The float64 oracle: plain loops that materialise the scores and accumulate in
// double. Inputs may be float32 or float64; outputs float32 or float64.
// Slow (O(Nq·Nkv) memory per row block) and obviously right: tests compare the
// fast path against it.
SDPA_API void reference_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                         const Options& opt = {});

// "scalar", "avx2", ... ("automatic" for Isa::automatic).
SDPA_API const char* isa_name(Isa isa);
// Parses "auto"/"automatic", "scalar", "avx2", "avx512", "avx512bf16", "amx", "neon"; throws sdpa::Error otherwise.
SDPA_API Isa parse_isa(const std::string& name);
// Whether this CPU and OS can run the kernels of `isa`.
SDPA_API bool isa_supported(Isa isa);
// The ISA Isa::automatic resolves to (honouring SDPA_ISA).
SDPA_API Isa resolve_isa(Isa isa);
// Every ISA with a kernel in this build, best last.
SDPA_API std::vector<Isa> compiled_isas();

}  // namespace sdpa
