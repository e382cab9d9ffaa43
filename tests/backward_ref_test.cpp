// The float64 backward oracle against central finite differences of the
// float64 forward oracle, feature by feature.
//
// The loss is L = sum(O ∘ G) for a fixed random G, so dL/dO = G is the d_o
// of the backward call, and every dL/dq, dk, dv (and dsinks) the oracle
// returns must match (L(x + h) - L(x - h)) / 2h. Visibility and the dropout
// mask do not depend on the data, so L is smooth in every input and the
// central difference is accurate to O(h²) plus rounding: with h = 1e-5 both
// stay near 1e-7 of the gradient, well inside the 1e-6 the tests ask.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/serving.h"
#include "support/problem.h"

namespace sdpa {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> randn64(std::size_t n, std::uint64_t seed) {
  const std::vector<float> x = test::randn(n, seed);
  return {x.begin(), x.end()};
}

// One attention problem in float64, dense [B, heads, N, X] or packed
// [rows, heads, X], with the finite differences of its loss.
struct Case {
  std::int64_t b = 2, h = 2, h_kv = 2, n_q = 5, n_kv = 7, d = 3, dv = 3;
  // Packed: sequence lengths as prefix sums (b is then their count).
  bool packed = false;
  std::vector<std::int64_t> cu_q, cu_k;
  std::vector<double> q, k, v, g;
  std::vector<float> sinks;  // empty: no sinks
  Options opt;
  std::uint64_t seed = 1;

  std::int64_t rows_q() const { return packed ? cu_q.back() : b * n_q; }
  std::int64_t rows_k() const { return packed ? cu_k.back() : b * n_kv; }

  // Fills q, k, v and G; the inputs are scaled up a little so that the
  // softmax is far from uniform.
  void init() {
    if (packed) b = static_cast<std::int64_t>(cu_q.size()) - 1;
    q = randn64(rows_q() * h * d, seed);
    k = randn64(rows_k() * h_kv * d, seed + 1);
    v = randn64(rows_k() * h_kv * dv, seed + 2);
    g = randn64(rows_q() * h * dv, seed + 3);
    for (double& x : q) x *= 1.5;
  }

  TensorView view(const void* data, DType dt, std::int64_t heads, std::int64_t n, std::int64_t x) const {
    if (packed) return TensorView::contiguous(data, dt, {n, heads, x});
    return TensorView::contiguous(data, dt, {b, heads, n / b, x});
  }
  TensorView cu(const std::vector<std::int64_t>& c) const {
    return TensorView::contiguous(c.data(), DType::i64, {static_cast<std::int64_t>(c.size())});
  }
  Options options() const {
    Options o = opt;
    if (!sinks.empty()) o.sinks = TensorView::contiguous(sinks.data(), {h});
    return o;
  }

  // O (and lse when wanted) of the float64 forward oracle.
  std::vector<double> forward(std::vector<double>* lse = nullptr) const {
    std::vector<double> o(static_cast<std::size_t>(rows_q() * h * dv), kNaN);
    Options o_opt = options();
    if (lse) {
      lse->assign(static_cast<std::size_t>(rows_q() * h), kNaN);
      o_opt.lse = packed ? TensorView::contiguous(lse->data(), {h, rows_q()})
                         : TensorView::contiguous(lse->data(), {b, h, n_q});
    }
    const TensorView qv = view(q.data(), DType::f64, h, rows_q(), d), kv = view(k.data(), DType::f64, h_kv, rows_k(), d),
                     vv = view(v.data(), DType::f64, h_kv, rows_k(), dv), ov = view(o.data(), DType::f64, h, rows_q(), dv);
    if (packed)
      attention_varlen(qv, kv, vv, ov, cu(cu_q), cu(cu_k), o_opt, -1, -1, /*reference=*/true);
    else
      reference_attention(qv, kv, vv, ov, o_opt);
    return o;
  }

  double loss() const {
    const std::vector<double> o = forward();
    double sum = 0;
    for (std::size_t e = 0; e < o.size(); ++e) sum += o[e] * g[e];
    return sum;
  }

  struct Grads {
    std::vector<double> dq, dk, dv, dsinks;
  };

  // The backward oracle's gradients (outputs start as NaN: every element must be written).
  Grads backward() const {
    std::vector<double> lse;
    const std::vector<double> o = forward(&lse);
    Grads r;
    r.dq.assign(q.size(), kNaN);
    r.dk.assign(k.size(), kNaN);
    r.dv.assign(v.size(), kNaN);
    Gradients gv{.dq = view(r.dq.data(), DType::f64, h, rows_q(), d),
                 .dk = view(r.dk.data(), DType::f64, h_kv, rows_k(), d),
                 .dv = view(r.dv.data(), DType::f64, h_kv, rows_k(), dv),
                 .dsinks = {}};
    if (!sinks.empty()) {
      r.dsinks.assign(static_cast<std::size_t>(h), kNaN);
      gv.dsinks = TensorView::contiguous(r.dsinks.data(), {h});
    }
    const TensorView qv = view(q.data(), DType::f64, h, rows_q(), d), kv = view(k.data(), DType::f64, h_kv, rows_k(), d),
                     vv = view(v.data(), DType::f64, h_kv, rows_k(), dv), ov = view(o.data(), DType::f64, h, rows_q(), dv),
                     gov = view(g.data(), DType::f64, h, rows_q(), dv);
    const Options bo = options();
    if (packed) {
      const TensorView lv = TensorView::contiguous(lse.data(), {h, rows_q()});
      attention_varlen_backward(qv, kv, vv, ov, lv, gov, gv, cu(cu_q), cu(cu_k), bo, -1, -1, /*reference=*/true);
    } else {
      const TensorView lv = TensorView::contiguous(lse.data(), {b, h, n_q});
      reference_attention_backward(qv, kv, vv, ov, lv, gov, gv, bo);
    }
    return r;
  }

  // Central differences of the loss in every element of x (a member of this case).
  std::vector<double> numeric(std::vector<double>& x, double step = 1e-5) {
    std::vector<double> r(x.size());
    for (std::size_t e = 0; e < x.size(); ++e) {
      const double keep = x[e];
      x[e] = keep + step;
      const double up = loss();
      x[e] = keep - step;
      const double down = loss();
      x[e] = keep;
      r[e] = (up - down) / (2 * step);
    }
    return r;
  }
  // The sinks are float32: the step is the one float32 actually takes.
  std::vector<double> numeric_sinks(float step = 1.0f / 16384) {
    std::vector<double> r(sinks.size());
    for (std::size_t e = 0; e < sinks.size(); ++e) {
      const float keep = sinks[e];
      const float hi = keep + step, lo = keep - step;
      sinks[e] = hi;
      const double up = loss();
      sinks[e] = lo;
      const double down = loss();
      sinks[e] = keep;
      r[e] = (up - down) / (static_cast<double>(hi) - static_cast<double>(lo));
    }
    return r;
  }
};

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::abs(e));
  return m;
}

// Every element within rtol of the analytic value, relative to the larger of
// that value and a thousandth of the tensor's largest (central differences of
// a loss of size ~1 carry an absolute error of ~1e-11 from rounding).
// SDPA_TEST_VERBOSE=1 prints the worst error of each comparison.
void expect_close(const std::vector<double>& analytic, const std::vector<double>& numeric, const std::string& what,
                  double rtol = 1e-6) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  const double floor = 1e-3 * max_abs(analytic) + 1e-9;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t e = 0; e < analytic.size(); ++e) {
    ASSERT_TRUE(std::isfinite(analytic[e])) << what << "[" << e << "] = " << analytic[e];
    const double err = std::abs(analytic[e] - numeric[e]) / std::max(std::abs(analytic[e]), floor);
    if (err > worst) {
      worst = err;
      at = e;
    }
  }
  if (std::getenv("SDPA_TEST_VERBOSE")) std::printf("%s: worst relative error %.3g\n", what.c_str(), worst);
  EXPECT_LE(worst, rtol) << what << ": worst at [" << at << "]: analytic " << analytic[at] << ", numeric "
                         << numeric[at];
}

// The oracle's gradients against finite differences; each gradient must
// also be non-trivial (unless `nontrivial` is false).
void check(Case& c, bool nontrivial = true) {
  c.init();
  const Case::Grads a = c.backward();
  expect_close(a.dq, c.numeric(c.q), "dq");
  expect_close(a.dk, c.numeric(c.k), "dk");
  expect_close(a.dv, c.numeric(c.v), "dv");
  if (!c.sinks.empty()) expect_close(a.dsinks, c.numeric_sinks(), "dsinks");
  if (nontrivial) {
    EXPECT_GT(max_abs(a.dq), 1e-3);
    EXPECT_GT(max_abs(a.dk), 1e-3);
    EXPECT_GT(max_abs(a.dv), 1e-3);
  }
}

TEST(BackwardRef, plain) {
  Case c;
  check(c);
}

TEST(BackwardRef, small_odd_sizes) {
  Case c;
  c.b = 1;
  c.h = c.h_kv = 1;
  c.n_q = 5;
  c.n_kv = 7;
  c.d = 3;
  c.dv = 3;
  check(c);
  Case one;
  one.b = one.h = one.h_kv = one.n_q = one.n_kv = 1;
  one.d = one.dv = 1;
  one.init();
  // One key: P = 1, O = v, so dv = G and dq = dk = 0.
  const Case::Grads a = one.backward();
  EXPECT_DOUBLE_EQ(a.dv[0], one.g[0]);
  EXPECT_EQ(a.dq[0], 0.0);
  EXPECT_EQ(a.dk[0], 0.0);
}

TEST(BackwardRef, causal_bottom_right_and_top_left) {
  for (Align align : {Align::bottom_right, Align::top_left}) {
    for (auto [nq, nkv] : {std::pair{5, 7}, std::pair{6, 6}, std::pair{4, 3}}) {
      SCOPED_TRACE(testing::Message() << "align " << static_cast<int>(align) << " Nq=" << nq << " Nkv=" << nkv);
      Case c;
      c.n_q = nq;
      c.n_kv = nkv;
      c.opt.causal = true;
      c.opt.align = align;
      check(c);
    }
  }
}

TEST(BackwardRef, position_offsets) {
  std::vector<std::int64_t> offsets = {-2, 3};
  Case c;
  c.opt.causal = true;
  c.opt.position_offsets = TensorView::contiguous(offsets.data(), DType::i64, {2});
  check(c);
}

TEST(BackwardRef, sliding_window) {
  Case c;
  c.n_q = 6;
  c.n_kv = 9;
  c.opt.window_left = 2;
  c.opt.window_right = 1;
  check(c);
  Case causal_window = c;
  causal_window.opt.causal = true;
  causal_window.opt.window_right = -1;
  check(causal_window);
}

TEST(BackwardRef, key_lengths_padding_gets_zero_gradient) {
  std::vector<std::int32_t> lens = {7, 3};
  Case c;
  c.opt.key_lengths = TensorView::contiguous(lens.data(), DType::i32, {2});
  check(c);
  const Case::Grads a = c.backward();
  for (std::int64_t hk = 0; hk < c.h_kv; ++hk)
    for (std::int64_t j = 3; j < c.n_kv; ++j) {
      for (std::int64_t x = 0; x < c.d; ++x) EXPECT_EQ(a.dk[((c.h_kv + hk) * c.n_kv + j) * c.d + x], 0.0);
      for (std::int64_t x = 0; x < c.dv; ++x) EXPECT_EQ(a.dv[((c.h_kv + hk) * c.n_kv + j) * c.dv + x], 0.0);
    }
}

TEST(BackwardRef, bool_mask_broadcast) {
  std::mt19937 rng(5);
  {
    Case c;
    std::vector<std::uint8_t> m(c.n_q * c.n_kv);
    for (auto& e : m) e = rng() % 3 != 0;
    c.opt.mask = TensorView::contiguous(m.data(), DType::boolean, {1, 1, c.n_q, c.n_kv});
    SCOPED_TRACE("[1, 1, Nq, Nkv]");
    check(c);
  }
  {
    Case c;
    std::vector<std::uint8_t> m(c.b * c.n_kv);
    for (auto& e : m) e = rng() % 3 != 0;
    c.opt.mask = TensorView::contiguous(m.data(), DType::boolean, {c.b, 1, 1, c.n_kv});
    SCOPED_TRACE("[B, 1, 1, Nkv]");
    check(c);
  }
}

TEST(BackwardRef, float_mask) {
  Case c;
  std::vector<double> m = randn64(c.b * c.h * c.n_q * c.n_kv, 77);
  for (std::size_t e = 0; e < m.size(); e += 5) m[e] = -kInf;  // some keys disabled
  c.opt.mask = TensorView::contiguous(m.data(), {c.b, c.h, c.n_q, c.n_kv});
  SCOPED_TRACE("float64 [B, H, Nq, Nkv]");
  check(c);
  Case f = c;
  std::vector<float> m1 = test::randn(f.n_kv, 78);
  f.opt.mask = TensorView::contiguous(m1.data(), {f.n_kv});
  SCOPED_TRACE("float32 [Nkv]");
  check(f);
}

TEST(BackwardRef, alibi) {
  std::vector<float> slopes = {0.5f, 0.125f};
  Case c;
  c.opt.alibi_slopes = TensorView::contiguous(slopes.data(), {2});
  c.opt.causal = true;
  check(c);
  std::vector<float> per_batch = {0.25f, 1.0f, 0.0625f, 0.5f};
  Case bh;
  bh.opt.alibi_slopes = TensorView::contiguous(per_batch.data(), {2, 2});
  check(bh);
}

TEST(BackwardRef, softcap) {
  for (double cap : {0.5, 2.0, 30.0}) {
    SCOPED_TRACE(testing::Message() << "softcap " << cap);
    Case c;
    c.opt.softcap = cap;
    c.opt.scale = 1.3;
    check(c);
  }
}

TEST(BackwardRef, sinks) {
  Case c;
  c.sinks = {0.75f, -1.25f};
  check(c);
  Case causal = c;
  causal.n_q = 6;
  causal.n_kv = 4;  // rows 0, 1 see only the sink
  causal.opt.causal = true;
  check(causal);
}

TEST(BackwardRef, gqa_and_mqa) {
  Case gqa;
  gqa.h = 4;
  gqa.h_kv = 2;
  gqa.opt.causal = true;
  check(gqa);
  Case mqa;
  mqa.h = 3;
  mqa.h_kv = 1;
  check(mqa);
}

TEST(BackwardRef, dv_differs_from_d) {
  Case c;
  c.d = 3;
  c.dv = 5;
  check(c);
  Case narrow;
  narrow.d = 6;
  narrow.dv = 1;
  check(narrow);
}

TEST(BackwardRef, custom_scale) {
  Case c;
  c.opt.scale = 0.7;
  check(c);
}

TEST(BackwardRef, packed_varlen) {
  Case c;
  c.packed = true;
  c.h = 4;
  c.h_kv = 2;
  c.d = 3;
  c.dv = 4;
  c.cu_q = {0, 3, 3, 7, 9};  // an empty query sequence, and one longer than its keys
  c.cu_k = {0, 4, 6, 11, 11};  // and one with no keys (its queries see nothing)
  c.opt.causal = true;
  check(c);
  // The rows of the last sequence see no key: their dq is 0.
  const Case::Grads a = c.backward();
  for (std::int64_t r = 7; r < 9; ++r)
    for (std::int64_t x = 0; x < c.h * c.d; ++x) EXPECT_EQ(a.dq[r * c.h * c.d + x], 0.0);
}

TEST(BackwardRef, packed_varlen_with_sinks_window_and_dropout) {
  Case c;
  c.packed = true;
  c.h = 2;
  c.h_kv = 1;
  c.cu_q = {0, 5, 7};
  c.cu_k = {0, 6, 10};
  c.sinks = {0.5f, -0.5f};
  c.opt.window_left = 2;
  c.opt.dropout_p = 0.25;
  c.opt.dropout_seed = 99;
  c.opt.dropout_offset = 3;
  check(c);
}

TEST(BackwardRef, dropout) {
  for (double p : {0.1, 0.5}) {
    SCOPED_TRACE(testing::Message() << "dropout_p " << p);
    Case c;
    c.n_q = 6;
    c.n_kv = 9;
    c.opt.dropout_p = p;
    c.opt.dropout_seed = 0x123456789abcdefull;
    c.opt.dropout_offset = 11;
    check(c);
  }
}

TEST(BackwardRef, rows_that_see_nothing_get_zero_gradient) {
  Case c;
  c.n_q = 6;
  c.n_kv = 4;
  c.opt.causal = true;  // bottom-right: queries 0 and 1 see no key
  check(c);
  const Case::Grads a = c.backward();
  for (std::int64_t b = 0; b < c.b; ++b)
    for (std::int64_t h = 0; h < c.h; ++h)
      for (std::int64_t i = 0; i < 2; ++i)
        for (std::int64_t x = 0; x < c.d; ++x) EXPECT_EQ(a.dq[((b * c.h + h) * c.n_q + i) * c.d + x], 0.0);
}

TEST(BackwardRef, every_feature_at_once) {
  std::vector<float> slopes = {0.25f, 0.5f, 0.125f, 1.0f};
  std::vector<std::int64_t> lens = {6, 8};
  std::vector<float> fm = test::randn(4 * 5 * 8, 31);
  Case c;
  c.h = 4;
  c.h_kv = 2;
  c.n_q = 5;
  c.n_kv = 8;
  c.d = 4;
  c.dv = 3;
  c.sinks = {0.1f, -0.3f, 1.2f, 0.0f};
  c.opt.causal = true;
  c.opt.window_left = 4;
  c.opt.key_lengths = TensorView::contiguous(lens.data(), DType::i64, {2});
  c.opt.mask = TensorView::contiguous(fm.data(), {1, 4, 5, 8});
  c.opt.alibi_slopes = TensorView::contiguous(slopes.data(), {4});
  c.opt.softcap = 1.5;
  c.opt.scale = 0.9;
  c.opt.dropout_p = 0.2;
  c.opt.dropout_seed = 7;
  c.opt.dropout_offset = 1;
  check(c);
}

// o and lse are checked but not read, float32 inputs and outputs work, and
// outputs in their own layouts (here [B, N, H, X] memory) get the same values.
TEST(BackwardRef, layouts_dtypes_and_saved_outputs_not_read) {
  Case c;
  c.h = 4;
  c.h_kv = 2;
  c.sinks = {0.5f, 0.25f, -1.0f, 2.0f};
  c.opt.causal = true;
  c.opt.dropout_p = 0.3;
  c.init();
  auto f32 = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const std::vector<float> q = f32(c.q), k = f32(c.k), v = f32(c.v), g = f32(c.g);
  c.q.assign(q.begin(), q.end());  // the float64 inputs are then exactly the float32 ones
  const Case::Grads want = c.backward();
  std::vector<float> o(c.g.size(), NAN), lse(c.b * c.h * c.n_q, NAN);  // never read
  std::vector<float> dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN), dsinks(c.h, NAN);
  Gradients gv{.dq = TensorView::bshd(dq.data(), c.b, c.n_q, c.h, c.d),
               .dk = TensorView::bshd(dk.data(), c.b, c.n_kv, c.h_kv, c.d),
               .dv = TensorView::bshd(dv.data(), c.b, c.n_kv, c.h_kv, c.dv),
               .dsinks = TensorView::contiguous(dsinks.data(), {c.h})};
  reference_attention_backward(TensorView::contiguous(q.data(), {c.b, c.h, c.n_q, c.d}),
                               TensorView::contiguous(k.data(), {c.b, c.h_kv, c.n_kv, c.d}),
                               TensorView::contiguous(v.data(), {c.b, c.h_kv, c.n_kv, c.dv}),
                               TensorView::contiguous(o.data(), {c.b, c.h, c.n_q, c.dv}),
                               TensorView::contiguous(lse.data(), {c.b, c.h, c.n_q}),
                               TensorView::contiguous(g.data(), {c.b, c.h, c.n_q, c.dv}), gv, c.options());
  // want is [B, heads, N, X]; the float32 outputs are [B, N, heads, X] memory.
  auto expect_bshd = [](const std::vector<double>& w, const std::vector<float>& got, std::int64_t b, std::int64_t heads,
                        std::int64_t n, std::int64_t x, const char* what) {
    for (std::int64_t bi = 0; bi < b; ++bi)
      for (std::int64_t hi = 0; hi < heads; ++hi)
        for (std::int64_t ni = 0; ni < n; ++ni)
          for (std::int64_t xi = 0; xi < x; ++xi)
            ASSERT_EQ(got[((bi * n + ni) * heads + hi) * x + xi],
                      static_cast<float>(w[((bi * heads + hi) * n + ni) * x + xi]))
                << what << " at " << bi << "," << hi << "," << ni << "," << xi;
  };
  expect_bshd(want.dq, dq, c.b, c.h, c.n_q, c.d, "dq");
  expect_bshd(want.dk, dk, c.b, c.h_kv, c.n_kv, c.d, "dk");
  expect_bshd(want.dv, dv, c.b, c.h_kv, c.n_kv, c.dv, "dv");
  for (std::int64_t h = 0; h < c.h; ++h) EXPECT_EQ(dsinks[h], static_cast<float>(want.dsinks[h]));
}

// NaN and Inf in the data reach the gradients of exactly the rows that read them.
TEST(BackwardRef, nan_and_inf_propagate) {
  Case c;
  c.b = 1;
  c.h = c.h_kv = 1;
  c.n_q = c.n_kv = 4;
  c.opt.causal = true;  // query i sees keys 0..i
  c.init();
  c.v[2 * c.dv + 1] = kNaN;  // value of key 2: read by queries 2 and 3
  Case::Grads a = c.backward();
  for (std::int64_t i = 0; i < c.n_q; ++i)
    for (std::int64_t x = 0; x < c.d; ++x)
      EXPECT_EQ(std::isnan(a.dq[i * c.d + x]), i >= 2) << "dq row " << i;
  c.init();
  // Key 0 scores -inf for query 0 (its only key): softmax over {-inf} is NaN.
  for (std::int64_t x = 0; x < c.d; ++x) c.k[x] = c.q[x] > 0 ? -kInf : kInf;
  for (std::int64_t x = 0; x < c.d; ++x) c.q[x] = c.q[x] == 0 ? 1.0 : c.q[x];
  a = c.backward();
  EXPECT_TRUE(std::isnan(a.dq[0]));
  const std::vector<double> o = c.forward();
  EXPECT_TRUE(std::isnan(o[0]));
}

}  // namespace
}  // namespace sdpa
