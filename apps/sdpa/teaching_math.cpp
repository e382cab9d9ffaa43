// The teaching maths (see teaching_math.h).
#include "teaching_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "rng.h"

namespace sdpa::teaching {

std::vector<double> log_softmax(std::span<const double> scores) {
  std::vector<double> out(scores.size());
  if (scores.empty()) return out;
  const double m = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double s : scores) sum += std::exp(s - m);
  const double lse = m + std::log(sum);
  for (std::size_t i = 0; i < scores.size(); ++i) out[i] = scores[i] - lse;
  return out;
}

std::vector<double> softmax(std::span<const double> scores) {
  std::vector<double> p = log_softmax(scores);
  for (double& x : p) x = std::exp(x);
  return p;
}

double entropy(std::span<const double> p) {
  double h = 0;
  for (double x : p) {
    if (x > 0) h -= x * std::log(x);
  }
  return std::max(h, 0.0);
}

double jacobian_norm(std::span<const double> p) {
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    for (std::size_t j = 0; j < p.size(); ++j) {
      const double jij = (i == j ? p[i] : 0.0) - p[i] * p[j];
      sum += jij * jij;
    }
  }
  return std::sqrt(sum);
}

std::vector<int> ranks(std::span<const double> values) {
  std::vector<int> r(values.size(), 1);
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (double other : values) r[i] += other > values[i] ? 1 : 0;
  }
  return r;
}

double max_of(std::span<const double> values) {
  return values.empty() ? 0.0 : *std::max_element(values.begin(), values.end());
}

GrowthPoint growth_point(int dk, const GrowthConfig& cfg, std::vector<double>* samples) {
  if (dk < 1) throw std::invalid_argument("dk: expected an integer >= 1, got " + std::to_string(dk));
  if (cfg.keys < 1) throw std::invalid_argument("keys: expected an integer >= 1, got " + std::to_string(cfg.keys));
  if (cfg.trials < 1) {
    throw std::invalid_argument("trials: expected an integer >= 1, got " + std::to_string(cfg.trials));
  }
  Normal normal(mix(cfg.seed ^ mix(static_cast<std::uint64_t>(dk))));
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<double> q(static_cast<std::size_t>(dk)), raw(static_cast<std::size_t>(cfg.keys)),
      scaled(static_cast<std::size_t>(cfg.keys));
  double sum = 0, sum_sq = 0;
  GrowthPoint pt;
  pt.dk = dk;
  if (samples) samples->clear();
  auto add = [](SoftmaxStats& acc, std::span<const double> s) {
    const std::vector<double> p = softmax(s);
    acc.max_weight += max_of(p);
    acc.entropy += entropy(p);
    acc.grad_norm += jacobian_norm(p);
  };
  for (int t = 0; t < cfg.trials; ++t) {
    for (double& x : q) x = normal();
    for (int j = 0; j < cfg.keys; ++j) {
      double dot = 0;
      for (int c = 0; c < dk; ++c) dot += q[static_cast<std::size_t>(c)] * normal();
      raw[static_cast<std::size_t>(j)] = dot;
      scaled[static_cast<std::size_t>(j)] = dot * inv_sqrt;
      sum += dot;
      sum_sq += dot * dot;
      if (samples) samples->push_back(dot);
    }
    add(pt.raw, raw);
    add(pt.scaled, scaled);
  }
  const double n = static_cast<double>(cfg.trials) * cfg.keys;
  const double mean = sum / n;
  pt.std_raw = std::sqrt(std::max(sum_sq / n - mean * mean, 0.0));
  pt.std_scaled = pt.std_raw * inv_sqrt;
  for (SoftmaxStats* s : {&pt.raw, &pt.scaled}) {
    s->max_weight /= cfg.trials;
    s->entropy /= cfg.trials;
    s->grad_norm /= cfg.trials;
  }
  return pt;
}

std::vector<int> growth_dks(int dk_max) {
  std::vector<int> dks;
  for (int dk = 1; dk <= dk_max; dk *= 2) {
    dks.push_back(dk);
    if (dk > std::numeric_limits<int>::max() / 2) break;
  }
  if (dks.empty() || dks.back() != dk_max) dks.push_back(dk_max);
  return dks;
}

std::vector<GrowthPoint> growth_curve(int dk_max, const GrowthConfig& cfg) {
  std::vector<GrowthPoint> out;
  for (int dk : growth_dks(dk_max)) out.push_back(growth_point(dk, cfg));
  return out;
}

int raw_gradient_peak(std::span<const GrowthPoint> curve) {
  const GrowthPoint* best = nullptr;
  for (const GrowthPoint& p : curve) {
    if (!best || p.raw.grad_norm > best->raw.grad_norm) best = &p;
  }
  return best ? best->dk : 0;
}

}  // namespace sdpa::teaching
