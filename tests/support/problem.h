// Test support: random attention problems, the fast path and the oracle run
// side by side, and the one tolerance function every accuracy test uses.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "sdpa/attention.h"

namespace sdpa::test {

enum class Layout { bhsd, bshd };

struct Problem {
  std::int64_t b = 1, h = 1, h_kv = 1, n_q = 1, n_kv = 1, d = 8, dv = 8;
  bool causal = false;
  Layout layout = Layout::bhsd;
  // Extra elements between consecutive rows (strided, non-packed views).
  std::int64_t row_pad = 0;
  Isa isa = Isa::automatic;
  int threads = 1;
  std::uint64_t seed = 1;
  std::string describe() const;
};
std::ostream& operator<<(std::ostream& os, const Problem& pb);

// Owns the buffers of one problem and hands out views in its layout.
struct Buffers {
  explicit Buffers(const Problem& pb);  // fills q, k, v with N(0, 1) from pb.seed
  Problem pb;
  std::vector<float> q, k, v, o, lse;
  std::vector<double> o_ref, lse_ref;
  std::vector<float> probs;
  std::vector<double> probs_ref;
  std::int64_t q_elems() const;

  TensorView q_view() const;
  TensorView k_view() const;
  TensorView v_view() const;
  TensorView o_view();
  TensorView o_ref_view();
  TensorView lse_view();
  TensorView lse_ref_view();
  // Element (b, h, i, c) of an output stored in the problem's layout.
  std::int64_t o_index(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c) const;

  // Starting point of options(): masks, modifiers and the like set by a test.
  Options base;
  Options options() const;    // base + isa, threads, causal
  void run_fast(bool with_lse = true, bool with_probs = false);
  void run_reference(bool with_lse = true, bool with_probs = false);
};

// The worst element of |got - want| over the output O, with its position.
struct Worst {
  double err = 0;
  std::int64_t b = 0, h = 0, i = 0, c = 0;
  double got = 0, want = 0;
  std::string describe() const;
};
Worst worst_o(const Buffers& buf);
Worst worst_lse(const Buffers& buf);  // -inf == -inf counts as exact

// Error bound of the float32 fast path against the float64 oracle, for O.
//
// Scores: each s = scale*q·k is a length-d float dot product with scale folded
// into q, so |Δs| <= (d + 1)·eps·scale·max|q|·max|k| (the standard γ_d bound).
// exp(s + Δs - m) = exp(s - m)·(1 + Δs + ...): every weight is perturbed
// relatively by at most ~2|Δs| (its own score and the row max), and so is l.
// O = Σ p·v / l then errs by <= max|v|·(4|Δs| + (Nkv + 4)·eps), the last term
// for summing Nkv products and the final division in float.
// kSafety covers the exp polynomial (<= 2 ulp) and the log-sum-exp merge.
double tolerance_o(const Problem& pb, double max_abs_q, double max_abs_k, double max_abs_v);
// lse = m + log(l): errs by |Δs| + (Nkv + 4)·eps relative to l (log is 1-Lipschitz at l >= 1).
double tolerance_lse(const Problem& pb, double max_abs_q, double max_abs_k);
double max_abs(const std::vector<float>& x);
// n standard-normal floats from a seeded generator.
std::vector<float> randn(std::size_t n, std::uint64_t seed);

}  // namespace sdpa::test
