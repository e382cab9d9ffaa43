// The README's library example, compiled and run so that it cannot rot.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sdpa/attention.h"

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
