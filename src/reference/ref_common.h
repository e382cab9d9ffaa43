// What the float64 forward oracle (attention_ref.cpp) and its backward
// (backward_ref.cpp) share: element access, query positions, visibility, the
// explicit mask, the row maximum and the dropout stream.
//
// Everything here reads only the plain data members of Params: visibility,
// query positions and the addresses of packed and paged K/V rows are worked
// out from the definitions in sdpa/options.h and sdpa/serving.h, and not with
// the fast path's helpers (Params::visible, kv_row, ...), so an error in those
// shows up as a disagreement with the oracle.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "half.h"
#include "params.h"
#include "philox.h"

namespace sdpa::reference {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Element c of row n of operand t at (b, h), float32 or float64.
// Any float dtype, read exactly (a 16-bit value is a float32 value).
inline double load(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t c) {
  return load_element(t.data, t.dtype, b * t.stride_b + h * t.stride_h + n * t.stride_n + c);
}

// float64 outputs get x; the others x rounded to float32 and then, for a
// 16-bit output, to its type.
inline void store(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t c, double x) {
  const std::int64_t at = b * t.stride_b + h * t.stride_h + n * t.stride_n + c;
  if (t.dtype == DType::f64 || t.dtype == DType::f32) {
    store_float(t.data, t.dtype, at, x);
  } else {
    store_float(t.data, t.dtype, at, static_cast<float>(x));
  }
}

// Packed: sequence b is rows cu[b] .. cu[b+1].
inline bool packed(const Params& p) { return p.storage == KvStorage::packed; }
inline std::int64_t queries(const Params& p, std::int64_t b) { return packed(p) ? p.cu_q[b + 1] - p.cu_q[b] : p.n_q; }
inline std::int64_t keys(const Params& p, std::int64_t b) { return packed(p) ? p.cu_k[b + 1] - p.cu_k[b] : p.n_kv; }
// Row of query i of sequence b in Q, O, lse, dO and dQ.
inline std::int64_t query_row(const Params& p, std::int64_t b, std::int64_t i) { return packed(p) ? p.cu_q[b] + i : i; }

// block_table[b, e] (int32 or int64, strided).
inline std::int64_t table_entry(const Params& p, std::int64_t b, std::int64_t e) {
  const Broadcast& t = p.page_table;
  const std::int64_t at = b * t.stride_b + e * t.stride_j;
  if (t.dtype == DType::i64) return static_cast<const std::int64_t*>(t.data)[at];
  return static_cast<const std::int32_t*>(t.data)[at];
}

// Element c of key row j of head hk of sequence b (K or V): dense and cache at
// [b, hk, j]; packed at row cu_k[b] + j; paged at row j % page_size of page
// block_table[b, j / page_size].
inline double load_kv(const Params& p, const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j,
                      std::int64_t c) {
  std::int64_t outer = b, row = j;
  if (packed(p)) row = p.cu_k[b] + j;
  if (p.storage == KvStorage::paged) {
    outer = table_entry(p, b, j / p.page_size);
    row = j % p.page_size;
  }
  const std::int64_t at = outer * t.stride_b + hk * t.stride_h + row * t.stride_n + c;
  if (t.dtype != DType::i8) return load_element(t.data, t.dtype, at);
  // int8: value times its group's scale, the scales addressed like the values.
  const Operand& s = *p.scales_of(t);
  const std::int64_t g = p.group_of(t);
  const double scale = load_element(s.data, s.dtype, outer * s.stride_b + hk * s.stride_h + row * s.stride_n + c / g);
  return load_element(t.data, t.dtype, at) * scale;
}

// Offset of sequence b: position_offsets[b]; else 0 for top-left; else
// bottom-right, Nkv_b - Nq_b, where Nkv_b is the keys sequence b holds (its
// cache_seqlens + n_new with a cache).
inline std::int64_t query_offset(const Params& p, std::int64_t b) {
  if (!p.position_offsets.empty()) return p.position_offsets[b];
  if (!p.bottom_right) return 0;
  const bool cached = p.storage == KvStorage::cache || p.storage == KvStorage::paged;
  return (cached ? p.key_lengths[b] : keys(p, b)) - queries(p, b);
}

// Whether a - b <= limit, for limit >= 0 and any int64 a, b: when a > b the
// difference is below 2^64 and exact in unsigned arithmetic.
inline bool at_most_apart(std::int64_t a, std::int64_t b, std::int64_t limit) {
  return a <= b || static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b) <= static_cast<std::uint64_t>(limit);
}

// Whether key j is visible to query i of sequence b before the explicit mask,
// with p = i + off never formed (off may be any int64): j <= p is j - i <= off,
// p - left <= j is off - (j - i) <= left, and j <= p + right is (j - i) - off <= right.
inline bool key_visible(const Params& p, std::int64_t b, std::int64_t i, std::int64_t j) {
  const std::int64_t key_length = p.key_lengths.empty() ? keys(p, b) : p.key_lengths[b];
  if (j >= key_length) return false;
  const std::int64_t off = query_offset(p, b), ahead = j - i;  // 0 <= i, j: no overflow
  if (p.causal && ahead > off) return false;
  if (p.window_left >= 0 && !at_most_apart(off, ahead, p.window_left)) return false;
  if (p.window_right >= 0 && !at_most_apart(ahead, off, p.window_right)) return false;
  return true;
}

inline double element(const Broadcast& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const std::int64_t at = b * t.stride_b + h * t.stride_h + i * t.stride_i + j * t.stride_j;
  switch (t.dtype) {
    case DType::boolean: return static_cast<const bool*>(t.data)[at] ? 1.0 : 0.0;
    case DType::f16: return half_to_float(static_cast<const std::uint16_t*>(t.data)[at]);
    case DType::f64: return static_cast<const double*>(t.data)[at];
    default: return static_cast<const float*>(t.data)[at];
  }
}

// What the explicit mask does to key j: false = disabled, else `add` is its additive term.
inline bool mask_allows(const Params& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j, double& add) {
  add = 0;
  if (!p.mask.data) return true;
  const double m = element(p.mask, b, h, i, j);
  if (p.mask.dtype == DType::boolean) return m != 0;
  if (m == -kInf) return false;
  add = m;
  return true;
}

// The softmax maximum of one row: over the visible scores s[j] (vis[j] != 0,
// j < n) and the sink. NaN in a visible score is sticky (exp(x - NaN) is NaN
// for every x), so the row is NaN. A row that sees keys whose scores (and the
// sink) are all -inf has -inf from the data (Inf in K), not from masking, so
// its softmax is NaN as well: the result is NaN, not -inf. -inf means the row
// is empty (no visible key and no sink).
inline double row_max(const std::vector<double>& s, const std::vector<char>& vis, std::int64_t n, double sink) {
  double m = -kInf;
  bool seen = false;
  for (std::int64_t j = 0; j < n; ++j) {
    if (!vis[j]) continue;
    seen = true;
    if (std::isnan(s[j]))
      m = s[j];
    else if (!std::isnan(m) && s[j] > m)
      m = s[j];
  }
  if (!std::isnan(m) && sink > m) m = sink;
  if (seen && m == -kInf) m = std::nan("");
  return m;
}

// The dropout decisions of slice (b, h): keep(i, j), i and j within the sequence.
inline philox::Stream dropout_stream(const Params& p, std::int64_t b, std::int64_t h) {
  return philox::Stream(p.dropout_seed, p.dropout_offset, static_cast<std::uint64_t>(b * p.h + h), p.dropout_p);
}

}  // namespace sdpa::reference
