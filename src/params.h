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

struct Params {
  Operand q, k, v, o;   // Q [B,H,Nq,d], K [B,Hkv,Nkv,d], V [B,Hkv,Nkv,dv], O [B,H,Nq,dv]
  Operand lse;          // [B,H,Nq] (stride_n is the stride along Nq), or data == nullptr
  Operand probs;        // [B,H,Nq,Nkv], or data == nullptr

  std::int64_t b = 0, h = 0, h_kv = 0, n_q = 0, n_kv = 0, d = 0, dv = 0;
  std::int64_t group = 1;  // H / Hkv: query head h reads K/V head h / group

  double scale = 1.0;      // finite, > 0

  // Causal: key j is visible to query i iff j <= i + causal_offset.
  bool causal = false;
  std::int64_t causal_offset = 0;  // Nkv - Nq (bottom-right alignment)

  int threads = 1;         // >= 1, resolved from Options::threads
  Isa isa = Isa::scalar;   // resolved; never Isa::automatic

  // Last visible key for query i, plus one (0 when none is visible), in [0, Nkv].
  std::int64_t visible_end(std::int64_t i) const {
    if (!causal) return n_kv;
    const std::int64_t e = i + causal_offset + 1;
    return e < 0 ? 0 : (e > n_kv ? n_kv : e);
  }
};

enum class Path : std::uint8_t { fast, reference };

// Checks every invariant of the call and builds Params. Throws sdpa::Error,
// naming the argument, what was expected and what was given.
Params make_params(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                   const Options& opt, Path path);

}  // namespace sdpa
