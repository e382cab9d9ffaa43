// Ring attention against the float64 oracle, run under mpirun with 2 and 4
// ranks (tests/dist/dist.cmake). Every rank builds the whole problem from the
// same seed, runs the ring on its shard and compares its rows with the
// oracle's rows at the same global positions; the worst error over all ranks
// decides. Tolerances: O and lse within tolerance_o / tolerance_lse (the fast
// path's bound against the oracle, tests/support) doubled for the merge of up
// to 2P partials; gradients within 2e-4·max(1, max|gradient|) (float32
// accumulation over Nkv keys and P blocks).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/ring.h"
#include "support/problem.h"

namespace {

using sdpa::TensorView;
using sdpa::ring::Sharding;

int g_rank = 0, g_ranks = 1;
int g_failures = 0;

struct Case {
  std::string name;
  std::int64_t b = 2, h = 4, h_kv = 2, n_q = 100, n_kv = 100, d = 16, dv = 16;
  Sharding sharding = Sharding::contiguous;
  bool backward = true;
  std::function<void(sdpa::Options&, std::vector<float>& store)> set{};  // options and the arrays they point into
  std::int64_t expect_steps = -1;  // the ring steps the call must run (-1: P)
};

// Rows of this rank, copied out of a full [B, Hx, N, w] array.
std::vector<float> shard_of(const std::vector<float>& full, std::int64_t b, std::int64_t hx, std::int64_t n,
                            std::int64_t w, Sharding s) {
  const auto chunks = sdpa::ring::shard(s, n, g_ranks, g_rank);
  const std::int64_t rows = sdpa::ring::shard_rows(s, n, g_ranks, g_rank);
  std::vector<float> out(static_cast<std::size_t>(b * hx * rows * w));
  for (std::int64_t x = 0; x < b * hx; ++x) {
    std::int64_t r = 0;
    for (const auto& c : chunks)
      for (std::int64_t i = 0; i < c.size; ++i, ++r)
        std::memcpy(&out[(x * rows + r) * w], &full[(x * n + c.begin + i) * w], sizeof(float) * w);
  }
  return out;
}

// Worst |got - want| of this rank's rows against the full array `want`.
double worst(const std::vector<float>& got, const std::vector<double>& want, std::int64_t b, std::int64_t hx,
             std::int64_t n, std::int64_t w, Sharding s) {
  const auto chunks = sdpa::ring::shard(s, n, g_ranks, g_rank);
  const std::int64_t rows = sdpa::ring::shard_rows(s, n, g_ranks, g_rank);
  double err = 0;
  for (std::int64_t x = 0; x < b * hx; ++x) {
    std::int64_t r = 0;
    for (const auto& c : chunks)
      for (std::int64_t i = 0; i < c.size; ++i, ++r)
        for (std::int64_t e = 0; e < w; ++e) {
          const double g = got[(x * rows + r) * w + e], t = want[(x * n + c.begin + i) * w + e];
          if (g == t) continue;  // -inf == -inf
          err = std::max(err, std::isnan(g) || std::isnan(t) ? INFINITY : std::abs(g - t));
        }
  }
  return err;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x)
    if (std::isfinite(e)) m = std::max(m, std::abs(e));
  return m;
}

void expect(const std::string& what, double err, double tol) {
  double all = 0;
  MPI_Allreduce(&err, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const bool ok = all <= tol;
  if (!ok) ++g_failures;
  if (g_rank == 0) std::printf("  %-4s %-34s worst %.3g, tolerance %.3g\n", ok ? "ok" : "FAIL", what.c_str(), all, tol);
}

void run_case(const Case& cs) {
  if (g_rank == 0) std::printf("%s (P=%d, %s)\n", cs.name.c_str(), g_ranks, cs.sharding == Sharding::zigzag ? "zigzag" : "contiguous");
  const std::int64_t B = cs.b, H = cs.h, Hkv = cs.h_kv, Nq = cs.n_q, Nkv = cs.n_kv, d = cs.d, dv = cs.dv;
  const std::vector<float> q = sdpa::test::randn(B * H * Nq * d, 11), k = sdpa::test::randn(B * Hkv * Nkv * d, 12),
                           v = sdpa::test::randn(B * Hkv * Nkv * dv, 13), d_o = sdpa::test::randn(B * H * Nq * dv, 14);
  std::vector<float> store;
  store.reserve(64);
  sdpa::Options opt;
  opt.threads = 1;
  if (cs.set) cs.set(opt, store);

  // The oracle on the whole sequence.
  std::vector<double> o_ref(B * H * Nq * dv), lse_ref(B * H * Nq);
  sdpa::Options ref_opt = opt;
  ref_opt.lse = TensorView::contiguous(lse_ref.data(), {B, H, Nq});
  const TensorView qv = TensorView::contiguous(q.data(), {B, H, Nq, d}), kv = TensorView::contiguous(k.data(), {B, Hkv, Nkv, d}),
                   vv = TensorView::contiguous(v.data(), {B, Hkv, Nkv, dv});
  sdpa::reference_attention(qv, kv, vv, TensorView::contiguous(o_ref.data(), {B, H, Nq, dv}), ref_opt);

  // The ring on this rank's shard.
  const std::int64_t nq = sdpa::ring::shard_rows(cs.sharding, Nq, g_ranks, g_rank);
  const std::int64_t nkv = sdpa::ring::shard_rows(cs.sharding, Nkv, g_ranks, g_rank);
  const std::vector<float> q_l = shard_of(q, B, H, Nq, d, cs.sharding), k_l = shard_of(k, B, Hkv, Nkv, d, cs.sharding),
                           v_l = shard_of(v, B, Hkv, Nkv, dv, cs.sharding), do_l = shard_of(d_o, B, H, Nq, dv, cs.sharding);
  std::vector<float> o_l(B * H * nq * dv), lse_l(B * H * nq);
  sdpa::ring::Stats st;
  const sdpa::ring::Ring ring{.comm = MPI_COMM_WORLD, .sharding = cs.sharding, .stats = &st};
  sdpa::Options ring_opt = opt;
  ring_opt.lse = TensorView::contiguous(lse_l.data(), {B, H, nq});
  const TensorView ql = TensorView::contiguous(q_l.data(), {B, H, nq, d}), kl = TensorView::contiguous(k_l.data(), {B, Hkv, nkv, d}),
                   vl = TensorView::contiguous(v_l.data(), {B, Hkv, nkv, dv}), ol = TensorView::contiguous(o_l.data(), {B, H, nq, dv});
  sdpa::ring::attention(ring, ql, kl, vl, ol, ring_opt);

  sdpa::test::Problem pb;
  pb.b = B, pb.h = H, pb.h_kv = Hkv, pb.n_q = Nq, pb.n_kv = Nkv, pb.d = d, pb.dv = dv;
  const double mq = sdpa::test::max_abs(q), mk = sdpa::test::max_abs(k), mv = sdpa::test::max_abs(v);
  expect("O against the oracle", worst(o_l, o_ref, B, H, Nq, dv, cs.sharding), 2 * sdpa::test::tolerance_o(pb, mq, mk, mv));
  expect("lse against the oracle", worst(lse_l, lse_ref, B, H, Nq, 1, cs.sharding),
         2 * sdpa::test::tolerance_lse(pb, mq, mk));
  const std::int64_t want_steps = cs.expect_steps < 0 ? g_ranks : std::min<std::int64_t>(cs.expect_steps, g_ranks);
  expect("ring steps run = " + std::to_string(want_steps), st.steps == want_steps ? 0 : 1, 0);

  // Deterministic: a second run gives the same bits, on 2 threads as on 1.
  std::vector<float> o_again(o_l.size());
  sdpa::Options two = opt;
  two.threads = 2;
  sdpa::ring::attention(ring, ql, kl, vl, TensorView::contiguous(o_again.data(), {B, H, nq, dv}), two);
  expect("forward bitwise repeatable, 2 threads",
         std::memcmp(o_again.data(), o_l.data(), o_l.size() * sizeof(float)) == 0 ? 0 : 1, 0);
  if (!cs.backward) return;

  std::vector<double> dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size()), dsinks_ref(H);
  sdpa::Gradients g_ref{.dq = TensorView::contiguous(dq_ref.data(), {B, H, Nq, d}),
                        .dk = TensorView::contiguous(dk_ref.data(), {B, Hkv, Nkv, d}),
                        .dv = TensorView::contiguous(dv_ref.data(), {B, Hkv, Nkv, dv})};
  if (opt.sinks.is_set()) g_ref.dsinks = TensorView::contiguous(dsinks_ref.data(), {H});
  sdpa::reference_attention_backward(qv, kv, vv, TensorView::contiguous(o_ref.data(), {B, H, Nq, dv}),
                                     TensorView::contiguous(lse_ref.data(), {B, H, Nq}),
                                     TensorView::contiguous(d_o.data(), {B, H, Nq, dv}), g_ref, opt);
  std::vector<float> dq_l(q_l.size()), dk_l(k_l.size()), dv_l(v_l.size()), dsinks_l(H);
  sdpa::Gradients g{.dq = TensorView::contiguous(dq_l.data(), {B, H, nq, d}),
                    .dk = TensorView::contiguous(dk_l.data(), {B, Hkv, nkv, d}),
                    .dv = TensorView::contiguous(dv_l.data(), {B, Hkv, nkv, dv})};
  if (opt.sinks.is_set()) g.dsinks = TensorView::contiguous(dsinks_l.data(), {H});
  const TensorView lsel = TensorView::contiguous(lse_l.data(), {B, H, nq}), dol = TensorView::contiguous(do_l.data(), {B, H, nq, dv});
  sdpa::ring::attention_backward(ring, ql, kl, vl, ol, lsel, dol, g, opt);
  const auto tol = [](const std::vector<double>& want) { return 2e-4 * std::max(1.0, max_abs(want)); };
  expect("dQ against the oracle", worst(dq_l, dq_ref, B, H, Nq, d, cs.sharding), tol(dq_ref));
  expect("dK against the oracle", worst(dk_l, dk_ref, B, Hkv, Nkv, d, cs.sharding), tol(dk_ref));
  expect("dV against the oracle", worst(dv_l, dv_ref, B, Hkv, Nkv, dv, cs.sharding), tol(dv_ref));
  if (opt.sinks.is_set()) {
    double err = 0;
    for (std::int64_t hh = 0; hh < H; ++hh) err = std::max(err, std::abs(dsinks_l[hh] - dsinks_ref[hh]));
    expect("dsinks against the oracle", err, tol(dsinks_ref));
  }
  std::vector<float> dk_again(dk_l.size());
  sdpa::Gradients g2 = g;
  std::vector<float> dq2(dq_l.size()), dv2(dv_l.size());
  g2.dq = TensorView::contiguous(dq2.data(), {B, H, nq, d});
  g2.dk = TensorView::contiguous(dk_again.data(), {B, Hkv, nkv, d});
  g2.dv = TensorView::contiguous(dv2.data(), {B, Hkv, nkv, dv});
  sdpa::ring::attention_backward(ring, ql, kl, vl, ol, lsel, dol, g2, two);
  const bool same = std::memcmp(dk_again.data(), dk_l.data(), dk_l.size() * 4) == 0 &&
                    std::memcmp(dq2.data(), dq_l.data(), dq_l.size() * 4) == 0;
  expect("backward bitwise repeatable, 2 threads", same ? 0 : 1, 0);
}

// One rank gives the wrong number of rows: every rank throws, none hangs.
void run_error_case() {
  if (g_rank == 0) std::printf("a shard of the wrong size on rank 0\n");
  const std::int64_t n = 40;
  std::int64_t rows = sdpa::ring::shard_rows(Sharding::contiguous, n, g_ranks, g_rank);
  if (g_rank == 0) rows += 1;
  std::vector<float> q(rows * 8, 0.5f), o(rows * 8);
  const TensorView qv = TensorView::contiguous(q.data(), {1, 1, rows, 8});
  std::string message;
  try {
    sdpa::ring::attention({.comm = MPI_COMM_WORLD}, qv, qv, qv, TensorView::contiguous(o.data(), {1, 1, rows, 8}));
  } catch (const sdpa::Error& e) {
    message = e.what();
  }
  const bool named = message.find("q: expected") == 0 && message.find("rows") != std::string::npos;
  expect("every rank throws, naming q", named ? 0 : 1, 0);
  if (g_rank == 0) std::printf("    rank 0: %s\n", message.c_str());

  // An option the ring does not take, named.
  const std::int64_t good = sdpa::ring::shard_rows(Sharding::contiguous, n, g_ranks, g_rank);
  std::vector<std::uint8_t> keep(static_cast<std::size_t>(n), 1);
  sdpa::Options opt;
  opt.mask = TensorView::contiguous(keep.data(), sdpa::DType::boolean, {n});
  const TensorView q2 = TensorView::contiguous(q.data(), {1, 1, good, 8});
  message.clear();
  try {
    sdpa::ring::attention({.comm = MPI_COMM_WORLD}, q2, q2, q2, TensorView::contiguous(o.data(), {1, 1, good, 8}), opt);
  } catch (const sdpa::Error& e) {
    message = e.what();
  }
  expect("an explicit mask is refused, named", message.find("mask: expected no explicit mask") == 0 ? 0 : 1, 0);
  if (g_rank == 0) std::printf("    rank 0: %s\n", message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks);
  const std::int64_t H = 4;
  std::vector<Case> cases;
  cases.push_back({.name = "full attention, GQA 4/2, N=100", .n_q = 100, .n_kv = 100});
  cases.push_back({.name = "causal", .n_q = 123, .n_kv = 123, .set = [](sdpa::Options& o, auto&) { o.causal = true; }});
  cases.push_back({.name = "causal", .n_q = 123, .n_kv = 123, .sharding = Sharding::zigzag,
                   .set = [](sdpa::Options& o, auto&) { o.causal = true; }});
  cases.push_back({.name = "causal, window_left 30: the ring stops after 2 steps", .n_q = 400, .n_kv = 400,
                   .set = [](sdpa::Options& o, auto&) { o.causal = true; o.window_left = 30; }, .expect_steps = 2});
  cases.push_back({.name = "window [25, 10], not causal", .n_q = 150, .n_kv = 150, .sharding = Sharding::zigzag,
                   .set = [](sdpa::Options& o, auto&) { o.window_left = 25; o.window_right = 10; }});
  cases.push_back({.name = "causal, ALiBi, softcap 5", .n_q = 97, .n_kv = 97, .sharding = Sharding::zigzag,
                   .set = [H](sdpa::Options& o, std::vector<float>& s) {
                     o.causal = true;
                     o.softcap = 5;
                     for (int h = 0; h < H; ++h) s.push_back(0.5f / float(1 << h));
                     o.alibi_slopes = TensorView::contiguous(s.data(), {H});
                   }});
  cases.push_back({.name = "causal, key_lengths [93, 41]", .n_q = 100, .n_kv = 100, .sharding = Sharding::zigzag,
                   .set = [](sdpa::Options& o, std::vector<float>& s) {
                     static std::int64_t lengths[2] = {93, 41};
                     (void)s;
                     o.causal = true;
                     o.key_lengths = TensorView::contiguous(lengths, sdpa::DType::i64, {2});
                   }});
  cases.push_back({.name = "causal bottom-right, Nq=60 < Nkv=130", .n_q = 60, .n_kv = 130,
                   .set = [](sdpa::Options& o, auto&) { o.causal = true; }});
  cases.push_back({.name = "sinks, scale 0.3, d=24, dv=8", .d = 24, .dv = 8, .sharding = Sharding::zigzag,
                   .set = [H](sdpa::Options& o, std::vector<float>& s) {
                     for (int h = 0; h < H; ++h) s.push_back(0.5f * float(h) - 0.5f);
                     o.sinks = TensorView::contiguous(s.data(), {H});
                     o.scale = 0.3;
                     o.causal = true;
                   }});
  cases.push_back({.name = "N=5: ranks with no rows", .n_q = 5, .n_kv = 5, .sharding = Sharding::zigzag,
                   .set = [](sdpa::Options& o, auto&) { o.causal = true; }});
  for (const Case& c : cases) {
    try {
      run_case(c);
    } catch (const std::exception& e) {
      std::printf("rank %d: %s: %s\n", g_rank, c.name.c_str(), e.what());
      ++g_failures;
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  run_error_case();
  int all = 0;
  MPI_Allreduce(&g_failures, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%s\n", all ? "FAILED" : "all passed");
  MPI_Finalize();
  return all ? 1 : 0;
}
