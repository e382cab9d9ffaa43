// Serving-shaped attention: packed variable-length batches, a KV cache that
// grows in place, and paged KV caches. Every call takes the same Options as
// sdpa::attention (masks and modifiers apply per sequence, see below), runs the
// same fast path (split-KV decode included) and is checked against the same
// float64 oracle when `reference` is true.
#pragma once

#include <cstdint>

#include "sdpa/export.h"
#include "sdpa/options.h"
#include "sdpa/tensor_view.h"

namespace sdpa {

// Packed variable-length batch (FlashAttention's varlen call). Sequence s uses
// query rows cu_seqlens_q[s] .. cu_seqlens_q[s+1] and key rows
// cu_seqlens_k[s] .. cu_seqlens_k[s+1]; no work is done for padding.
//   q [total_q, H, d]   k [total_k, Hkv, d]   v [total_k, Hkv, dv]   o [total_q, H, dv]
//   cu_seqlens_q, cu_seqlens_k: int32 or int64 [n + 1], starting at 0, non-decreasing.
//   max_seqlen_q/k: optional (-1); when given, every sequence must fit.
// Causal, window and ALiBi are aligned per sequence (bottom-right unless
// opt.align says top_left); opt.lse, if set, is [H, total_q]. Explicit masks,
// probs, scores, position_offsets and key_lengths are not available here.
SDPA_API void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                      const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k, const Options& opt = {},
                      std::int64_t max_seqlen_q = -1, std::int64_t max_seqlen_k = -1, bool reference = false);

// KV cache append + attend (FlashAttention's with_kvcache), in one call. The
// caller owns the caches; sequence b holds cache_seqlens[b] keys.
//   q [B, H, Nq, d]   k_cache [B, Hkv, capacity, d]   v_cache [B, Hkv, capacity, dv]   o [B, H, Nq, dv]
//   cache_seqlens: int32 or int64 [B]
//   k_new [B, Hkv, n_new, d], v_new [B, Hkv, n_new, dv]: optional (unset: nothing is appended);
//     written at positions cache_seqlens[b] .. cache_seqlens[b] + n_new - 1 (cache_seqlens itself
//     is not changed: the caller advances it).
// The queries then attend to the first cache_seqlens[b] + n_new keys, aligned
// bottom-right per sequence (query Nq-1 sits at the last key). A call that
// would overflow the capacity, or is otherwise bad, throws before anything is written.
// opt.key_lengths is not available (cache_seqlens gives the lengths); opt.mask,
// probs and scores span Nkv = capacity, and columns past the longest sequence
// are not written.
SDPA_API void attention_kvcache(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                       const TensorView& cache_seqlens, const TensorView& k_new, const TensorView& v_new,
                       const TensorView& o, const Options& opt = {}, bool reference = false);

// Paged KV cache (vLLM / FlashAttention block_table): as attention_kvcache, with
// keys stored in fixed-size pages shared by all sequences.
//   k_pages [num_pages, page_size, Hkv, d]   v_pages [num_pages, page_size, Hkv, dv]  (any page_size >= 1)
//   block_table: int32 or int64 [B, max_pages]: key j of sequence b is row j % page_size of page
//     block_table[b, j / page_size]; every entry a sequence uses must be in [0, num_pages)
//     (the entries past its keys are never read).
// opt.mask, probs and scores are not available with pages.
SDPA_API void attention_paged(const TensorView& q, const TensorView& k_pages, const TensorView& v_pages,
                     const TensorView& block_table, const TensorView& cache_seqlens, const TensorView& k_new,
                     const TensorView& v_new, const TensorView& o, const Options& opt = {}, bool reference = false);

// Quantises x (float32, float64, float16 or bfloat16 [..., X], rank 1..4, any
// strides, last axis contiguous) into int8 values [..., X] and scales
// (float32 or float16) [..., X / G]: each group of G consecutive values of a
// row gets scale = max|x| / 127 (rounded to the scale's dtype) and values
// round(x / scale) in [-127, 127] (round half to even); an all-zero group gets
// scale 0. A group holding NaN or ±inf gets a NaN scale, so it reads back as
// NaN rather than as a finite number. This is how appending to an int8 cache
// quantises.
SDPA_API void quantize_int8(const TensorView& x, const TensorView& values, const TensorView& scales);

}  // namespace sdpa
