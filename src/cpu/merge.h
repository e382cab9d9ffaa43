// The merge of softmax partials: one row's attention computed piecewise over
// disjoint sets of keys, each piece giving its normalised output O_s and its
// log-sum-exp lse_s = m_s + log l_s, combines into the row's result as
//
//   lse = log Σ_s e^{lse_s},    O = Σ_s e^{lse_s - lse} · O_s
//
// evaluated against a running maximum so that no exponential overflows. The
// split-KV decode (driver.cpp, one partial per key chunk) and ring attention
// (src/dist/, one partial per visiting K/V block) both merge through LseMerge;
// partials are folded in a fixed order, so the result is deterministic.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace sdpa::cpu {

struct LseMerge {
  // The partials folded so far weigh l·e^m in total; m = -inf: none with any
  // weight yet; m = NaN: one of them was NaN (the row is then NaN).
  double m = -std::numeric_limits<double>::infinity();
  double l = 0;

  // Folds in a partial of weight l_part·e^{m_part} whose output, normalised
  // over its own keys, is o_part[0, n). acc[0, n) holds Σ weight·O relative to
  // e^m (so O = acc / l at the end). A partial of weight 0 (m_part = -inf)
  // changes nothing.
  template <class Acc, class Part>
  void fold(double m_part, double l_part, const Part* o_part, Acc* acc, std::int64_t n) {
    if (std::isnan(m)) return;
    if (std::isnan(m_part)) {
      m = l = std::nan("");
      for (std::int64_t c = 0; c < n; ++c) acc[c] = static_cast<Acc>(std::nan(""));
      return;
    }
    if (m_part == -std::numeric_limits<double>::infinity()) return;
    if (m_part > m) {
      // Rescale what is there to the new maximum (nothing to rescale before
      // the first weighted partial: acc and l are still 0).
      if (m != -std::numeric_limits<double>::infinity()) {
        const double a = std::exp(m - m_part);
        l *= a;
        for (std::int64_t c = 0; c < n; ++c) acc[c] = static_cast<Acc>(acc[c] * a);
      }
      m = m_part;
    }
    const double w = std::exp(m_part - m) * l_part;
    l += w;
    for (std::int64_t c = 0; c < n; ++c) acc[c] = static_cast<Acc>(acc[c] + w * o_part[c]);
  }

  // The merged row's log-sum-exp: -inf when nothing had weight.
  double lse() const { return l > 0 || std::isnan(l) ? m + std::log(l) : -std::numeric_limits<double>::infinity(); }
};

}  // namespace sdpa::cpu
