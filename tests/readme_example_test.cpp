// The README's library example, compiled and run so that it cannot rot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sdpa/attention.h"
#include "sdpa/backward.h"

TEST(Readme, library_example) {
  const std::int64_t B = 1, H = 4, Hkv = 2, Nq = 3, Nkv = 5, d = 8, dv = 8;
  std::vector<float> q_buf(B * H * Nq * d, 0.1f), k_buf(B * Hkv * Nkv * d, 0.2f), v_buf(B * Hkv * Nkv * dv, 1.5f);
  std::vector<float> o_buf(B * H * Nq * dv);
  const float* q = q_buf.data();
  const float* k = k_buf.data();
  const float* v = v_buf.data();
  float* o = o_buf.data();

  // ---- as in README.md ----
  sdpa::Options opt;          // scale = 1/sqrt(d), not causal, all hardware threads, best ISA
  opt.causal = true;          // key j visible to query i iff j <= i + (Nkv - Nq)
  std::vector<float> lse(B * H * Nq);
  opt.lse = sdpa::TensorView::contiguous(lse.data(), {B, H, Nq});  // optional log-sum-exp output
  sdpa::attention(sdpa::TensorView::contiguous(q, {B, H, Nq, d}),
                  sdpa::TensorView::contiguous(k, {B, Hkv, Nkv, d}),
                  sdpa::TensorView::contiguous(v, {B, Hkv, Nkv, dv}),
                  sdpa::TensorView::contiguous(o, {B, H, Nq, dv}), opt);
  // ---- end ----

  for (float x : o_buf) EXPECT_FLOAT_EQ(x, 1.5f);  // every value row is 1.5
  // Query 0 sees keys 0..2 (bottom-right alignment), all with score 0.16/sqrt(8).
  EXPECT_NEAR(lse[0], 0.16 / std::sqrt(8.0) + std::log(3.0), 1e-5);
}

#include "sdpa/serving.h"

TEST(Readme, masks_and_modifiers_example) {
  const std::int64_t B = 2, H = 4, Nq = 6, Nkv = 6, d = 8;
  std::vector<float> q(B * H * Nq * d, 0.1f), k(B * H * Nkv * d, 0.2f), v(B * H * Nkv * d, 1.0f), o(q.size());
  // ---- as in README.md ----
  std::vector<std::uint8_t> keep(Nkv, 1);                // bool mask [Nkv], broadcast to [B, H, Nq, Nkv]
  keep[0] = 0;                                           // nobody attends to key 0
  std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f};  // ALiBi, one slope per head
  sdpa::Options opt;
  opt.mask = sdpa::TensorView::contiguous(keep.data(), sdpa::DType::boolean, {Nkv});
  opt.causal = true;
  opt.window_left = 3;                                   // each query sees itself and 3 keys back
  opt.alibi_slopes = sdpa::TensorView::contiguous(slopes.data(), {H});
  opt.softcap = 30.0;                                    // s <- 30·tanh(s/30) before masks and biases
  sdpa::attention(sdpa::TensorView::contiguous(q.data(), {B, H, Nq, d}),
                  sdpa::TensorView::contiguous(k.data(), {B, H, Nkv, d}),
                  sdpa::TensorView::contiguous(v.data(), {B, H, Nkv, d}),
                  sdpa::TensorView::contiguous(o.data(), {B, H, Nq, d}), opt);
  // ---- end ----
  for (std::int64_t i = 0; i < Nq; ++i) {
    const float x = o[i * d];
    EXPECT_EQ(x, i == 0 ? 0.0f : 1.0f) << "query " << i;  // query 0 sees only key 0, which the mask removes: O = 0
  }
}

TEST(Readme, serving_examples) {
  const std::int64_t H = 4, Hkv = 2, d = 8, dv = 8;
  // ---- as in README.md: packed variable-length batch ----
  // Two sequences: 3 and 5 queries, 4 and 9 keys, rows packed one after another.
  std::vector<std::int32_t> cu_q = {0, 3, 8}, cu_k = {0, 4, 13};
  std::vector<float> q(8 * H * d, 0.1f), k(13 * Hkv * d, 0.2f), v(13 * Hkv * dv, 2.0f), o(8 * H * dv);
  sdpa::Options opt;
  opt.causal = true;                                     // bottom-right, per sequence
  sdpa::attention_varlen(sdpa::TensorView::contiguous(q.data(), {8, H, d}),
                         sdpa::TensorView::contiguous(k.data(), {13, Hkv, d}),
                         sdpa::TensorView::contiguous(v.data(), {13, Hkv, dv}),
                         sdpa::TensorView::contiguous(o.data(), {8, H, dv}),
                         sdpa::TensorView::contiguous(cu_q.data(), sdpa::DType::i32, {3}),
                         sdpa::TensorView::contiguous(cu_k.data(), sdpa::DType::i32, {3}), opt);
  // ---- KV cache: append one token per sequence and attend (decode) ----
  const std::int64_t B = 2, capacity = 64;
  std::vector<float> k_cache(B * Hkv * capacity * d), v_cache(B * Hkv * capacity * dv);
  std::vector<std::int32_t> cache_seqlens = {10, 20};   // tokens already in each sequence's cache
  std::vector<float> q1(B * H * 1 * d, 0.1f), k1(B * Hkv * 1 * d, 0.3f), v1(B * Hkv * 1 * dv, 5.0f), o1(B * H * dv);
  sdpa::attention_kvcache(sdpa::TensorView::contiguous(q1.data(), {B, H, 1, d}),
                          sdpa::TensorView::contiguous(k_cache.data(), {B, Hkv, capacity, d}),
                          sdpa::TensorView::contiguous(v_cache.data(), {B, Hkv, capacity, dv}),
                          sdpa::TensorView::contiguous(cache_seqlens.data(), sdpa::DType::i32, {B}),
                          sdpa::TensorView::contiguous(k1.data(), {B, Hkv, 1, d}),   // written at slot cache_seqlens[b]
                          sdpa::TensorView::contiguous(v1.data(), {B, Hkv, 1, dv}),
                          sdpa::TensorView::contiguous(o1.data(), {B, H, 1, dv}), opt);
  // ---- paged KV cache: 16-key pages, any order ----
  const std::int64_t page_size = 16, num_pages = 8, max_pages = 4;
  std::vector<float> k_pages(num_pages * page_size * Hkv * d), v_pages(num_pages * page_size * Hkv * dv);
  std::vector<std::int32_t> block_table = {5, 2, 7, 0,    // sequence 0's pages, in key order
                                           1, 3, 4, 6};   // sequence 1's
  sdpa::attention_paged(sdpa::TensorView::contiguous(q1.data(), {B, H, 1, d}),
                        sdpa::TensorView::contiguous(k_pages.data(), {num_pages, page_size, Hkv, d}),
                        sdpa::TensorView::contiguous(v_pages.data(), {num_pages, page_size, Hkv, dv}),
                        sdpa::TensorView::contiguous(block_table.data(), sdpa::DType::i32, {B, max_pages}),
                        sdpa::TensorView::contiguous(cache_seqlens.data(), sdpa::DType::i32, {B}),
                        sdpa::TensorView::contiguous(k1.data(), {B, Hkv, 1, d}),
                        sdpa::TensorView::contiguous(v1.data(), {B, Hkv, 1, dv}),
                        sdpa::TensorView::contiguous(o1.data(), {B, H, 1, dv}), opt);
  // ---- end ----
  for (float x : o) EXPECT_FLOAT_EQ(x, 2.0f);
  // Decode: the new token (value 5) among cached zeros; the weights are all positive, so 0 < o < 5.
  for (float x : o1) {
    EXPECT_GT(x, 0.0f);
    EXPECT_LT(x, 5.0f);
  }
  EXPECT_EQ(k_pages[((0 * page_size + (20 % page_size)) * Hkv) * d], 0.0f);  // page 0 belongs to sequence 0
  EXPECT_EQ(k_pages[((3 * page_size + (20 % page_size)) * Hkv) * d], 0.3f);  // sequence 1, slot 20 -> page 3
}

TEST(Readme, training_example) {
  const std::int64_t B = 1, H = 2, Nq = 6, Nkv = 6, d = 8;
  std::vector<float> q(B * H * Nq * d, 0.3f), k(B * H * Nkv * d, -0.2f), v(B * H * Nkv * d, 0.5f),
      o(B * H * Nq * d), lse(B * H * Nq), go(B * H * Nq * d, 1.0f), dq(q.size()), dk(k.size()), dv(v.size());
  for (std::size_t i = 0; i < k.size(); ++i) k[i] += 0.01f * static_cast<float>(i % 7);
  const sdpa::TensorView Q = sdpa::TensorView::contiguous(q.data(), {B, H, Nq, d}),
                         K = sdpa::TensorView::contiguous(k.data(), {B, H, Nkv, d}),
                         V = sdpa::TensorView::contiguous(v.data(), {B, H, Nkv, d}),
                         O = sdpa::TensorView::contiguous(o.data(), {B, H, Nq, d}),
                         dO = sdpa::TensorView::contiguous(go.data(), {B, H, Nq, d}),
                         dQ = sdpa::TensorView::contiguous(dq.data(), {B, H, Nq, d}),
                         dK = sdpa::TensorView::contiguous(dk.data(), {B, H, Nkv, d}),
                         dV = sdpa::TensorView::contiguous(dv.data(), {B, H, Nkv, d});

  // ---- as in README.md ----
  sdpa::Options opt;
  opt.causal = true;
  opt.dropout_p = 0.1;                  // keep each probability with 0.9, scale kept ones by 1/0.9
  opt.dropout_seed = 1234;              // a training step advances opt.dropout_offset
  opt.lse = sdpa::TensorView::contiguous(lse.data(), {B, H, Nq});
  sdpa::attention(Q, K, V, O, opt);     // forward, saving lse
  opt.lse = {};
  sdpa::attention_backward(Q, K, V, O, sdpa::TensorView::contiguous(lse.data(), {B, H, Nq}), dO,
                           {.dq = dQ, .dk = dK, .dv = dV}, opt);   // .dsinks = [H] with opt.sinks
  // ---- end ----

  // The example's gradients are the oracle's (the same call in float64 loops).
  std::vector<float> rq(q.size()), rk(k.size()), rv(v.size());
  sdpa::reference_attention_backward(Q, K, V, O, sdpa::TensorView::contiguous(lse.data(), {B, H, Nq}), dO,
                                     {.dq = sdpa::TensorView::contiguous(rq.data(), {B, H, Nq, d}),
                                      .dk = sdpa::TensorView::contiguous(rk.data(), {B, H, Nkv, d}),
                                      .dv = sdpa::TensorView::contiguous(rv.data(), {B, H, Nkv, d})},
                                     opt);
  for (std::size_t i = 0; i < dq.size(); ++i) EXPECT_NEAR(dq[i], rq[i], 1e-5) << i;
  for (std::size_t i = 0; i < dk.size(); ++i) EXPECT_NEAR(dk[i], rk[i], 1e-5) << i;
  for (std::size_t i = 0; i < dv.size(); ++i) EXPECT_NEAR(dv[i], rv[i], 1e-5) << i;
  double total = 0;  // dropout dropped something: dV is not the no-dropout one (whose rows sum to 1 per query)
  for (float x : dv) total += x;
  EXPECT_GT(std::abs(total - static_cast<double>(H * Nq * d)), 1e-3);
}
