// Params: the validated form of one attention call, built by make_params()
// (src/api/validate.cpp, the only code that writes one) from a Call at the API
// boundary and read-only afterwards. Every kernel reads the same struct;
// nothing below the API re-checks what is recorded here. The reference oracle
// reads only its data members and works out visibility and K/V addresses on
// its own (src/reference/attention_ref.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

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
  std::int64_t elem_bytes = 4;  // dtype_size(dtype)

  template <class T>
  T* at(std::int64_t b, std::int64_t h, std::int64_t n) const {
    return static_cast<T*>(data) + b * stride_b + h * stride_h + n * stride_n;
  }
  // The same row's address whatever the dtype (element strides times its size).
  void* addr(std::int64_t b, std::int64_t h, std::int64_t n) const {
    return static_cast<char*>(data) + (b * stride_b + h * stride_h + n * stride_n) * elem_bytes;
  }
};

// An optional broadcast operand read through strides (0 on broadcast axes).
struct Broadcast {
  const void* data = nullptr;  // nullptr: absent
  DType dtype = DType::f32;
  std::int64_t stride_b = 0, stride_h = 0, stride_i = 0, stride_j = 0;
};

// How K and V are stored (src/api/validate.cpp turns each into Params):
//   dense:  K [B, Hkv, Nkv, d], V [B, Hkv, Nkv, dv]
//   packed: K [total_k, Hkv, d], V [total_k, Hkv, dv] (and Q, O [total_q, H, X]),
//           sequence b at rows cu_seqlens_q/k[b] .. [b+1]
//   cache:  K [B, Hkv, capacity, d], V [B, Hkv, capacity, dv]; sequence b holds
//           cache_seqlens[b] keys, k_new/v_new are appended after them
//   paged:  K [num_pages, page_size, Hkv, d], V [num_pages, page_size, Hkv, dv];
//           key j of sequence b is row j % page_size of page block_table[b, j / page_size]
enum class KvStorage : std::uint8_t { dense, packed, cache, paged };

enum class Path : std::uint8_t { fast, reference };

struct Params {
  // 4-D operands, strides (b, h, n). Packed: Q, O, K, V have stride_b 0 and n is
  // the packed row. Paged: K and V have stride_b = the page stride, stride_h the
  // head stride and stride_n the row-in-page stride.
  // Q, K, V, O: float32, float16 or bfloat16 each (float64 too for the oracle);
  // K and V may be int8, with their scales in k_scale / v_scale.
  Operand q, k, v, o;   // Q [B,H,Nq,d], K [B,Hkv,Nkv,d], V [B,Hkv,Nkv,dv], O [B,H,Nq,dv]
  // int8 K (V): float32/float16 scales in K's (V's) layout, stride for stride
  // (paged: stride_b the page stride), one per k_group (v_group) values of a row.
  Operand k_scale, v_scale;
  std::int64_t k_group = 0, v_group = 0;
  bool round_p = false;  // Options::round_p, with float16/bfloat16 V
  Operand lse;          // [B,H,Nq] (stride_n is the stride along Nq), or data == nullptr
  Operand probs;        // [B,H,Nq,Nkv], or data == nullptr

  // Packed: n_q and n_kv are the longest sequence's lengths. Cache and paged:
  // n_kv is the longest key_lengths[b], not the capacity, so the plan (and the
  // bits) depend only on the lengths, whatever the storage.
  std::int64_t b = 0, h = 0, h_kv = 0, n_q = 0, n_kv = 0, d = 0, dv = 0;
  std::int64_t group = 1;  // H / Hkv: query head h reads K/V head h / group

  double scale = 1.0;      // finite, > 0

  KvStorage storage = KvStorage::dense;

  // Packed: [B + 1] prefix sums of the query and key lengths (owned, so a copy
  // of Params never dangles). Empty otherwise: every batch entry has n_q
  // queries and n_kv keys.
  std::vector<std::int64_t> cu_q, cu_k;

  // Paged: the caller's block table, int32 or int64 [B, max_pages] (stride_b,
  // stride_j); the entries that hold keys below key_lengths[b] are in [0, num_pages),
  // the others are never read. Absent otherwise.
  Broadcast page_table;
  std::int64_t page_size = 0;

  // Query i of batch entry b sits at position p = i + offset(b).
  bool bottom_right = true;                  // from Options::align
  std::vector<std::int64_t> position_offsets;  // [B] from Options::position_offsets, or empty
  // [B], or empty (every key is real). Dense: Options::key_lengths, in [0, Nkv].
  // Cache and paged: cache_seqlens[b] + n_new, the keys sequence b holds after
  // the append; bottom-right alignment is then against these lengths.
  std::vector<std::int64_t> key_lengths;
  bool causal = false;               // key j visible iff j <= p
  std::int64_t window_left = -1;     // key j visible iff p - left <= j (left >= 0)
  std::int64_t window_right = -1;    // and j <= p + right (right >= 0)
  Broadcast mask;                    // bool / f32 / f16 (f64 for the oracle) [B, H, Nq, Nkv]
  Broadcast alibi;                   // f32 slopes (stride_b, stride_h)
  Broadcast sinks;                   // f32 (stride_h)
  double softcap = 0;                // > 0: s <- c·tanh(s/c)
  Operand scores;                    // [B, H, Nq, Nkv] output at scores_stage, or data == nullptr
  ScoresStage scores_stage = ScoresStage::scaled;

  // Dropout (Options::dropout_p > 0): keep iff philox word >= dropout_threshold,
  // kept probabilities scaled by dropout_scale = 1 / (1 - p). See src/philox.h.
  bool dropout = false;
  double dropout_p = 0;
  double dropout_scale = 1;
  std::uint64_t dropout_seed = 0, dropout_offset = 0;
  Operand dropout_mask;    // bool [B, H, Nq, Nkv] output of the forward, or data == nullptr

  // Backward (a Call with backward set): o and lse are inputs (as the forward
  // saved them, lse [B, H, Nq] required), grad_o = dO [B, H, Nq, dv] the
  // incoming gradient; grad_q, grad_k, grad_v (dQ, dK, dV) in the layouts of
  // q, k, v; grad_sinks [H] (stride_h) or data == nullptr. probs, scores and
  // dropout_mask are unset.
  bool backward = false;
  Operand grad_o, grad_q, grad_k, grad_v, grad_sinks;

  int threads = 1;         // >= 1, resolved from Options::threads
  Isa isa = Isa::scalar;   // resolved; never Isa::automatic

  static std::int64_t read_int(const Broadcast& t, std::int64_t b, std::int64_t j = 0) {
    const void* at = static_cast<const char*>(t.data) +
                     (b * t.stride_b + j * t.stride_j) * static_cast<std::int64_t>(dtype_size(t.dtype));
    return t.dtype == DType::i64 ? *static_cast<const std::int64_t*>(at) : *static_cast<const std::int32_t*>(at);
  }

  bool packed() const { return storage == KvStorage::packed; }
  bool paged() const { return storage == KvStorage::paged; }

  // Queries and keys of batch entry b.
  std::int64_t nq(std::int64_t b) const { return packed() ? cu_q[b + 1] - cu_q[b] : n_q; }
  std::int64_t nkv(std::int64_t b) const { return packed() ? cu_k[b + 1] - cu_k[b] : n_kv; }
  // Row of query i of batch entry b in Q, O and lse (their stride_b is 0 when packed).
  std::int64_t q_row(std::int64_t b, std::int64_t i) const { return packed() ? cu_q[b] + i : i; }

  // Key row j of head hk of batch entry b in K or V (contiguous, packed or paged).
  template <class T>
  T* kv_row(const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j) const {
    if (!paged()) return t.at<T>(b, hk, packed() ? cu_k[b] + j : j);
    const std::int64_t page = read_int(page_table, b, j / page_size);
    return t.at<T>(page, hk, j % page_size);
  }
  // The same row whatever the operand's dtype.
  const void* kv_addr(const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j) const {
    if (!paged()) return t.addr(b, hk, packed() ? cu_k[b] + j : j);
    return t.addr(read_int(page_table, b, j / page_size), hk, j % page_size);
  }
  // Key rows [j, j + n) of head hk of batch entry b in K, V or their scales,
  // as runs of evenly strided rows: f(i, count, first, stride_bytes) for rows
  // j + i .. j + i + count - 1 starting at `first`. One run unless paged
  // (then one per page): the page table is read once per page, not per row.
  template <class F>
  void for_each_kv_run(const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j, std::int64_t n, F f) const {
    const std::int64_t stride = t.stride_n * t.elem_bytes;
    if (!paged()) {
      if (n > 0) f(std::int64_t{0}, n, static_cast<const char*>(kv_addr(t, b, hk, j)), stride);
      return;
    }
    for (std::int64_t i = 0; i < n;) {
      const std::int64_t in_page = (j + i) % page_size, count = std::min(n - i, page_size - in_page);
      f(i, count, static_cast<const char*>(t.addr(read_int(page_table, b, (j + i) / page_size), hk, in_page)), stride);
      i += count;
    }
  }
  // The int8 scales that go with K or V (t is p.k or p.v), or nullptr.
  const Operand* scales_of(const Operand& t) const {
    if (t.dtype != DType::i8) return nullptr;
    return &t == &k ? &k_scale : &v_scale;
  }
  std::int64_t group_of(const Operand& t) const { return &t == &k ? k_group : v_group; }
  // Values per row of K or V (t is p.k or p.v): d or dv.
  std::int64_t row_width(const Operand& t) const { return &t == &k ? d : dv; }
  // Whether key rows [j, j + n) are evenly strided (one page, or not paged).
  bool kv_rows_strided(std::int64_t j, std::int64_t n) const {
    return !paged() || n <= 0 || j / page_size == (j + n - 1) / page_size;
  }

  // Position of query i of batch entry b.
  std::int64_t offset(std::int64_t b) const {
    if (!position_offsets.empty()) return position_offsets[b];
    if (!bottom_right) return 0;
    const bool cached = storage == KvStorage::cache || storage == KvStorage::paged;
    return (cached ? key_lengths[b] : nkv(b)) - nq(b);
  }
  // In 128 bits: i + offset(b) leaves int64 for extreme position_offsets.
  __int128 position(std::int64_t b, std::int64_t i) const { return __int128{i} + offset(b); }

  // Keys of batch entry b that are not padding: [0, key_end(b)).
  std::int64_t key_end(std::int64_t b) const { return key_lengths.empty() ? nkv(b) : key_lengths[b]; }

  // The keys query i of batch entry b may see before any explicit mask: one
  // interval [lo, hi) (causal, window and key padding all cut intervals), empty
  // when lo >= hi. Computed in 128 bits: offsets and windows may be any int64.
  struct Range {
    std::int64_t lo, hi;
  };
  Range visible(std::int64_t b, std::int64_t i) const {
    using Wide = __int128;
    const Wide p = position(b, i);
    Wide lo = 0, hi = key_end(b);
    if (causal && p + 1 < hi) hi = p + 1;
    if (window_right >= 0 && p + window_right + 1 < hi) hi = p + window_right + 1;
    if (window_left >= 0 && p - window_left > lo) lo = p - window_left;
    if (hi < 0) hi = 0;
    if (lo > hi) lo = hi;
    return {static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi)};
  }

  bool has_score_mods() const { return mask.data || alibi.data || softcap > 0; }
};

// One attention call as the caller gave it: the views, the options, the path
// and how K/V are stored. Views a storage does not use stay unset.
struct Call {
  TensorView q, k, v, o;           // in the storage's own layout (see KvStorage)
  const Options* opt = nullptr;    // required
  Path path = Path::fast;
  KvStorage storage = KvStorage::dense;
  // packed: int32/int64 [n + 1] prefix sums; max_seqlen_q/k: -1 or a bound every sequence must fit
  TensorView cu_seqlens_q{}, cu_seqlens_k{};
  std::int64_t max_seqlen_q = -1, max_seqlen_k = -1;
  // cache, paged: int32/int64 [B]; k_new [B, Hkv, n_new, d] and v_new [B, Hkv, n_new, dv] (optional, together)
  TensorView cache_seqlens{}, k_new{}, v_new{};
  TensorView block_table{};        // paged: int32/int64 [B, max_pages]
  // Backward (dense or packed storage): o and lse are the forward's saved
  // outputs, read as inputs; d_o the incoming gradient; dq..dsinks the outputs.
  bool backward = false;
  TensorView lse{}, d_o{}, dq{}, dk{}, dv{}, dsinks{};
};

// Checks every invariant of the call and builds Params: the only code that
// writes a Params. Throws sdpa::Error, naming the argument, what was expected
// and what was given; reads the caller's integer arrays but writes nothing.
Params make_params(const Call& call);

// Cache and paged calls with k_new/v_new: writes the new keys and values at
// positions cache_seqlens[b] .. cache_seqlens[b] + n_new - 1. Only after
// make_params(call) has accepted the call (p is its result).
void append_kv(const Params& p, const Call& call);

}  // namespace sdpa
