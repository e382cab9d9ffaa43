// Params: the validated form of one attention call, filled once by
// make_params() at the API boundary and read-only afterwards. The reference
// oracle and every kernel read the same struct; nothing below the API
// re-checks what is recorded here.
#pragma once

#include <cstdint>

#include "sdpa/options.h"
#include "sdpa/tensor_view.h"

namespace sdpa {

// One operand of rank <= 4 whose last axis is contiguous. Strides are in
// elements; for a 4-D operand [B, H, N, X] they are (b, h, n); lse [B, H, Nq]
// uses (b, h, n) with the last axis being n.
struct Operand {
  void* data = nullptr;  // nullptr: an optional output that is not wanted
  DType dtype = DType::f32;
  std::int64_t stride_b = 0, stride_h = 0, stride_n = 0;

  template <class T>
  T* at(std::int64_t b, std::int64_t h, std::int64_t n) const {
    return static_cast<T*>(data) + b * stride_b + h * stride_h + n * stride_n;
  }
};

// An optional broadcast operand read through strides (0 on broadcast axes).
struct Broadcast {
  const void* data = nullptr;  // nullptr: absent
  DType dtype = DType::f32;
  std::int64_t stride_b = 0, stride_h = 0, stride_i = 0, stride_j = 0;
};

struct Params {
  Operand q, k, v, o;   // Q [B,H,Nq,d], K [B,Hkv,Nkv,d], V [B,Hkv,Nkv,dv], O [B,H,Nq,dv]
  Operand lse;          // [B,H,Nq] (stride_n is the stride along Nq), or data == nullptr
  Operand probs;        // [B,H,Nq,Nkv], or data == nullptr

  std::int64_t b = 0, h = 0, h_kv = 0, n_q = 0, n_kv = 0, d = 0, dv = 0;
  std::int64_t group = 1;  // H / Hkv: query head h reads K/V head h / group

  double scale = 1.0;      // finite, > 0

  // Variable-length (packed) batches: batch entry b is sequence b, with query
  // rows cu_q[b] .. cu_q[b+1] of Q, O and lse, and key rows cu_k[b] .. cu_k[b+1]
  // of K and V (whose stride_b is then 0). nullptr: every batch entry has n_q
  // queries and n_kv keys; n_q and n_kv are then the largest lengths.
  const std::int64_t* cu_q = nullptr;
  const std::int64_t* cu_k = nullptr;

  // Paged K/V: key j of batch entry b is row j % page_size of page
  // page_table[b, j / page_size]; k.stride_b and v.stride_b are then the page strides.
  Broadcast page_table;  // int32 or int64 [B, max_pages] (stride_b, stride_j), or absent
  std::int64_t page_size = 0;

  // Query i of batch entry b sits at position p = i + offset(b).
  bool bottom_right = true;          // from Options::align
  Broadcast position_offsets;        // [B] int32/int64 (stride_b), or absent
  Broadcast key_lengths;             // [B] int32/int64 (stride_b), or absent
  bool causal = false;               // key j visible iff j <= p
  std::int64_t window_left = -1;     // key j visible iff p - left <= j (left >= 0)
  std::int64_t window_right = -1;    // and j <= p + right (right >= 0)
  Broadcast mask;                    // bool / f32 / f16 (f64 for the oracle) [B, H, Nq, Nkv]
  Broadcast alibi;                   // f32 slopes (stride_b, stride_h)
  Broadcast sinks;                   // f32 (stride_h)
  double softcap = 0;                // > 0: s <- c·tanh(s/c)
  Operand scores;                    // [B, H, Nq, Nkv] output at scores_stage, or data == nullptr
  ScoresStage scores_stage = ScoresStage::scaled;

  int threads = 1;         // >= 1, resolved from Options::threads
  Isa isa = Isa::scalar;   // resolved; never Isa::automatic

  static std::int64_t read_int(const Broadcast& t, std::int64_t b, std::int64_t j = 0) {
    const void* at = static_cast<const char*>(t.data) +
                     (b * t.stride_b + j * t.stride_j) * static_cast<std::int64_t>(dtype_size(t.dtype));
    return t.dtype == DType::i64 ? *static_cast<const std::int64_t*>(at) : *static_cast<const std::int32_t*>(at);
  }

  // Queries and keys of batch entry b.
  std::int64_t nq(std::int64_t b) const { return cu_q ? cu_q[b + 1] - cu_q[b] : n_q; }
  std::int64_t nkv(std::int64_t b) const { return cu_k ? cu_k[b + 1] - cu_k[b] : n_kv; }
  // Row of query i of batch entry b in Q, O and lse (their stride_b is 0 when packed).
  std::int64_t q_row(std::int64_t b, std::int64_t i) const { return cu_q ? cu_q[b] + i : i; }

  // Key row j of head hk of batch entry b in K or V (contiguous or paged).
  template <class T>
  T* kv_row(const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j) const {
    if (!page_table.data) return t.at<T>(b, hk, cu_k ? cu_k[b] + j : j);
    const std::int64_t page = read_int(page_table, b, j / page_size);
    return t.at<T>(page, hk, j % page_size);
  }
  // Whether key rows [j, j + n) are evenly strided (one page, or not paged).
  bool kv_rows_strided(std::int64_t j, std::int64_t n) const {
    return !page_table.data || n <= 0 || j / page_size == (j + n - 1) / page_size;
  }

  // Position of query i of batch entry b.
  std::int64_t offset(std::int64_t b) const {
    if (position_offsets.data) return read_int(position_offsets, b);
    return bottom_right ? nkv(b) - nq(b) : 0;
  }
  std::int64_t position(std::int64_t b, std::int64_t i) const { return i + offset(b); }

  // Keys of batch entry b that are not padding: [0, key_end(b)).
  std::int64_t key_end(std::int64_t b) const { return key_lengths.data ? read_int(key_lengths, b) : nkv(b); }

  // The keys query i of batch entry b may see before any explicit mask: one
  // interval [lo, hi) (causal, window and key padding all cut intervals), empty when lo >= hi.
  struct Range {
    std::int64_t lo, hi;
  };
  Range visible(std::int64_t b, std::int64_t i) const {
    const std::int64_t p = position(b, i);
    std::int64_t lo = 0, hi = key_end(b);
    if (causal && p + 1 < hi) hi = p + 1;
    if (window_right >= 0 && p + window_right + 1 < hi) hi = p + window_right + 1;
    if (window_left >= 0 && p - window_left > lo) lo = p - window_left;
    if (hi < 0) hi = 0;
    if (lo > hi) lo = hi;
    return {lo, hi};
  }

  bool has_score_mods() const { return mask.data || alibi.data || softcap > 0; }
};

enum class Path : std::uint8_t { fast, reference };

// Checks every invariant of the call and builds Params. Throws sdpa::Error,
// naming the argument, what was expected and what was given.
Params make_params(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                   const Options& opt, Path path);

}  // namespace sdpa
