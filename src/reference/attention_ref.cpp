// The float64 oracle: plain loops, every feature, obviously right.
//
// For each batch b, query head h and query i:
//   s_j  = scale * sum_c q[i,c] * k[j,c]          for every visible key j
//   m    = max_j s_j,  l = sum_j exp(s_j - m)
//   o    = sum_j exp(s_j - m) * v[j,:] / l,  lse = m + log(l),  p_j = exp(s_j - m) / l
// in double precision, with the scores of one row materialised. A row with no
// visible key has o = 0, lse = -inf and p = 0. NaN in a visible score makes the
// row NaN (the max keeps it), so the oracle never hides a NaN either.
#include "reference/attention_ref.h"

#include <cmath>
#include <limits>
#include <vector>

namespace sdpa::reference {
namespace {

double load(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t c) {
  if (t.dtype == DType::f64) return t.at<const double>(b, h, n)[c];
  return t.at<const float>(b, h, n)[c];
}

void store(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t c, double x) {
  if (t.dtype == DType::f64)
    t.at<double>(b, h, n)[c] = x;
  else
    t.at<float>(b, h, n)[c] = static_cast<float>(x);
}

// lse is 3-D: its (b, h, n) strides address one element.
void store_lse(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t i, double x) { store(t, b, h, i, 0, x); }

}  // namespace

void run(const Params& p) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> s(static_cast<std::size_t>(p.n_kv));
  std::vector<double> acc(static_cast<std::size_t>(p.dv));
  for (std::int64_t b = 0; b < p.b; ++b) {
    for (std::int64_t h = 0; h < p.h; ++h) {
      const std::int64_t hk = h / p.group;
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const std::int64_t end = p.visible_end(i);  // keys [0, end) are visible
        double m = -kInf;
        for (std::int64_t j = 0; j < end; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < p.d; ++c) dot += load(p.q, b, h, i, c) * load(p.k, b, hk, j, c);
          s[j] = p.scale * dot;
          if (std::isnan(s[j]))
            m = s[j];  // sticky: exp(x - NaN) is NaN for every x
          else if (!std::isnan(m) && s[j] > m)
            m = s[j];
        }
        double l = 0;
        for (double& a : acc) a = 0;
        if (end > 0) {
          for (std::int64_t j = 0; j < end; ++j) {
            const double e = std::exp(s[j] - m);
            l += e;
            for (std::int64_t c = 0; c < p.dv; ++c) acc[c] += e * load(p.v, b, hk, j, c);
          }
        }
        for (std::int64_t c = 0; c < p.dv; ++c) store(p.o, b, h, i, c, end > 0 ? acc[c] / l : 0.0);
        if (p.lse.data) store_lse(p.lse, b, h, i, end > 0 ? m + std::log(l) : -kInf);
        if (p.probs.data) {
          for (std::int64_t j = 0; j < p.n_kv; ++j)
            store(p.probs, b, h, i, j, j < end ? std::exp(s[j] - m) / l : 0.0);
        }
      }
    }
  }
}

}  // namespace sdpa::reference
