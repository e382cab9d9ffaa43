// The teaching maths behind `sdpa demo`, `sdpa stats` and the explorer's API
// (`sdpa serve`): softmax and what it makes of a row of scores (entropy,
// ranks, the size of its gradient), and the growth experiment, q, k ~ N(0, I)
// with d_k entries, whose raw scores q·k spread like √d_k. Plain double
// arithmetic, no library call: these numbers explain the scaling, while the
// attention itself is computed by sdpa::attention.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sdpa::teaching {

// log(softmax): exp(x − max) summed, so large scores cannot overflow; strictly
// increasing in the score, no underflow (ranks are read from it).
std::vector<double> log_softmax(std::span<const double> scores);
std::vector<double> softmax(std::span<const double> scores);
// −Σ p·ln p in nats (0 ≤ H ≤ ln n; 0·ln 0 = 0).
double entropy(std::span<const double> p);
// ‖diag(p) − p·pᵀ‖_F: the size of the softmax Jacobian; tends to 0 as the softmax saturates.
double jacobian_norm(std::span<const double> p);
// 1 + the number of strictly larger values (ties share a rank).
std::vector<int> ranks(std::span<const double> values);
double max_of(std::span<const double> values);

// The growth experiment: q, k ~ N(0, I_dk); raw scores q·k have std √d_k, scaled ones std 1.
struct GrowthConfig {
  int keys = 16;          // keys per softmax row
  int trials = 256;       // softmax rows (queries) per d_k
  std::uint64_t seed = 1;
};
struct SoftmaxStats {
  double max_weight = 0;  // mean over rows of the largest weight
  double entropy = 0;     // mean entropy (nats)
  double grad_norm = 0;   // mean ‖diag(p) − p·pᵀ‖_F
};
struct GrowthPoint {
  int dk = 0;
  double std_raw = 0, std_scaled = 0;  // of the keys·trials scores
  SoftmaxStats raw, scaled;            // softmax of q·k and of q·k/√d_k
};
// Deterministic in (dk, cfg): the same point whether computed alone or in a
// curve. `samples` (optional) receives the keys·trials raw scores. Throws
// std::invalid_argument for dk < 1, keys < 1 or trials < 1.
GrowthPoint growth_point(int dk, const GrowthConfig& cfg, std::vector<double>* samples = nullptr);
// 1, 2, 4, ... up to dk_max (dk_max itself last even when not a power of two).
std::vector<int> growth_dks(int dk_max);
std::vector<GrowthPoint> growth_curve(int dk_max, const GrowthConfig& cfg);
// The d_k of a curve where the unscaled gradient size is largest (0 for an
// empty curve). Without scaling the gradient first rises with d_k (the scores
// spread enough for the softmax to take sides), then falls towards 0 as the
// softmax saturates.
int raw_gradient_peak(std::span<const GrowthPoint> curve);

}  // namespace sdpa::teaching
