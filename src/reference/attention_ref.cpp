// The float64 oracle: plain loops, every feature, obviously right.
//
// For each batch b, query head h and query i (at position p = i + offset):
//   visible keys:  j in [lo, hi) from causal (j <= p), the window
//                  (p - left <= j <= p + right) and key padding (j < key_lengths[b]),
//                  minus keys the explicit mask disables (false, or -inf)
//   s_j  = scale * sum_c q[i,c] * k[j,c]
//   s_j  = softcap * tanh(s_j / softcap)                 (softcap > 0)
//   s_j += float mask[b,h,i,j] - slope[b,h] * |p - j|    (float mask, ALiBi)
//   m    = max(max_j s_j, sink[h]),  l = sum_j exp(s_j - m) + exp(sink[h] - m)
//   o    = sum_j exp(s_j - m) * v[j,:] / l,  lse = m + log(l),  p_j = exp(s_j - m) / l
// in double precision, with the scores of one row materialised. A row with no
// visible key (and no sink) has o = 0, lse = -inf and p = 0; so does a row
// whose every score is -inf. NaN in a visible score makes the row NaN (the max
// keeps it), so the oracle never hides a NaN either.
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

// Element c of key row j (K or V): contiguous, packed or paged.
double load_kv(const Params& p, const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j, std::int64_t c) {
  if (t.dtype == DType::f64) return p.kv_row<const double>(t, b, hk, j)[c];
  return p.kv_row<const float>(t, b, hk, j)[c];
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
    const std::int64_t n_q = p.nq(b), n_kv = p.nkv(b);
    for (std::int64_t h = 0; h < p.h; ++h) {
      const std::int64_t hk = h / p.group;
      const double slope = p.alibi.data ? element(p.alibi, b, h, 0, 0) : 0.0;
      const double sink = p.sinks.data ? element(p.sinks, 0, h, 0, 0) : -kInf;
      for (std::int64_t i = 0; i < n_q; ++i) {
        const std::int64_t row = p.q_row(b, i);  // of Q, O and lse
        const Params::Range r = p.visible(b, i);
        const double pos = static_cast<double>(p.position(b, i));
        double m = -kInf;
        for (std::int64_t j = 0; j < n_kv; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < p.d; ++c) dot += load(p.q, b, h, row, c) * load_kv(p, p.k, b, hk, j, c);
          double x = p.scale * dot;
          if (p.scores.data && p.scores_stage == ScoresStage::scaled) store(p.scores, b, h, i, j, x);
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          if (p.scores.data && p.scores_stage == ScoresStage::softcapped) store(p.scores, b, h, i, j, x);
          double add = 0;
          vis[j] = j >= r.lo && j < r.hi && mask_allows(p, b, h, i, j, add);
          x += add - slope * std::abs(pos - static_cast<double>(j));
          s[j] = vis[j] ? x : -kInf;
          if (p.scores.data && p.scores_stage == ScoresStage::masked) store(p.scores, b, h, i, j, s[j]);
          if (!vis[j]) continue;
          if (std::isnan(s[j]))
            m = s[j];  // sticky: exp(x - NaN) is NaN for every x
          else if (!std::isnan(m) && s[j] > m)
            m = s[j];
        }
        if (!std::isnan(m) && sink > m) m = sink;
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
