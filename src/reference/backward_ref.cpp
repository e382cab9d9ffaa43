// The float64 backward oracle: plain loops, every feature, obviously right.
//
// For each batch b, query head h (reading K/V head hk = h / group) and query i,
// the row is recomputed exactly as the forward oracle computes it (see
// attention_ref.cpp; the saved o and lse are float32 approximations and are
// not read):
//   x_j = scale * q_i·k_j,  t_j = tanh(x_j / c),  s_j = c * t_j (or x_j without softcap)
//   s_j += float mask - slope * |p - j|,  over the visible keys j
//   m = max(max_j s_j, sink),  l = sum_j exp(s_j - m) + exp(sink - m)
//   P_j = exp(s_j - m) / l,  Z_j = dropout factor (dropout_scale or 0; 1 without dropout)
// and then, with dO_i the incoming gradient of the row,
//   O_i   = sum_j P_j Z_j v_j
//   dP_j  = Z_j (dO_i·v_j),  D = sum_j P_j dP_j  (= dO_i·O_i)
//   dS_j  = P_j (dP_j - D)
//   dX_j  = dS_j (1 - t_j²) with softcap, else dS_j    (d s_j / d x_j)
//   dq_i += scale * sum_j dX_j k_j
//   dk_j += scale * dX_j q_i,  dv_j += P_j Z_j dO_i    (summed over the group's query heads)
//   dsink_h += -P_sink D,  P_sink = exp(sink - m) / l
// The float mask, ALiBi slopes, scale and softcap are constants. A row with no
// visible key (and no sink) contributes nothing; Inf and NaN in the data
// propagate as the formulas give them (a row whose visible scores are all
// -inf from the data is NaN, as in the forward). Everything accumulates in
// double and is stored once at the end, so every output element is written:
// keys no query sees get dK = dV = 0.
#include <cmath>
#include <cstddef>
#include <vector>

#include "reference/attention_ref.h"
#include "reference/ref_common.h"

namespace sdpa::reference {
namespace {

// Key slot of key j of sequence b: the index of its row among all the call's
// key rows (b * n_kv + j dense, the packed row cu_k[b] + j packed).
std::int64_t key_slot(const Params& p, std::int64_t b, std::int64_t j) { return packed(p) ? p.cu_k[b] + j : b * p.n_kv + j; }
std::int64_t key_slots(const Params& p) { return packed(p) ? p.cu_k[p.b] : p.b * p.n_kv; }
// Row of key j of sequence b in K, V, dK and dV (dense or packed; the backward has no cache or pages).
std::int64_t key_row(const Params& p, std::int64_t b, std::int64_t j) { return packed(p) ? p.cu_k[b] + j : j; }

}  // namespace

void backward(const Params& p) {
  const std::int64_t slots = key_slots(p);
  const auto kv_elems = [&](std::int64_t x) { return static_cast<std::size_t>(slots * p.h_kv * x); };
  std::vector<double> dk(kv_elems(p.d), 0.0), dv(kv_elems(p.dv), 0.0);
  std::vector<double> dsinks(static_cast<std::size_t>(p.h), 0.0);
  const auto dk_at = [&](std::int64_t b, std::int64_t hk, std::int64_t j) {
    return dk.data() + (key_slot(p, b, j) * p.h_kv + hk) * p.d;
  };
  const auto dv_at = [&](std::int64_t b, std::int64_t hk, std::int64_t j) {
    return dv.data() + (key_slot(p, b, j) * p.h_kv + hk) * p.dv;
  };

  const std::size_t n_kv = static_cast<std::size_t>(p.n_kv);
  std::vector<double> s(n_kv), t(n_kv), prob(n_kv), z(n_kv), dp(n_kv);
  std::vector<char> vis(n_kv);
  std::vector<double> q(static_cast<std::size_t>(p.d)), dq(static_cast<std::size_t>(p.d));
  std::vector<double> d_o(static_cast<std::size_t>(p.dv));

  for (std::int64_t b = 0; b < p.b; ++b) {
    const std::int64_t nq = queries(p, b), nk = keys(p, b);
    const double off = static_cast<double>(query_offset(p, b));
    for (std::int64_t h = 0; h < p.h; ++h) {
      const std::int64_t hk = h / p.group;
      const double slope = p.alibi.data ? element(p.alibi, b, h, 0, 0) : 0.0;
      const double sink = p.sinks.data ? element(p.sinks, 0, h, 0, 0) : -kInf;
      const philox::Stream drop = dropout_stream(p, b, h);
      for (std::int64_t i = 0; i < nq; ++i) {
        const std::int64_t row = query_row(p, b, i);  // of Q, dO and dQ
        const double pos = static_cast<double>(i) + off;
        for (std::int64_t c = 0; c < p.d; ++c) q[c] = load(p.q, b, h, row, c);
        for (std::int64_t c = 0; c < p.dv; ++c) d_o[c] = load(p.grad_o, b, h, row, c);
        for (double& x : dq) x = 0;

        // The scores, as the forward oracle computes them.
        for (std::int64_t j = 0; j < nk; ++j) {
          double add = 0;
          vis[j] = key_visible(p, b, i, j) && mask_allows(p, b, h, i, j, add);
          if (!vis[j]) {
            s[j] = -kInf;
            continue;
          }
          double dot = 0;
          for (std::int64_t c = 0; c < p.d; ++c) dot += q[c] * load_kv(p, p.k, b, hk, j, c);
          double x = p.scale * dot;
          if (p.softcap > 0) {
            t[j] = std::tanh(x / p.softcap);
            x = p.softcap * t[j];
          }
          s[j] = x + add - slope * std::abs(pos - static_cast<double>(j));
        }
        const double m = row_max(s, vis, nk, sink);
        if (m == -kInf) {
          // Nothing visible and no sink: O = 0 whatever the inputs, no gradient.
          for (std::int64_t c = 0; c < p.d; ++c) store(p.grad_q, b, h, row, c, 0.0);
          continue;
        }
        double l = std::exp(sink - m);
        for (std::int64_t j = 0; j < nk; ++j)
          if (vis[j]) l += std::exp(s[j] - m);

        // P, Z, dP = Z (dO·v) and D = sum_j P dP.
        double d_sum = 0;
        for (std::int64_t j = 0; j < nk; ++j) {
          if (!vis[j]) continue;
          prob[j] = std::exp(s[j] - m) / l;
          z[j] = p.dropout ? (drop.keep(i, j) ? p.dropout_scale : 0.0) : 1.0;
          double dot = 0;
          for (std::int64_t c = 0; c < p.dv; ++c) dot += d_o[c] * load_kv(p, p.v, b, hk, j, c);
          dp[j] = z[j] * dot;
          d_sum += prob[j] * dp[j];
        }

        for (std::int64_t j = 0; j < nk; ++j) {
          if (!vis[j]) continue;
          double dx = prob[j] * (dp[j] - d_sum);
          if (p.softcap > 0) dx *= 1.0 - t[j] * t[j];
          double* dk_j = dk_at(b, hk, j);
          for (std::int64_t c = 0; c < p.d; ++c) {
            dq[c] += p.scale * dx * load_kv(p, p.k, b, hk, j, c);
            dk_j[c] += p.scale * dx * q[c];
          }
          double* dv_j = dv_at(b, hk, j);
          const double pz = prob[j] * z[j];
          for (std::int64_t c = 0; c < p.dv; ++c) dv_j[c] += pz * d_o[c];
        }
        for (std::int64_t c = 0; c < p.d; ++c) store(p.grad_q, b, h, row, c, dq[c]);
        if (p.sinks.data) dsinks[h] += -(std::exp(sink - m) / l) * d_sum;
      }
    }
  }

  for (std::int64_t b = 0; b < p.b; ++b)
    for (std::int64_t hk = 0; hk < p.h_kv; ++hk)
      for (std::int64_t j = 0; j < keys(p, b); ++j) {
        const std::int64_t r = key_row(p, b, j);
        const double* dk_j = dk_at(b, hk, j);
        const double* dv_j = dv_at(b, hk, j);
        for (std::int64_t c = 0; c < p.d; ++c) store(p.grad_k, b, hk, r, c, dk_j[c]);
        for (std::int64_t c = 0; c < p.dv; ++c) store(p.grad_v, b, hk, r, c, dv_j[c]);
      }
  if (p.grad_sinks.data)
    for (std::int64_t h = 0; h < p.h; ++h) store(p.grad_sinks, 0, h, 0, 0, dsinks[h]);
}

}  // namespace sdpa::reference
