// Dropout: Philox-4x32-10 against the published known answers, the keep rule
// as documented in sdpa/dropout.h, its statistics, and the float64 oracle's
// use of it (forward mask output, expectation, and the backward's mask).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/dropout.h"
#include "sdpa/serving.h"
#include "support/problem.h"

namespace sdpa {
namespace {

using test::randn;
using Words = std::array<std::uint32_t, 4>;

// Random123's kat_vectors, the three philox4x32 10 lines (counter, key -> output).
TEST(Philox, known_answers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// kept = word (j mod 4) of philox4x32_10((j/4, i, b*heads + h, offset), (seed lo, seed hi)) >= floor(p * 2^32).
bool documented_keep(double p, std::uint64_t seed, std::uint64_t offset, std::int64_t heads, std::int64_t b,
                     std::int64_t h, std::int64_t i, std::int64_t j) {
  const Words w = philox4x32_10({static_cast<std::uint32_t>(j / 4), static_cast<std::uint32_t>(i),
                                 static_cast<std::uint32_t>(b * heads + h), static_cast<std::uint32_t>(offset)},
                                {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return w[j % 4] >= static_cast<std::uint64_t>(std::floor(p * 4294967296.0));
}

TEST(Dropout, keep_follows_the_documented_formula) {
  const std::uint64_t seeds[] = {0, 1, 0xdeadbeef, 0x123456789abcdef0ull, ~std::uint64_t{0}};
  const std::uint64_t offsets[] = {0, 1, 0xffffffffull};
  const double ps[] = {1e-9, 0.1, 0.5, 0.9, 1 - 1e-9};
  const std::int64_t coords[][4] = {{0, 0, 0, 0},        {1, 2, 3, 5},          {0, 7, 1000, 4095},
                                    {3, 0, 65535, 1},    {2, 5, 4294967295, 7}, {0, 1, 12, (std::int64_t{1} << 34) - 1},
                                    {1, 3, 77, 1 << 20}};
  int kept = 0, total = 0;
  for (std::uint64_t seed : seeds)
    for (std::uint64_t off : offsets)
      for (double p : ps)
        for (const auto& c : coords) {
          const std::int64_t heads = 8;
          const bool want = documented_keep(p, seed, off, heads, c[0], c[1], c[2], c[3]);
          ASSERT_EQ(dropout_keep(p, seed, off, heads, c[0], c[1], c[2], c[3]), want)
              << "p=" << p << " seed=" << seed << " offset=" << off << " b,h,i,j=" << c[0] << "," << c[1] << ","
              << c[2] << "," << c[3];
          kept += want;
          ++total;
        }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, total);
  // p = 0 keeps everything (the threshold is 0).
  for (std::int64_t j = 0; j < 64; ++j) EXPECT_TRUE(dropout_keep(0.0, 5, 0, 1, 0, 0, 3, j));
}

TEST(Dropout, keep_fraction_is_one_minus_p) {
  const std::int64_t heads = 4, nb = 2, nq = 256, nk = 512;
  const double n = static_cast<double>(nb * heads * nq * nk);  // 2^20 decisions
  for (double p : {0.1, 0.5, 0.9}) {
    std::int64_t kept = 0;
    std::int64_t lane[4] = {0, 0, 0, 0};  // by word of the Philox block
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t i = 0; i < nq; ++i)
          for (std::int64_t j = 0; j < nk; ++j)
            if (dropout_keep(p, 2024, 3, heads, b, h, i, j)) {
              ++kept;
              ++lane[j % 4];
            }
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(kept), n * (1 - p), 6 * sd) << "p=" << p;
    for (int w = 0; w < 4; ++w) EXPECT_NEAR(static_cast<double>(lane[w]), n / 4 * (1 - p), 6 * sd / 2) << "p=" << p;
  }
}

// A dense forward through the oracle, float64, with its probs and dropout mask.
struct Forward {
  std::int64_t b = 2, h = 3, h_kv = 3, n_q = 5, n_kv = 11, d = 4, dv = 3;
  std::int64_t mask_pad = 3;  // the mask's rows are padded: its strides are its own
  std::vector<double> q, k, v, o, probs;
  std::vector<std::uint8_t> mask;
  Options opt;

  void init(std::uint64_t seed = 1) {
    auto fill = [](std::vector<double>& x, std::int64_t n, std::uint64_t s) {
      const std::vector<float> r = randn(n, s);
      x.assign(r.begin(), r.end());
    };
    fill(q, b * h * n_q * d, seed);
    fill(k, b * h_kv * n_kv * d, seed + 1);
    fill(v, b * h_kv * n_kv * dv, seed + 2);
  }
  std::int64_t mask_at(std::int64_t bi, std::int64_t hi, std::int64_t i, std::int64_t j) const {
    return ((bi * h + hi) * n_q + i) * (n_kv + mask_pad) + j;
  }
  void run() {
    o.assign(b * h * n_q * dv, NAN);
    probs.assign(b * h * n_q * n_kv, NAN);
    mask.assign(b * h * n_q * (n_kv + mask_pad), 7);  // 7: not written
    Options f = opt;
    f.probs = TensorView::contiguous(probs.data(), {b, h, n_q, n_kv});
    f.dropout_mask = TensorView::contiguous(mask.data(), DType::boolean, {b, h, n_q, n_kv});
    const std::int64_t row = n_kv + mask_pad;
    f.dropout_mask.stride = {h * n_q * row, n_q * row, row, 1};
    reference_attention(TensorView::contiguous(q.data(), {b, h, n_q, d}),
                        TensorView::contiguous(k.data(), {b, h_kv, n_kv, d}),
                        TensorView::contiguous(v.data(), {b, h_kv, n_kv, dv}),
                        TensorView::contiguous(o.data(), {b, h, n_q, dv}), f);
  }
  bool kept(std::int64_t bi, std::int64_t hi, std::int64_t i, std::int64_t j) const {
    return mask[mask_at(bi, hi, i, j)] != 0;
  }
};

TEST(Dropout, oracle_mask_output_is_dropout_keep_everywhere) {
  Forward f;
  f.opt.causal = true;  // invisible keys get their decision too
  f.opt.dropout_p = 0.4;
  f.opt.dropout_seed = 0xfeedface12345678ull;
  f.opt.dropout_offset = 42;
  f.init();
  f.run();
  int dropped = 0;
  for (std::int64_t b = 0; b < f.b; ++b)
    for (std::int64_t h = 0; h < f.h; ++h)
      for (std::int64_t i = 0; i < f.n_q; ++i) {
        for (std::int64_t j = 0; j < f.n_kv; ++j) {
          const std::uint8_t m = f.mask[f.mask_at(b, h, i, j)];
          ASSERT_TRUE(m == 0 || m == 1) << "mask not written at " << b << "," << h << "," << i << "," << j;
          ASSERT_EQ(m != 0, dropout_keep(0.4, f.opt.dropout_seed, 42, f.h, b, h, i, j))
              << b << "," << h << "," << i << "," << j;
          dropped += m == 0;
        }
        for (std::int64_t j = f.n_kv; j < f.n_kv + f.mask_pad; ++j)
          ASSERT_EQ(f.mask[f.mask_at(b, h, i, j)], 7) << "wrote past the row";
      }
  EXPECT_GT(dropped, 0);

  // Without dropout the mask is all ones.
  Forward off;
  off.init();
  off.run();
  for (std::int64_t b = 0; b < off.b; ++b)
    for (std::int64_t h = 0; h < off.h; ++h)
      for (std::int64_t i = 0; i < off.n_q; ++i)
        for (std::int64_t j = 0; j < off.n_kv; ++j) ASSERT_EQ(off.mask[off.mask_at(b, h, i, j)], 1);
}

// The forward's O is (P ∘ Z)·V with the P and mask it reports, Z = mask / (1 - p);
// probs and lse are those before dropout.
TEST(Dropout, oracle_output_is_the_masked_product) {
  Forward f;
  f.h_kv = 1;
  f.opt.causal = true;
  f.opt.dropout_p = 0.3;
  f.opt.dropout_seed = 5;
  f.init();
  f.run();
  Forward plain = f;
  plain.opt.dropout_p = 0;
  plain.run();
  EXPECT_EQ(f.probs, plain.probs);
  for (std::int64_t b = 0; b < f.b; ++b)
    for (std::int64_t h = 0; h < f.h; ++h)
      for (std::int64_t i = 0; i < f.n_q; ++i)
        for (std::int64_t c = 0; c < f.dv; ++c) {
          double want = 0;
          for (std::int64_t j = 0; j < f.n_kv; ++j)
            want += f.probs[((b * f.h + h) * f.n_q + i) * f.n_kv + j] * (f.kept(b, h, i, j) ? 1 / 0.7 : 0.0) *
                    f.v[(b * f.n_kv + j) * f.dv + c];
          EXPECT_NEAR(f.o[((b * f.h + h) * f.n_q + i) * f.dv + c], want, 1e-14);
        }
}

TEST(Dropout, mean_over_seeds_approaches_the_output_without_dropout) {
  Forward f;
  f.b = 1;
  f.h = f.h_kv = 2;
  f.n_q = 4;
  f.n_kv = 6;
  const double p = 0.5;
  f.init(9);
  f.run();
  const std::vector<double> o0 = f.o, probs = f.probs;
  const int seeds = 400;
  std::vector<double> mean(o0.size(), 0.0);
  f.opt.dropout_p = p;
  for (int s = 0; s < seeds; ++s) {
    f.opt.dropout_seed = static_cast<std::uint64_t>(s);
    f.run();
    for (std::size_t e = 0; e < mean.size(); ++e) mean[e] += f.o[e] / seeds;
  }
  // E[O] = O without dropout; Var O_c = p/(1-p) · Σ_j P_j² v_jc².
  int differs = 0;
  for (std::int64_t h = 0; h < f.h; ++h)
    for (std::int64_t i = 0; i < f.n_q; ++i)
      for (std::int64_t c = 0; c < f.dv; ++c) {
        double var = 0;
        for (std::int64_t j = 0; j < f.n_kv; ++j) {
          const double pj = probs[(h * f.n_q + i) * f.n_kv + j], vj = f.v[(h * f.n_kv + j) * f.dv + c];
          var += p / (1 - p) * pj * pj * vj * vj;
        }
        const std::size_t e = (h * f.n_q + i) * f.dv + c;
        EXPECT_NEAR(mean[e], o0[e], 6 * std::sqrt(var / seeds) + 1e-12) << "h=" << h << " i=" << i << " c=" << c;
        differs += mean[e] != o0[e];
      }
  EXPECT_GT(differs, 0);
}

// The backward regenerates the forward's mask: its dV is Σ_i P_ij Z_ij dO_i
// (summed over the query heads of a K/V head) with the P and mask the forward reported.
TEST(Dropout, backward_uses_the_forward_mask) {
  Forward f;
  f.h = 4;
  f.h_kv = 2;
  f.opt.causal = true;
  f.opt.dropout_p = 0.35;
  f.opt.dropout_seed = 31337;
  f.opt.dropout_offset = 8;
  f.init(3);
  f.run();
  const std::vector<float> g32 = randn(f.o.size(), 17);
  const std::vector<double> g(g32.begin(), g32.end());
  std::vector<double> lse(f.b * f.h * f.n_q, 0.0);
  std::vector<double> dq(f.q.size(), NAN), dk(f.k.size(), NAN), dv(f.v.size(), NAN);
  reference_attention_backward(TensorView::contiguous(f.q.data(), {f.b, f.h, f.n_q, f.d}),
                               TensorView::contiguous(f.k.data(), {f.b, f.h_kv, f.n_kv, f.d}),
                               TensorView::contiguous(f.v.data(), {f.b, f.h_kv, f.n_kv, f.dv}),
                               TensorView::contiguous(f.o.data(), {f.b, f.h, f.n_q, f.dv}),
                               TensorView::contiguous(lse.data(), {f.b, f.h, f.n_q}),
                               TensorView::contiguous(g.data(), {f.b, f.h, f.n_q, f.dv}),
                               {.dq = TensorView::contiguous(dq.data(), {f.b, f.h, f.n_q, f.d}),
                                .dk = TensorView::contiguous(dk.data(), {f.b, f.h_kv, f.n_kv, f.d}),
                                .dv = TensorView::contiguous(dv.data(), {f.b, f.h_kv, f.n_kv, f.dv}),
                                .dsinks = {}},
                               f.opt);
  const std::int64_t group = f.h / f.h_kv;
  for (std::int64_t b = 0; b < f.b; ++b)
    for (std::int64_t hk = 0; hk < f.h_kv; ++hk)
      for (std::int64_t j = 0; j < f.n_kv; ++j)
        for (std::int64_t c = 0; c < f.dv; ++c) {
          double want = 0;
          for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h)
            for (std::int64_t i = 0; i < f.n_q; ++i)
              want += f.probs[((b * f.h + h) * f.n_q + i) * f.n_kv + j] * (f.kept(b, h, i, j) ? 1 / 0.65 : 0.0) *
                      g[((b * f.h + h) * f.n_q + i) * f.dv + c];
          EXPECT_NEAR(dv[((b * f.h_kv + hk) * f.n_kv + j) * f.dv + c], want, 1e-13)
              << b << "," << hk << "," << j << "," << c;
        }
}

TEST(Dropout, streams_differ_by_offset_and_seed_and_repeat_exactly) {
  Forward f;
  f.opt.dropout_p = 0.5;
  f.opt.dropout_seed = 1;
  f.opt.dropout_offset = 0;
  f.init();
  f.run();
  const std::vector<std::uint8_t> base = f.mask;
  const std::vector<double> o = f.o;
  f.run();
  EXPECT_EQ(f.mask, base);
  EXPECT_EQ(f.o, o);
  for (auto [seed, offset] : {std::pair<std::uint64_t, std::uint64_t>{1, 1}, {1, 0xffffffff}, {2, 0},
                              {1 + (std::uint64_t{1} << 32), 0}}) {
    f.opt.dropout_seed = seed;
    f.opt.dropout_offset = offset;
    f.run();
    std::size_t same = 0, n = 0;
    for (std::int64_t b = 0; b < f.b; ++b)
      for (std::int64_t h = 0; h < f.h; ++h)
        for (std::int64_t i = 0; i < f.n_q; ++i)
          for (std::int64_t j = 0; j < f.n_kv; ++j, ++n) same += f.mask[f.mask_at(b, h, i, j)] == base[f.mask_at(b, h, i, j)];
    // Independent masks at p = 1/2 agree on about half the decisions.
    EXPECT_LT(same, n * 3 / 4) << "seed " << seed << " offset " << offset;
    EXPECT_GT(same, n / 4) << "seed " << seed << " offset " << offset;
  }
}

// Packed sequences draw with b = the sequence and i, j within it: equal-length
// sequences give the dense batch's O bit for bit.
TEST(Dropout, packed_sequences_use_sequence_coordinates) {
  const std::int64_t nb = 3, h = 2, nq = 4, nk = 6, d = 5;
  const std::vector<float> q = randn(nb * nq * h * d, 1), k = randn(nb * nk * h * d, 2), v = randn(nb * nk * h * d, 3);
  std::vector<float> o_packed(nb * nq * h * d, NAN), o_dense(o_packed.size(), NAN);
  std::vector<std::int64_t> cu_q = {0, nq, 2 * nq, 3 * nq}, cu_k = {0, nk, 2 * nk, 3 * nk};
  Options opt;
  opt.causal = true;
  opt.dropout_p = 0.45;
  opt.dropout_seed = 12;
  opt.dropout_offset = 6;
  attention_varlen(TensorView::contiguous(q.data(), {nb * nq, h, d}), TensorView::contiguous(k.data(), {nb * nk, h, d}),
                   TensorView::contiguous(v.data(), {nb * nk, h, d}), TensorView::contiguous(o_packed.data(), {nb * nq, h, d}),
                   TensorView::contiguous(cu_q.data(), DType::i64, {nb + 1}),
                   TensorView::contiguous(cu_k.data(), DType::i64, {nb + 1}), opt, -1, -1, /*reference=*/true);
  // The packed rows are [B, N, H, d] memory.
  reference_attention(TensorView::bshd(q.data(), nb, nq, h, d), TensorView::bshd(k.data(), nb, nk, h, d),
                      TensorView::bshd(v.data(), nb, nk, h, d), TensorView::bshd(o_dense.data(), nb, nq, h, d), opt);
  EXPECT_EQ(o_packed, o_dense);
  Options no_drop = opt;
  no_drop.dropout_p = 0;
  reference_attention(TensorView::bshd(q.data(), nb, nq, h, d), TensorView::bshd(k.data(), nb, nk, h, d),
                      TensorView::bshd(v.data(), nb, nk, h, d), TensorView::bshd(o_dense.data(), nb, nq, h, d), no_drop);
  EXPECT_NE(o_packed, o_dense);
}

}  // namespace
}  // namespace sdpa
