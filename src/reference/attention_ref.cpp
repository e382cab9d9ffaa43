// The float64 oracle: plain loops, every feature, obviously right.
//
// For each batch b, query head h and query i (at position p = i + offset):
//   visible keys:  j with causal (j <= p), the window (p - left <= j <= p + right)
//                  and key padding (j < key length), minus keys the explicit
//                  mask disables (false, or -inf)
//   s_j  = scale * sum_c q[i,c] * k[j,c]
//   s_j  = softcap * tanh(s_j / softcap)                 (softcap > 0)
//   s_j += float mask[b,h,i,j] - slope[b,h] * |p - j|    (float mask, ALiBi)
//   m    = max(max_j s_j, sink[h]),  l = sum_j exp(s_j - m) + exp(sink[h] - m)
//   o    = sum_j exp(s_j - m) * v[j,:] / l,  lse = m + log(l),  p_j = exp(s_j - m) / l
// in double precision, with the scores of one row materialised. A row with no
// visible key (and no sink) has o = 0, lse = -inf and p = 0; a row that sees
// keys whose every score is -inf (Inf in the data; masking never makes a
// visible score -inf) is NaN, as softmax over those scores is. NaN in a visible score makes the row NaN (the max
// keeps it), so the oracle never hides a NaN either.
//
// The oracle reads only the plain data members of Params: visibility, query
// positions and the addresses of packed and paged K/V rows are worked out
// here, from the definitions in sdpa/options.h and sdpa/serving.h, and not
// with the fast path's helpers (Params::visible, kv_row, ...), so an error in
// those shows up as a disagreement with the oracle.
#include "reference/attention_ref.h"

#include <cmath>
#include <limits>
#include <vector>

#include "half.h"

namespace sdpa::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double load(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t c) {
  if (t.dtype == DType::f64) return t.at<const double>(b, h, n)[c];
  return t.at<const float>(b, h, n)[c];
}

// Packed: sequence b is rows cu[b] .. cu[b+1].
bool packed(const Params& p) { return p.storage == KvStorage::packed; }
std::int64_t queries(const Params& p, std::int64_t b) { return packed(p) ? p.cu_q[b + 1] - p.cu_q[b] : p.n_q; }
std::int64_t keys(const Params& p, std::int64_t b) { return packed(p) ? p.cu_k[b + 1] - p.cu_k[b] : p.n_kv; }

// block_table[b, e] (int32 or int64, strided).
std::int64_t table_entry(const Params& p, std::int64_t b, std::int64_t e) {
  const Broadcast& t = p.page_table;
  const std::int64_t at = b * t.stride_b + e * t.stride_j;
  if (t.dtype == DType::i64) return static_cast<const std::int64_t*>(t.data)[at];
  return static_cast<const std::int32_t*>(t.data)[at];
}

// Element c of key row j of head hk of sequence b (K or V): dense and cache at
// [b, hk, j]; packed at row cu_k[b] + j; paged at row j % page_size of page
// block_table[b, j / page_size].
double load_kv(const Params& p, const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j, std::int64_t c) {
  std::int64_t outer = b, row = j;
  if (packed(p)) row = p.cu_k[b] + j;
  if (p.storage == KvStorage::paged) {
    outer = table_entry(p, b, j / p.page_size);
    row = j % p.page_size;
  }
  const std::int64_t at = outer * t.stride_b + hk * t.stride_h + row * t.stride_n + c;
  if (t.dtype == DType::f64) return static_cast<const double*>(t.data)[at];
  return static_cast<const float*>(t.data)[at];
}

// Offset of sequence b: position_offsets[b]; else 0 for top-left; else
// bottom-right, Nkv_b - Nq_b, where Nkv_b is the keys sequence b holds (its
// cache_seqlens + n_new with a cache).
std::int64_t query_offset(const Params& p, std::int64_t b) {
  if (!p.position_offsets.empty()) return p.position_offsets[b];
  if (!p.bottom_right) return 0;
  const bool cached = p.storage == KvStorage::cache || p.storage == KvStorage::paged;
  return (cached ? p.key_lengths[b] : keys(p, b)) - queries(p, b);
}

// Whether a - b <= limit, for limit >= 0 and any int64 a, b: when a > b the
// difference is below 2^64 and exact in unsigned arithmetic.
bool at_most_apart(std::int64_t a, std::int64_t b, std::int64_t limit) {
  return a <= b || static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b) <= static_cast<std::uint64_t>(limit);
}

// Whether key j is visible to query i of sequence b before the explicit mask,
// with p = i + off never formed (off may be any int64): j <= p is j - i <= off,
// p - left <= j is off - (j - i) <= left, and j <= p + right is (j - i) - off <= right.
bool key_visible(const Params& p, std::int64_t b, std::int64_t i, std::int64_t j) {
  const std::int64_t key_length = p.key_lengths.empty() ? keys(p, b) : p.key_lengths[b];
  if (j >= key_length) return false;
  const std::int64_t off = query_offset(p, b), ahead = j - i;  // 0 <= i, j: no overflow
  if (p.causal && ahead > off) return false;
  if (p.window_left >= 0 && !at_most_apart(off, ahead, p.window_left)) return false;
  if (p.window_right >= 0 && !at_most_apart(ahead, off, p.window_right)) return false;
  return true;
}

void store(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t c, double x) {
  if (t.dtype == DType::f64)
    t.at<double>(b, h, n)[c] = x;
  else
    t.at<float>(b, h, n)[c] = static_cast<float>(x);
}

double element(const Broadcast& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const std::int64_t at = b * t.stride_b + h * t.stride_h + i * t.stride_i + j * t.stride_j;
  switch (t.dtype) {
    case DType::boolean: return static_cast<const bool*>(t.data)[at] ? 1.0 : 0.0;
    case DType::f16: return half_to_float(static_cast<const std::uint16_t*>(t.data)[at]);
    case DType::f64: return static_cast<const double*>(t.data)[at];
    default: return static_cast<const float*>(t.data)[at];
  }
}

// What the explicit mask does to key j: false = disabled, else `add` is its additive term.
bool mask_allows(const Params& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j, double& add) {
  add = 0;
  if (!p.mask.data) return true;
  const double m = element(p.mask, b, h, i, j);
  if (p.mask.dtype == DType::boolean) return m != 0;
  if (m == -kInf) return false;
  add = m;
  return true;
}

}  // namespace

void run(const Params& p) {
  std::vector<double> s(static_cast<std::size_t>(p.n_kv));
  std::vector<char> vis(static_cast<std::size_t>(p.n_kv));
  std::vector<double> acc(static_cast<std::size_t>(p.dv));
  for (std::int64_t b = 0; b < p.b; ++b) {
    const std::int64_t n_q = queries(p, b), n_kv = keys(p, b);
    const double off = static_cast<double>(query_offset(p, b));
    for (std::int64_t h = 0; h < p.h; ++h) {
      const std::int64_t hk = h / p.group;
      const double slope = p.alibi.data ? element(p.alibi, b, h, 0, 0) : 0.0;
      const double sink = p.sinks.data ? element(p.sinks, 0, h, 0, 0) : -kInf;
      for (std::int64_t i = 0; i < n_q; ++i) {
        const std::int64_t row = packed(p) ? p.cu_q[b] + i : i;  // of Q, O and lse
        const double pos = static_cast<double>(i) + off;
        double m = -kInf;
        bool seen = false;  // the row sees a key
        for (std::int64_t j = 0; j < n_kv; ++j) {
          // Keys a query cannot see are read only to report their scores
          // (never with pages: past a sequence's keys its block table may hold anything).
          const bool in_range = key_visible(p, b, i, j);
          if (!in_range && !p.scores.data) {
            vis[j] = 0;
            s[j] = -kInf;
            continue;
          }
          double dot = 0;
          for (std::int64_t c = 0; c < p.d; ++c) dot += load(p.q, b, h, row, c) * load_kv(p, p.k, b, hk, j, c);
          double x = p.scale * dot;
          if (p.scores.data && p.scores_stage == ScoresStage::scaled) store(p.scores, b, h, i, j, x);
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          if (p.scores.data && p.scores_stage == ScoresStage::softcapped) store(p.scores, b, h, i, j, x);
          double add = 0;
          vis[j] = in_range && mask_allows(p, b, h, i, j, add);
          x += add - slope * std::abs(pos - static_cast<double>(j));
          s[j] = vis[j] ? x : -kInf;
          if (p.scores.data && p.scores_stage == ScoresStage::masked) store(p.scores, b, h, i, j, s[j]);
          if (!vis[j]) continue;
          seen = true;
          if (std::isnan(s[j]))
            m = s[j];  // sticky: exp(x - NaN) is NaN for every x
          else if (!std::isnan(m) && s[j] > m)
            m = s[j];
        }
        if (!std::isnan(m) && sink > m) m = sink;
        // Keys seen whose scores (and the sink) are all -inf: -inf from the
        // data (Inf in K), not from masking, so softmax is NaN, not empty.
        if (seen && m == -kInf) m = std::nan("");
        const bool empty = m == -kInf;  // nothing visible, or every score (and the sink) is -inf
        double l = empty ? 0.0 : std::exp(sink - m);
        for (double& a : acc) a = 0;
        if (!empty) {
          for (std::int64_t j = 0; j < n_kv; ++j) {
            if (!vis[j]) continue;  // values at invisible keys are never read
            const double e = std::exp(s[j] - m);
            l += e;
            for (std::int64_t c = 0; c < p.dv; ++c) acc[c] += e * load_kv(p, p.v, b, hk, j, c);
          }
        }
        for (std::int64_t c = 0; c < p.dv; ++c) store(p.o, b, h, row, c, empty ? 0.0 : acc[c] / l);
        if (p.lse.data) store(p.lse, b, h, row, 0, empty ? -kInf : m + std::log(l));
        for (std::int64_t j = 0; j < n_kv; ++j) {
          const double prob = vis[j] && !empty ? std::exp(s[j] - m) / l : 0.0;
          if (p.probs.data) store(p.probs, b, h, i, j, prob);
          if (p.scores.data && p.scores_stage == ScoresStage::probabilities) store(p.scores, b, h, i, j, prob);
        }
      }
    }
  }
}

}  // namespace sdpa::reference
