// The plain BLAS attention baseline: materialise S = scale * Q·Kᵀ per head
// with sgemm, mask, softmax each row, then O = P·V with sgemm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sdpa::bench {

// Bytes of scratch one call needs (one Nq x Nkv float matrix, reused per head).
std::size_t blas_attention_scratch_bytes(std::int64_t n_q, std::int64_t n_kv);

// Attention over contiguous row-major tensors:
//   q [b, h, n_q, d], k [b, h_kv, n_kv, d], v [b, h_kv, n_kv, dv], o [b, h, n_q, dv].
// Query head hq reads KV head hq / (h / h_kv) (h must be a multiple of h_kv).
// causal: key j is visible to query i iff j <= i + n_kv - n_q (bottom-right
// aligned); a query with no visible key gets an output of 0.
// threads: OpenBLAS threads for the two GEMMs and std::threads for the
// softmax (<= 0: one per hardware thread). scratch is grown as needed and may
// be reused across calls. Throws std::invalid_argument on bad shapes.
void blas_attention(const float* q, const float* k, const float* v, float* o, std::int64_t b,
                    std::int64_t h, std::int64_t h_kv, std::int64_t n_q, std::int64_t n_kv,
                    std::int64_t d, std::int64_t dv, float scale, bool causal, int threads,
                    std::vector<float>& scratch);

}  // namespace sdpa::bench
