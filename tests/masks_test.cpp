// Masks and score modifiers, fast path against the oracle for every ISA:
// explicit bool / float / float16 masks of every broadcast shape, alignment,
// per-batch offsets, key padding, sliding windows, ALiBi, softcap, sinks, the
// scores output at each stage, and the one contract for empty rows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>
#include <limits>
#include <random>
#include <vector>

#include "half.h"
#include "support/problem.h"

namespace sdpa::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

class Masks : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
  }
  Problem problem(std::int64_t b, std::int64_t h, std::int64_t h_kv, std::int64_t n_q, std::int64_t n_kv,
                  std::int64_t d, std::int64_t dv) const {
    Problem pb;
    pb.isa = GetParam();
    pb.b = b, pb.h = h, pb.h_kv = h_kv, pb.n_q = n_q, pb.n_kv = n_kv, pb.d = d, pb.dv = dv;
    pb.threads = 2;
    return pb;
  }
};

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

// Runs both paths and compares O and lse. `bias` is the largest |additive term|
// (float mask, ALiBi) on a visible score: it is added in float, so it adds
// eps·bias to every score's error (4 of them per weight, as in tolerance_o).
void expect_matches_oracle(Buffers& buf, double bias = 0) {
  buf.run_fast();
  buf.run_reference();
  const Problem& pb = buf.pb;
  const double mq = max_abs(buf.q), mk = max_abs(buf.k), mv = max_abs(buf.v);
  const double extra = 8 * std::numeric_limits<float>::epsilon() * bias;
  const Worst wo = worst_o(buf);
  EXPECT_LE(wo.err, tolerance_o(pb, mq, mk, mv) + extra * mv) << pb << "\n" << wo.describe();
  const Worst wl = worst_lse(buf);
  EXPECT_LE(wl.err, tolerance_lse(pb, mq, mk) + extra) << pb << "\n lse " << wl.describe();
  for (float x : buf.o) ASSERT_FALSE(std::isnan(x)) << pb;
}

TEST_P(Masks, bool_mask_every_broadcast_shape) {
  const Problem pb = problem(2, 4, 2, 37, 70, 16, 8);
  const std::vector<std::vector<std::int64_t>> shapes = {
      {70}, {37, 70}, {1, 70}, {2, 1, 1, 70}, {1, 4, 37, 70}, {2, 4, 37, 70}, {4, 1, 70}, {2, 4, 37, 1}};
  std::mt19937 rng(3);
  for (const auto& shape : shapes) {
    std::int64_t n = 1;
    for (auto x : shape) n *= x;
    std::vector<std::uint8_t> bytes(n);
    for (auto& x : bytes) x = rng() % 4 != 0;  // 75% may attend
    if (shape.size() >= 2) std::fill(bytes.begin(), bytes.begin() + shape.back(), 0);  // one row fully masked
    Buffers buf(pb);
    TensorView m;
    m.data = bytes.data();
    m.dtype = DType::boolean;
    m.rank = static_cast<int>(shape.size());
    std::int64_t st = 1;
    for (int a = m.rank - 1; a >= 0; --a) {
      m.shape[a] = shape[a];
      m.stride[a] = st;
      st *= shape[a];
    }
    buf.base.mask = m;
    SCOPED_TRACE(m.shape_string());
    expect_matches_oracle(buf);
  }
}

TEST_P(Masks, float_and_fp16_masks_add_to_scores) {
  const Problem pb = problem(1, 2, 1, 50, 90, 32, 32);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> add(pb.n_q * pb.n_kv);
  for (auto& x : add) x = rng() % 5 == 0 ? -kInf : normal(rng);
  for (std::int64_t j = 0; j < pb.n_kv; ++j) add[7 * pb.n_kv + j] = -kInf;  // query 7 sees nothing
  std::vector<std::uint16_t> half(add.size());
  for (std::size_t i = 0; i < add.size(); ++i) {
    half[i] = float_to_half(add[i]);
    add[i] = half_to_float(half[i]);  // the same values in both dtypes
  }
  for (DType dt : {DType::f32, DType::f16}) {
    Buffers buf(pb);
    buf.base.mask = TensorView::contiguous(dt == DType::f32 ? static_cast<const void*>(add.data()) : half.data(), dt,
                                           {pb.n_q, pb.n_kv});
    expect_matches_oracle(buf, 12.0);
    for (std::int64_t c = 0; c < pb.dv; ++c) EXPECT_EQ(buf.o[buf.o_index(0, 1, 7, c)], 0.0f);
    EXPECT_EQ(buf.lse[pb.n_q + 7], -kInf);
  }
}

TEST_P(Masks, alignment_top_left_and_per_batch_offsets) {
  for (auto [n_q, n_kv] : std::vector<std::pair<int, int>>{{40, 100}, {100, 40}, {64, 64}}) {
    Problem pb = problem(3, 2, 2, n_q, n_kv, 16, 16);
    pb.causal = true;
    Buffers top(pb);
    top.base.align = Align::top_left;
    expect_matches_oracle(top);
    std::vector<std::int64_t> offs = {-5, 0, 37};
    Buffers per(pb);
    per.base.position_offsets = TensorView::contiguous(offs.data(), DType::i64, {3});
    expect_matches_oracle(per);
  }
}

TEST_P(Masks, key_lengths_pad_each_batch_entry) {
  Problem pb = problem(3, 4, 2, 20, 130, 16, 16);
  std::vector<std::int32_t> lens = {130, 0, 61};
  for (bool causal : {false, true}) {
    pb.causal = causal;
    Buffers buf(pb);
    buf.base.key_lengths = TensorView::contiguous(lens.data(), DType::i32, {3});
    // Garbage past each length must not matter.
    for (std::int64_t h = 0; h < pb.h_kv; ++h)
      for (std::int64_t j = 61; j < pb.n_kv; ++j) buf.v[((2 * pb.h_kv + h) * pb.n_kv + j) * pb.dv] = std::nanf("");
    expect_matches_oracle(buf);
  }
}

TEST_P(Masks, sliding_windows) {
  for (auto [left, right, causal] : std::vector<std::tuple<int, int, bool>>{
           {16, 0, true}, {0, 0, false}, {5, 9, false}, {-1, 3, false}, {70, -1, false}, {200, 200, true}}) {
    Problem pb = problem(1, 4, 1, 150, 170, 32, 16);
    pb.causal = causal;
    Buffers buf(pb);
    buf.base.window_left = left;
    buf.base.window_right = right;
    SCOPED_TRACE(::testing::Message() << "window (" << left << ", " << right << ") causal " << causal);
    expect_matches_oracle(buf);
  }
}

TEST_P(Masks, alibi_slopes_per_head_and_per_batch) {
  Problem pb = problem(2, 4, 2, 60, 80, 16, 16);
  pb.causal = true;
  std::vector<float> per_head = {0.5f, 0.25f, 0.125f, 0.0625f};
  std::vector<float> per_batch = {0.5f, 0.25f, 0.125f, 0.0625f, 1.0f, 0.1f, 0.01f, 0.0f};
  Buffers a(pb);
  a.base.alibi_slopes = TensorView::contiguous(per_head.data(), {4});
  expect_matches_oracle(a, 0.5 * 80);
  Buffers b(pb);
  b.base.alibi_slopes = TensorView::contiguous(per_batch.data(), {2, 4});
  expect_matches_oracle(b, 80);
}

TEST_P(Masks, softcap_bounds_scores_before_the_mask) {
  Problem pb = problem(1, 2, 2, 40, 50, 8, 8);
  pb.causal = true;
  Buffers buf(pb);
  for (float& x : buf.q) x *= 30;  // scores far beyond the cap
  buf.base.softcap = 5.0;
  expect_matches_oracle(buf);
  buf.base.scores = TensorView();
  std::vector<float> sc(pb.h * pb.n_q * pb.n_kv);
  Options opt = buf.options();
  opt.scores = TensorView::contiguous(sc.data(), {1, pb.h, pb.n_q, pb.n_kv});
  opt.scores_stage = ScoresStage::softcapped;
  attention(buf.q_view(), buf.k_view(), buf.v_view(), buf.o_view(), opt);
  for (float x : sc) EXPECT_LE(std::abs(x), 5.0f);
}

TEST_P(Masks, sinks_join_the_denominator) {
  Problem pb = problem(1, 4, 2, 30, 40, 16, 16);
  pb.causal = true;
  std::vector<float> sinks = {0.0f, 3.0f, -2.0f, 50.0f};
  Buffers buf(pb);
  buf.base.sinks = TensorView::contiguous(sinks.data(), {4});
  expect_matches_oracle(buf);
  // A sink of 50 dwarfs every score: head 3's output is close to 0.
  for (std::int64_t c = 0; c < pb.dv; ++c) EXPECT_NEAR(buf.o[buf.o_index(0, 3, 29, c)], 0.0f, 1e-15);
}

TEST_P(Masks, scores_output_at_every_stage) {
  Problem pb = problem(2, 2, 1, 33, 47, 16, 8);
  pb.causal = true;
  std::vector<std::uint8_t> keep(pb.n_kv, 1);
  keep[3] = 0;
  for (auto stage : {ScoresStage::scaled, ScoresStage::softcapped, ScoresStage::masked, ScoresStage::probabilities}) {
    Buffers buf(pb);
    buf.base.softcap = 2.0;
    TensorView m = TensorView::contiguous(keep.data(), DType::boolean, {pb.n_kv});
    buf.base.mask = m;
    std::vector<float> got(pb.b * pb.h * pb.n_q * pb.n_kv);
    std::vector<double> want(got.size());
    Options opt = buf.options();
    opt.scores_stage = stage;
    opt.scores = TensorView::contiguous(got.data(), {pb.b, pb.h, pb.n_q, pb.n_kv});
    attention(buf.q_view(), buf.k_view(), buf.v_view(), buf.o_view(), opt);
    opt.scores = TensorView::contiguous(want.data(), {pb.b, pb.h, pb.n_q, pb.n_kv});
    reference_attention(buf.q_view(), buf.k_view(), buf.v_view(), buf.o_ref_view(), opt);
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::isinf(want[i])) {
        ASSERT_EQ(got[i], want[i]) << "stage " << int(stage) << " at " << i;
      } else {
        ASSERT_NEAR(got[i], want[i], 1e-5) << "stage " << int(stage) << " at " << i;
      }
    }
  }
}

TEST_P(Masks, masked_values_are_never_read) {
  // NaN and 1e30 in V at keys the mask disables change nothing.
  Problem pb = problem(1, 1, 1, 20, 64, 8, 8);
  std::vector<std::uint8_t> keep(pb.n_q * pb.n_kv, 1);
  for (std::int64_t i = 0; i < pb.n_q; ++i) keep[i * pb.n_kv + 10] = keep[i * pb.n_kv + 11] = 0;
  keep[5 * pb.n_kv + 12] = 0;  // only query 5 ignores key 12
  Buffers clean(pb);
  clean.base.mask = TensorView::contiguous(keep.data(), DType::boolean, {pb.n_q, pb.n_kv});
  clean.run_fast();
  Buffers dirty(pb);
  dirty.base.mask = clean.base.mask;
  for (std::int64_t c = 0; c < pb.dv; ++c) {
    dirty.v[10 * pb.dv + c] = std::nanf("");
    dirty.v[11 * pb.dv + c] = 1e30f;
    dirty.v[12 * pb.dv + c] = std::nanf("");
  }
  dirty.run_fast();
  for (std::int64_t i = 0; i < pb.n_q; ++i)
    for (std::int64_t c = 0; c < pb.dv; ++c) {
      const float got = dirty.o[dirty.o_index(0, 0, i, c)];
      if (i == 5)
        EXPECT_EQ(got, clean.o[clean.o_index(0, 0, i, c)]);
      else
        EXPECT_TRUE(std::isnan(got)) << "query " << i << " sees key 12";
    }
}

TEST_P(Masks, every_way_of_emptying_a_row_gives_zero) {
  Problem pb = problem(1, 1, 1, 4, 30, 8, 8);
  std::vector<std::uint8_t> none(pb.n_kv, 0);
  std::vector<float> neg(pb.n_kv, -kInf);
  std::vector<std::int64_t> zero_len = {0};
  std::vector<std::function<void(Options&)>> ways = {
      [&](Options& o) { o.mask = TensorView::contiguous(none.data(), DType::boolean, {pb.n_kv}); },
      [&](Options& o) { o.mask = TensorView::contiguous(neg.data(), {pb.n_kv}); },
      [&](Options& o) { o.key_lengths = TensorView::contiguous(zero_len.data(), DType::i64, {1}); },
  };
  for (std::size_t w = 0; w < 3; ++w) {
    Buffers buf(pb);
    ways[w](buf.base);
    buf.run_fast(true, true);
    for (float x : buf.o) EXPECT_EQ(x, 0.0f) << "way " << w;
    for (float x : buf.lse) EXPECT_EQ(x, -kInf) << "way " << w;
    for (float x : buf.probs) EXPECT_EQ(x, 0.0f) << "way " << w;
  }
  // A window that lies wholly past the keys.
  Buffers buf(pb);
  std::vector<std::int64_t> far = {1000};
  buf.base.position_offsets = TensorView::contiguous(far.data(), DType::i64, {1});
  buf.base.window_left = 5;
  buf.run_fast();
  for (float x : buf.o) EXPECT_EQ(x, 0.0f);
}

TEST_P(Masks, decode_with_masks_uses_split_kv_correctly) {
  Problem pb = problem(2, 8, 2, 1, 3000, 64, 64);
  std::vector<std::int32_t> lens = {2999, 1700};
  std::vector<float> slopes = {0.01f, 0.02f, 0.03f, 0.04f, 0.05f, 0.06f, 0.07f, 0.08f};
  Buffers buf(pb);
  buf.base.key_lengths = TensorView::contiguous(lens.data(), DType::i32, {2});
  buf.base.alibi_slopes = TensorView::contiguous(slopes.data(), {8});
  buf.base.window_left = 2000;
  expect_matches_oracle(buf, 0.08 * 2000);
}

TEST(MaskErrors, bad_modifiers_are_rejected_with_their_names) {
  std::vector<float> q(2 * 4 * 8), k(2 * 6 * 8), v(2 * 6 * 8), o(2 * 4 * 8);
  const TensorView qv = TensorView::contiguous(q.data(), {2, 1, 4, 8}), kv = TensorView::contiguous(k.data(), {2, 1, 6, 8}),
                   vv = TensorView::contiguous(v.data(), {2, 1, 6, 8}), ov = TensorView::contiguous(o.data(), {2, 1, 4, 8});
  auto arg_of = [&](const Options& opt) -> std::string {
    try {
      attention(qv, kv, vv, ov, opt);
    } catch (const Error& e) {
      return e.arg() + " | " + e.what();
    }
    return "accepted";
  };
  std::vector<float> m(5);
  Options a;
  a.mask = TensorView::contiguous(m.data(), {5});
  EXPECT_THAT(arg_of(a), ::testing::StartsWith("mask | mask: expected a shape broadcastable to [B, H, Nq, Nkv] = [2, 1, 4, 6]"));
  std::vector<std::int32_t> lens = {3, 7};
  Options b;
  b.key_lengths = TensorView::contiguous(lens.data(), DType::i32, {2});
  EXPECT_THAT(arg_of(b), ::testing::HasSubstr("key_lengths: expected values in [0, Nkv=6], got 7 at [1]"));
  Options c;
  c.window_left = -2;
  EXPECT_THAT(arg_of(c), ::testing::StartsWith("window_left"));
  Options d;
  d.softcap = -1;
  EXPECT_THAT(arg_of(d), ::testing::StartsWith("softcap"));
  std::vector<float> slopes(3);
  Options e;
  e.alibi_slopes = TensorView::contiguous(slopes.data(), {3});
  EXPECT_THAT(arg_of(e), ::testing::StartsWith("alibi_slopes"));
  std::vector<double> md(6);
  Options f;
  f.mask = TensorView::contiguous(md.data(), {6});
  EXPECT_THAT(arg_of(f), ::testing::HasSubstr("bool, float32 or float16"));
}

INSTANTIATE_TEST_SUITE_P(Isa, Masks, ::testing::ValuesIn(compiled_isas()), isa_param_name);

}  // namespace
}  // namespace sdpa::test
