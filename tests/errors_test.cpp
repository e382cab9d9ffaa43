// Every rejected call throws sdpa::Error naming the argument, what was
// expected and what was given, and writes nothing to the outputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <vector>

#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/serving.h"

namespace sdpa {
namespace {

using ::testing::HasSubstr;

struct Call {
  std::int64_t b = 2, h = 4, h_kv = 2, n_q = 5, n_kv = 6, d = 8, dv = 3;
  std::vector<float> q, k, v, o, lse;
  Options opt;
  TensorView qv, kv, vv, ov;
  Call() {
    q.assign(b * h * n_q * d, 0.5f);
    k.assign(b * h_kv * n_kv * d, 0.25f);
    v.assign(b * h_kv * n_kv * dv, 1.0f);
    o.assign(b * h * n_q * dv, 42.0f);  // sentinel: must survive a rejected call
    lse.assign(b * h * n_q, 42.0f);
    qv = TensorView::contiguous(q.data(), {b, h, n_q, d});
    kv = TensorView::contiguous(k.data(), {b, h_kv, n_kv, d});
    vv = TensorView::contiguous(v.data(), {b, h_kv, n_kv, dv});
    ov = TensorView::contiguous(o.data(), {b, h, n_q, dv});
  }
  void run() { attention(qv, kv, vv, ov, opt); }
};

// Runs the mutated call, expects sdpa::Error mentioning arg and each fragment,
// and checks that O and lse still hold their sentinels.
void expect_rejected(const std::function<void(Call&)>& mutate, const std::string& arg,
                     std::vector<std::string> fragments) {
  Call c;
  mutate(c);
  try {
    c.run();
    ADD_FAILURE() << "accepted a bad call; expected an error about " << arg;
  } catch (const Error& e) {
    EXPECT_EQ(e.arg(), arg) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("expected")) << e.what();
    for (const std::string& f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
  for (float x : c.o) ASSERT_EQ(x, 42.0f) << "O was written by a rejected call";
  for (float x : c.lse) ASSERT_EQ(x, 42.0f) << "lse was written by a rejected call";
}

TEST(Errors, valid_call_is_accepted) {
  Call c;
  c.run();
  EXPECT_FLOAT_EQ(c.o[0], 1.0f);
}

TEST(Errors, wrong_rank) {
  expect_rejected([](Call& c) { c.qv = TensorView::contiguous(c.q.data(), {c.h, c.n_q, c.d}); }, "q",
                  {"4-D", "rank 3"});
}

TEST(Errors, mismatched_batch) {
  expect_rejected([](Call& c) { c.kv.shape[0] = 1; }, "k", {"batch B=2", "got 1"});
}

TEST(Errors, mismatched_head_size) {
  expect_rejected([](Call& c) { c.kv = TensorView::contiguous(c.k.data(), {2, 2, 6, 4}); }, "k", {"head size d=8"});
}

TEST(Errors, heads_not_a_multiple) {
  expect_rejected([](Call& c) { c.kv = TensorView::contiguous(c.k.data(), {2, 3, 4, 8}); }, "k",
                  {"dividing H=4", "got 3"});
}

TEST(Errors, v_keys_differ_from_k) {
  expect_rejected([](Call& c) { c.vv.shape[2] = 5; }, "v", {"keys Nkv=6"});
}

TEST(Errors, output_shape) {
  expect_rejected([](Call& c) { c.ov.shape[3] = 4; }, "o", {"value size dv=3", "got 4"});
  expect_rejected([](Call& c) { c.ov.shape[2] = 4; }, "o", {"queries Nq=5"});
}

TEST(Errors, non_contiguous_last_axis) {
  expect_rejected([](Call& c) { c.qv.stride[3] = 2; }, "q", {"contiguous last axis", "stride 2"});
}

TEST(Errors, null_data_with_elements) {
  expect_rejected([](Call& c) { c.vv.data = nullptr; }, "v", {"non-null", "nullptr"});
}

TEST(Errors, output_overlapping_an_input) {
  expect_rejected([](Call& c) { c.ov.data = c.q.data(); }, "o", {"disjoint from input q"});
  expect_rejected(
      [](Call& c) {
        c.opt.lse = TensorView::contiguous(c.lse.data(), {c.b, c.h, c.n_q});
        c.opt.lse.data = c.o.data();
      },
      "lse", {"disjoint from output o"});
}

// Strides whose overlap shows only across three axes: o [1, 2, 2, 2] with
// strides (8, 3, 2, 1) puts elements (0, 1, 0, 0) and (0, 0, 1, 1) at offset 3.
TEST(Errors, output_whose_elements_overlap_across_three_axes) {
  std::vector<float> q(4, 1.f), k(4, 1.f), v(8, 1.f), o(7, 0.f);
  TensorView ov = TensorView::contiguous(o.data(), {1, 2, 2, 2});
  ov.stride = {8, 3, 2, 1};
  try {
    sdpa::attention(TensorView::contiguous(q.data(), {1, 2, 2, 1}), TensorView::contiguous(k.data(), {1, 2, 2, 1}),
                    TensorView::contiguous(v.data(), {1, 2, 2, 2}), ov, {});
    FAIL() << "an output whose elements overlap was accepted";
  } catch (const sdpa::Error& e) {
    EXPECT_EQ(e.arg(), "o");
    EXPECT_THAT(e.what(), ::testing::HasSubstr("distinct addresses"));
  }
  for (float x : o) EXPECT_EQ(x, 0.f);
}

TEST(Errors, output_overlapping_a_broadcast_input_or_itself) {
  // A float mask [Nkv] that lives inside O.
  expect_rejected([](Call& c) { c.opt.mask = TensorView::contiguous(c.o.data() + 2, {c.n_kv}); }, "o",
                  {"disjoint from input mask"});
  // A zero stride on O's query axis: every query would write the same row.
  expect_rejected([](Call& c) { c.ov.stride[2] = 0; }, "o", {"distinct addresses"});
  // A negative stride that reaches back into K.
  expect_rejected(
      [](Call& c) {
        c.opt.lse = TensorView::contiguous(c.k.data() + c.k.size() - 1, {c.b, c.h, c.n_q});
        c.opt.lse.stride = {-c.h * c.n_q, -c.n_q, 1, 0};
      },
      "lse", {"disjoint from input k"});
}

TEST(Errors, bad_scale) {
  for (double s : {0.0, -1.0, std::nan(""), double(INFINITY), 1e300}) {
    expect_rejected([s](Call& c) { c.opt.scale = s; }, "scale", {"expected"});
  }
}

TEST(Errors, wrong_dtype) {
  expect_rejected([](Call& c) { c.qv.dtype = DType::f64; }, "q", {"float32", "float64"});
}

TEST(Errors, bad_lse_shape) {
  expect_rejected([](Call& c) { c.opt.lse = TensorView::contiguous(c.lse.data(), {c.b, c.h, c.n_q - 1}); }, "lse",
                  {"queries Nq=5"});
}

TEST(Errors, probs_too_large_is_refused) {
  // The size check needs no memory behind the view: it happens before any access.
  expect_rejected(
      [](Call& c) {
        static float dummy;
        c.opt.probs = TensorView::contiguous(&dummy, {c.b, c.h, c.n_q, c.n_kv});
        c.opt.probs.shape = {c.b, c.h, c.n_q, c.n_kv};
        c.opt.probs.stride = {0, 0, 0, 1};
        c.qv.shape[2] = c.ov.shape[2] = c.opt.probs.shape[2] = kMaxProbsElements;  // B*H*Nq*Nkv far too big
        c.qv.stride = {0, 0, 0, 1};
        c.ov.stride = {0, 0, 0, 1};
      },
      "probs", {"at most"});
}

TEST(Errors, bad_threads) {
  expect_rejected([](Call& c) { c.opt.threads = -1; }, "threads", {"got -1"});
}

TEST(Errors, isa_the_cpu_lacks) {
  expect_rejected([](Call& c) { c.opt.isa = Isa::neon; }, "isa", {"this CPU supports", "neon"});
  EXPECT_THROW(parse_isa("sse9"), Error);
}

TEST(Errors, sdpa_isa_environment_variable) {
  ::setenv("SDPA_ISA", "scalar", 1);
  EXPECT_EQ(resolve_isa(Isa::automatic), Isa::scalar);
  ::setenv("SDPA_ISA", "bogus", 1);
  try {
    resolve_isa(Isa::automatic);
    ADD_FAILURE() << "accepted SDPA_ISA=bogus";
  } catch (const Error& e) {
    EXPECT_EQ(e.arg(), "SDPA_ISA");
  }
  ::unsetenv("SDPA_ISA");
  EXPECT_EQ(resolve_isa(Isa::automatic), resolve_isa(Isa::automatic));
  EXPECT_EQ(resolve_isa(Isa::scalar), Isa::scalar);  // an explicit choice wins over the environment
}

TEST(Errors, the_oracle_checks_the_same_invariants) {
  Call c;
  c.kv.shape[0] = 1;
  EXPECT_THROW(reference_attention(c.qv, c.kv, c.vv, c.ov, c.opt), Error);
}

// ---- dropout options ----

TEST(Errors, bad_dropout_p) {
  for (double p : {1.0, -0.1, std::nan(""), 2.0, double(INFINITY)}) {
    expect_rejected([p](Call& c) { c.opt.dropout_p = p; }, "dropout_p", {"[0, 1)"});
  }
}

TEST(Errors, dropout_offset_beyond_32_bits) {
  expect_rejected(
      [](Call& c) {
        c.opt.dropout_p = 0.5;
        c.opt.dropout_offset = std::uint64_t{1} << 32;
      },
      "dropout_offset", {"below 2^32", "4294967296"});
  // Without dropout the offset is not used, so not checked.
  Call c;
  c.opt.dropout_offset = std::uint64_t{1} << 32;
  EXPECT_NO_THROW(c.run());
}

TEST(Errors, bad_dropout_mask) {
  static std::vector<std::uint8_t> mask(2 * 4 * 5 * 6);
  static std::vector<float> fmask(2 * 4 * 5 * 6);
  expect_rejected(
      [](Call& c) {
        c.opt.dropout_p = 0.5;
        c.opt.dropout_mask = TensorView::contiguous(fmask.data(), {c.b, c.h, c.n_q, c.n_kv});
      },
      "dropout_mask", {"bool", "float32"});
  expect_rejected(
      [](Call& c) {
        c.opt.dropout_p = 0.5;
        c.opt.dropout_mask = TensorView::contiguous(mask.data(), DType::boolean, {c.b, c.h, c.n_q, c.n_kv - 1});
      },
      "dropout_mask", {"keys Nkv=6"});
  expect_rejected(
      [](Call& c) { c.opt.dropout_mask = TensorView::contiguous(mask.data(), DType::boolean, {c.b, c.h, c.n_q}); },
      "dropout_mask", {"4-D"});
  expect_rejected(
      [](Call& c) {
        c.opt.dropout_mask = TensorView::contiguous(c.o.data(), DType::boolean, {c.b, c.h, c.n_q, c.n_kv});
        c.opt.dropout_mask.data = c.k.data();
      },
      "dropout_mask", {"disjoint from input k"});
}

TEST(Errors, dropout_mask_with_packed_sequences) {
  std::vector<float> q(8, 1.f), k(8, 1.f), v(8, 1.f), o(8, 42.f);
  std::vector<std::uint8_t> mask(4);
  std::vector<std::int32_t> cu = {0, 2};
  Options opt;
  opt.dropout_p = 0.5;
  opt.dropout_mask = TensorView::contiguous(mask.data(), DType::boolean, {1, 1, 2, 2});
  try {
    attention_varlen(TensorView::contiguous(q.data(), {2, 1, 4}), TensorView::contiguous(k.data(), {2, 1, 4}),
                     TensorView::contiguous(v.data(), {2, 1, 4}), TensorView::contiguous(o.data(), {2, 1, 4}),
                     TensorView::contiguous(cu.data(), DType::i32, {2}), TensorView::contiguous(cu.data(), DType::i32, {2}),
                     opt, -1, -1, true);
    ADD_FAILURE() << "accepted dropout_mask with packed sequences";
  } catch (const Error& e) {
    EXPECT_EQ(e.arg(), "dropout_mask") << e.what();
  }
  for (float x : o) EXPECT_EQ(x, 42.f);
}

// ---- the backward ----

struct BackwardCall : Call {
  std::vector<float> d_o, gq, gk, gv, gs, sinks;  // d_o, the gradients' buffers, sinks
  TensorView lv, dov;
  Gradients g;
  bool reference = true;
  BackwardCall() {
    d_o.assign(o.size(), 1.0f);
    gq.assign(q.size(), 42.0f);  // sentinels: must survive a rejected call
    gk.assign(k.size(), 42.0f);
    gv.assign(v.size(), 42.0f);
    gs.assign(h, 42.0f);
    sinks.assign(h, 0.5f);
    lv = TensorView::contiguous(lse.data(), {b, h, n_q});
    dov = TensorView::contiguous(d_o.data(), {b, h, n_q, dv});
    g.dq = TensorView::contiguous(gq.data(), {b, h, n_q, d});
    g.dk = TensorView::contiguous(gk.data(), {b, h_kv, n_kv, d});
    g.dv = TensorView::contiguous(gv.data(), {b, h_kv, n_kv, dv});
  }
  void run() {
    if (reference)
      reference_attention_backward(qv, kv, vv, ov, lv, dov, g, opt);
    else
      attention_backward(qv, kv, vv, ov, lv, dov, g, opt);
  }
};

void expect_backward_rejected(const std::function<void(BackwardCall&)>& mutate, const std::string& arg,
                              std::vector<std::string> fragments) {
  BackwardCall c;
  mutate(c);
  try {
    c.run();
    ADD_FAILURE() << "accepted a bad backward call; expected an error about " << arg;
  } catch (const Error& e) {
    EXPECT_EQ(e.arg(), arg) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("expected")) << e.what();
    for (const std::string& f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
  for (const auto* out : {&c.gq, &c.gk, &c.gv, &c.gs})
    for (float x : *out) ASSERT_EQ(x, 42.0f) << "a gradient was written by a rejected call";
}

TEST(Errors, valid_backward_call_is_accepted) {
  BackwardCall c;
  c.opt.sinks = TensorView::contiguous(c.sinks.data(), {c.h});
  c.g.dsinks = TensorView::contiguous(c.gs.data(), {c.h});
  c.opt.dropout_p = 0.25;
  c.run();
  EXPECT_NE(c.gq[0], 42.0f);
  EXPECT_NE(c.gs[0], 42.0f);
}

TEST(Errors, backward_dsinks_without_sinks) {
  expect_backward_rejected([](BackwardCall& c) { c.g.dsinks = TensorView::contiguous(c.gs.data(), {c.h}); },
                           "dsinks", {"sinks is unset"});
  expect_backward_rejected(
      [](BackwardCall& c) {
        c.opt.sinks = TensorView::contiguous(c.sinks.data(), {c.h});
        c.g.dsinks = TensorView::contiguous(c.gs.data(), {c.h - 1});
      },
      "dsinks", {"heads H=4"});
}

// Zero query heads: sinks and dsinks [0] may have null data (an empty
// std::vector's), and are still set, so dsinks is accepted.
TEST(Errors, backward_dsinks_with_zero_heads_is_accepted) {
  std::vector<float> k(12, 0.5f), v(12, 1.0f), dk(12, 42.0f), dv(12, 42.0f);
  const TensorView none = TensorView::contiguous(nullptr, DType::f32, {1, 0, 2, 4});
  const TensorView kv = TensorView::contiguous(k.data(), {1, 1, 3, 4}), vv = TensorView::contiguous(v.data(), {1, 1, 3, 4});
  const TensorView lse = TensorView::contiguous(nullptr, DType::f32, {1, 0, 2});
  Options opt;
  opt.sinks = TensorView::contiguous(nullptr, DType::f32, {0});
  const Gradients g{none, TensorView::contiguous(dk.data(), {1, 1, 3, 4}), TensorView::contiguous(dv.data(), {1, 1, 3, 4}),
                    TensorView::contiguous(nullptr, DType::f32, {0})};
  for (bool reference : {false, true}) {
    dk.assign(12, 42.0f);
    dv.assign(12, 42.0f);
    if (reference)
      reference_attention_backward(none, kv, vv, none, lse, none, g, opt);
    else
      attention_backward(none, kv, vv, none, lse, none, g, opt);
    for (float x : dk) EXPECT_EQ(x, 0.0f) << "reference " << reference;  // no query head reads a key
    for (float x : dv) EXPECT_EQ(x, 0.0f) << "reference " << reference;
  }
}

TEST(Errors, backward_needs_lse) {
  expect_backward_rejected([](BackwardCall& c) { c.lv = {}; }, "lse", {"the forward's lse"});
  expect_backward_rejected([](BackwardCall& c) { c.lv = TensorView::contiguous(c.lse.data(), {c.b, c.h, c.n_q - 1}); },
                           "lse", {"queries Nq=5"});
}

TEST(Errors, backward_gradients_of_the_wrong_shape) {
  expect_backward_rejected([](BackwardCall& c) { c.g.dq.shape[3] = 4; }, "dq", {"the shape of q"});
  expect_backward_rejected([](BackwardCall& c) { c.g.dk = TensorView::contiguous(c.gk.data(), {c.h_kv, c.n_kv, c.d}); },
                           "dk", {"4-D", "rank 3"});
  expect_backward_rejected([](BackwardCall& c) { c.g.dv.shape[1] = 1; }, "dv", {"the shape of v"});
  expect_backward_rejected([](BackwardCall& c) { c.g.dv = {}; }, "dv", {"rank 0"});
  expect_backward_rejected([](BackwardCall& c) { c.dov.shape[2] = 4; }, "d_o", {"the shape of o"});
  expect_backward_rejected([](BackwardCall& c) { c.g.dq.stride[3] = 2; }, "dq", {"contiguous last axis"});
}

// Each moved view lies inside the buffer it overlaps, so it reaches no other one.
TEST(Errors, backward_gradients_that_overlap) {
  expect_backward_rejected([](BackwardCall& c) { c.g.dq.data = c.q.data(); }, "dq", {"disjoint from input q"});
  expect_backward_rejected([](BackwardCall& c) { c.g.dv.data = c.d_o.data(); }, "dv", {"disjoint from input d_o"});
  expect_backward_rejected([](BackwardCall& c) { c.g.dv.data = c.gk.data(); }, "dv", {"disjoint from output dk"});
  expect_backward_rejected([](BackwardCall& c) { c.g.dq.stride[2] = 0; }, "dq", {"distinct addresses"});
}

TEST(Errors, backward_dtypes_and_options) {
  expect_backward_rejected(
      [](BackwardCall& c) {
        c.reference = false;
        c.g.dq.dtype = DType::f64;
      },
      "dq", {"float32", "float64"});
  expect_backward_rejected([](BackwardCall& c) { c.opt.dropout_p = 1.0; }, "dropout_p", {"[0, 1)"});
  expect_backward_rejected(
      [](BackwardCall& c) {
        c.opt.dropout_p = 0.1;
        c.opt.dropout_offset = ~std::uint64_t{0};
      },
      "dropout_offset", {"below 2^32"});
}

}  // namespace
}  // namespace sdpa
