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
// visible score -inf) is NaN, as softmax over those scores is. NaN in a
// visible score makes the row NaN (the max keeps it), so the oracle never
// hides a NaN either.
//
// Dropout (dropout_p > 0): with Z_j = dropout_scale if sdpa::dropout_keep
// keeps key j for query i of (b, h), else 0,
//   o    = sum_j exp(s_j - m) * Z_j * v[j,:] / l
// while l, lse, p_j and the scores are those before dropout. A dropped key's
// value is still multiplied (by 0), as in (P ∘ Z)·V: Inf or NaN there gives NaN.
// dropout_mask, when wanted, receives the decision of every (i, j < Nkv),
// visible or not (all kept when dropout_p is 0).
//
// The oracle reads only the plain data members of Params: visibility, query
// positions and the addresses of packed and paged K/V rows are worked out
// in ref_common.h, from the definitions in sdpa/options.h and sdpa/serving.h,
// and not with the fast path's helpers (Params::visible, kv_row, ...), so an
// error in those shows up as a disagreement with the oracle.
#include "reference/attention_ref.h"

#include <cmath>
#include <vector>

#include "reference/ref_common.h"

namespace sdpa::reference {

void run(const Params& p) {
  std::vector<double> s(static_cast<std::size_t>(p.n_kv));
  std::vector<char> vis(static_cast<std::size_t>(p.n_kv));
  std::vector<char> kept(static_cast<std::size_t>(p.n_kv), 1);
  std::vector<double> acc(static_cast<std::size_t>(p.dv));
  for (std::int64_t b = 0; b < p.b; ++b) {
    const std::int64_t n_q = queries(p, b), n_kv = keys(p, b);
    const double off = static_cast<double>(query_offset(p, b));
    for (std::int64_t h = 0; h < p.h; ++h) {
      const std::int64_t hk = h / p.group;
      const double slope = p.alibi.data ? element(p.alibi, b, h, 0, 0) : 0.0;
      const double sink = p.sinks.data ? element(p.sinks, 0, h, 0, 0) : -kInf;
      const philox::Stream drop = dropout_stream(p, b, h);
      for (std::int64_t i = 0; i < n_q; ++i) {
        const std::int64_t row = query_row(p, b, i);  // of Q, O and lse
        const double pos = static_cast<double>(i) + off;
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
        }
        // The keep decision of every key (visible or not, for dropout_mask);
        // all kept without dropout.
        if (p.dropout || p.dropout_mask.data)
          for (std::int64_t j = 0; j < n_kv; ++j) kept[j] = !p.dropout || drop.keep(i, j);
        if (p.dropout_mask.data)
          for (std::int64_t j = 0; j < n_kv; ++j) p.dropout_mask.at<bool>(b, h, i)[j] = kept[j] != 0;

        const double m = row_max(s, vis, n_kv, sink);
        const bool empty = m == -kInf;  // nothing visible, or every score (and the sink) is -inf
        double l = empty ? 0.0 : std::exp(sink - m);
        for (double& a : acc) a = 0;
        if (!empty) {
          for (std::int64_t j = 0; j < n_kv; ++j) {
            if (!vis[j]) continue;  // values at invisible keys are never read
            const double e = std::exp(s[j] - m);
            l += e;
            const double z = p.dropout ? (kept[j] ? p.dropout_scale : 0.0) : 1.0;
            for (std::int64_t c = 0; c < p.dv; ++c) acc[c] += e * z * load_kv(p, p.v, b, hk, j, c);
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
