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

  // Query i of batch entry b sits at position p = i + offset(b).
  std::int64_t offset = 0;           // from Options::align
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

  static std::int64_t read_int(const Broadcast& t, std::int64_t b) {
    const void* at = static_cast<const char*>(t.data) + b * t.stride_b * static_cast<std::int64_t>(dtype_size(t.dtype));
    return t.dtype == DType::i64 ? *static_cast<const std::int64_t*>(at) : *static_cast<const std::int32_t*>(at);
  }

  // Position of query i of batch entry b.
  std::int64_t position(std::int64_t b, std::int64_t i) const {
    return i + (position_offsets.data ? read_int(position_offsets, b) : offset);
  }

  // Keys of batch entry b that are not padding: [0, key_end(b)).
  std::int64_t key_end(std::int64_t b) const { return key_lengths.data ? read_int(key_lengths, b) : n_kv; }

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
