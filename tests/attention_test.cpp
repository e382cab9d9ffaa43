// The fast path against the float64 oracle: randomised shapes for every ISA
// this build has, then one named test per clause of the stability contract.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "support/problem.h"

namespace sdpa::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

class PerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam()) << "; its kernels are not tested here";
  }
  Isa isa() const { return GetParam(); }
};

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

void expect_matches_oracle(Buffers& buf) {
  buf.run_fast();
  buf.run_reference();
  const Problem& pb = buf.pb;
  const double mq = max_abs(buf.q), mk = max_abs(buf.k), mv = max_abs(buf.v);
  const Worst wo = worst_o(buf);
  EXPECT_LE(wo.err, tolerance_o(pb, mq, mk, mv)) << pb << "\n" << wo.describe();
  const Worst wl = worst_lse(buf);
  EXPECT_LE(wl.err, tolerance_lse(pb, mq, mk)) << pb << "\n lse " << wl.describe();
}

// ---- randomised shapes -----------------------------------------------------

TEST_P(PerIsa, random_shapes_match_oracle) {
  // Sizes straddle the tile edges: BR, BC, MR and NR of each kernel set in kernels.def.
  const std::int64_t sizes[] = {1, 2, 3, 5, 6, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 96, 97, 150, 193, 300};
  const std::int64_t dims[] = {1, 2, 3, 8, 16, 31, 32, 64, 80, 96, 128, 256};
  const std::uint64_t seed = 20261130;
  std::mt19937_64 rng(seed);
  auto pick = [&](auto& arr) { return arr[rng() % std::size(arr)]; };
  int cases = 0;
  double worst_ratio = 0;
  while (cases < 80) {
    Problem pb;
    pb.isa = isa();
    pb.seed = rng();
    pb.b = 1 + rng() % 3;
    pb.h_kv = 1 + rng() % 4;
    pb.h = pb.h_kv * (1 + rng() % (8 / pb.h_kv));
    pb.n_q = pick(sizes);
    pb.n_kv = rng() % 4 == 0 ? pb.n_q : pick(sizes);
    pb.d = pick(dims);
    pb.dv = rng() % 3 == 0 ? pb.d : pick(dims);
    pb.causal = rng() % 2;
    pb.layout = rng() % 2 ? Layout::bhsd : Layout::bshd;
    pb.row_pad = rng() % 3 == 0 ? 3 : 0;
    pb.threads = 1 + rng() % 3;
    if (pb.b * pb.h * pb.n_q * pb.n_kv * (pb.d + pb.dv) > 30'000'000) continue;  // keep the oracle quick
    ++cases;
    SCOPED_TRACE(::testing::Message() << "case " << cases << " of run seed " << seed);
    Buffers buf(pb);
    expect_matches_oracle(buf);
    const double tol = tolerance_o(pb, max_abs(buf.q), max_abs(buf.k), max_abs(buf.v));
    worst_ratio = std::max(worst_ratio, worst_o(buf).err / tol);
    if (HasFailure()) return;
  }
  std::printf("[ %s ] 80 random shapes: worst error = %.3g of the tolerance\n", isa_name(isa()), worst_ratio);
}

TEST_P(PerIsa, decode_shapes_match_oracle) {
  // Nq = 1..16 against long caches: the split-KV path, GQA groups 1, 4, 8;
  // blocks of 9-16 rows (group * Nq), which read K and V in place on AMX and
  // are packed elsewhere, and 18 rows, packed everywhere.
  for (auto [h, h_kv, n_q, n_kv] : std::vector<std::array<std::int64_t, 4>>{
           {4, 1, 1, 3000}, {8, 2, 1, 1025}, {32, 8, 1, 4096}, {8, 8, 3, 2049}, {4, 1, 8, 777},
           {8, 2, 4, 1500}, {4, 4, 12, 700}, {2, 2, 16, 2600}, {2, 1, 9, 300}}) {
    for (bool causal : {false, true}) {
      Problem pb;
      pb.isa = isa();
      pb.h = h;
      pb.h_kv = h_kv;
      pb.n_q = n_q;
      pb.n_kv = n_kv;
      pb.d = pb.dv = 64;
      pb.causal = causal;
      pb.threads = 2;
      Buffers buf(pb);
      expect_matches_oracle(buf);
    }
  }
}

TEST_P(PerIsa, probabilities_match_oracle_and_rows_sum_to_one) {
  Problem pb;
  pb.isa = isa();
  pb.b = 2, pb.h = 4, pb.h_kv = 2, pb.n_q = 70, pb.n_kv = 45, pb.d = 16, pb.dv = 8, pb.causal = true;
  Buffers buf(pb);
  buf.run_fast(true, true);
  buf.run_reference(true, true);
  double worst = 0;
  for (std::size_t i = 0; i < buf.probs.size(); ++i) worst = std::max(worst, std::abs(buf.probs[i] - buf.probs_ref[i]));
  EXPECT_LE(worst, 1e-6) << pb;
  for (std::int64_t row = 0; row < pb.b * pb.h * pb.n_q; ++row) {
    double sum = 0;
    for (std::int64_t j = 0; j < pb.n_kv; ++j) sum += buf.probs[row * pb.n_kv + j];
    const std::int64_t i = row % pb.n_q;
    const bool empty = i + (pb.n_kv - pb.n_q) < 0;  // causal, bottom-right: no visible key
    EXPECT_NEAR(sum, empty ? 0.0 : 1.0, 1e-5) << "row " << row;
  }
}

// ---- the stability contract, clause by clause --------------------------------

// Builds a problem with hand-set inputs: q, k, v filled by the caller.
struct Hand {
  explicit Hand(Problem p) : buf(p) {}
  Buffers buf;
  void run() {
    buf.run_fast();
    buf.run_reference();
  }
};

TEST_P(PerIsa, large_logits_do_not_overflow) {
  for (float magnitude : {1e4f, 1e15f, 1e19f}) {  // raw scores up to ±1e4·d, ±1e30·d, ±1e38·d
    Problem pb;
    pb.isa = isa();
    pb.n_q = 5, pb.n_kv = 37, pb.d = 4, pb.dv = 3;
    Buffers buf(pb);
    for (float& x : buf.q) x = x > 0 ? magnitude : -magnitude;
    for (float& x : buf.k) x = x * (magnitude > 1e10f ? 1.0f : magnitude / 1e4f);
    buf.run_fast();
    buf.run_reference();
    for (float x : buf.o) EXPECT_TRUE(std::isfinite(x)) << "magnitude " << magnitude;
    for (float x : buf.lse) EXPECT_TRUE(std::isfinite(x)) << "magnitude " << magnitude;
    const Worst w = worst_o(buf);
    EXPECT_LE(w.err, 1e-5 * max_abs(buf.v)) << "magnitude " << magnitude << ": " << w.describe();
  }
}

TEST_P(PerIsa, score_representable_only_after_scaling) {
  // q·k = 1e20·1e19 = 1e39 overflows float; scale·q·k = 1.25e38 does not.
  Problem pb;
  pb.isa = isa();
  pb.n_q = 1, pb.n_kv = 2, pb.d = 1, pb.dv = 1;
  Buffers buf(pb);
  buf.q = {1e20f};
  buf.k = {1e19f, -1e19f};
  buf.v = {3.0f, 7.0f};
  Options opt = buf.options();
  opt.scale = 0.125;
  opt.lse = buf.lse_view();
  attention(buf.q_view(), buf.k_view(), buf.v_view(), buf.o_view(), opt);
  EXPECT_EQ(buf.o[0], 3.0f);
  EXPECT_NEAR(buf.lse[0], 1.25e38f, 1.25e38f * 1e-6f);
}

TEST_P(PerIsa, all_keys_masked_row_is_zero) {
  // Causal with Nq > Nkv: the first Nq - Nkv queries see no key at all.
  Problem pb;
  pb.isa = isa();
  pb.h = 2, pb.n_q = 100, pb.n_kv = 40, pb.d = 8, pb.dv = 5, pb.causal = true;
  Buffers buf(pb);
  buf.run_fast(true, true);
  for (std::int64_t h = 0; h < pb.h; ++h)
    for (std::int64_t i = 0; i < pb.n_q; ++i) {
      const bool empty = i < pb.n_q - pb.n_kv;
      const float lse = buf.lse[h * pb.n_q + i];
      if (empty) {
        EXPECT_EQ(lse, -kInf) << "i=" << i;
        for (std::int64_t c = 0; c < pb.dv; ++c) EXPECT_EQ(buf.o[buf.o_index(0, h, i, c)], 0.0f);
        for (std::int64_t j = 0; j < pb.n_kv; ++j) EXPECT_EQ(buf.probs[(h * pb.n_q + i) * pb.n_kv + j], 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(lse)) << "i=" << i;
      }
    }
  for (float x : buf.o) EXPECT_FALSE(std::isnan(x));
}

TEST_P(PerIsa, empty_sequences_are_valid) {
  for (auto [n_q, n_kv] : std::vector<std::pair<int, int>>{{0, 5}, {5, 0}, {0, 0}}) {
    Problem pb;
    pb.isa = isa();
    pb.n_q = n_q, pb.n_kv = n_kv, pb.d = 3, pb.dv = 2;
    Buffers buf(pb);
    buf.run_fast();
    for (float x : buf.o) EXPECT_EQ(x, 0.0f);  // Nkv = 0: every row is empty
    for (float x : buf.lse) EXPECT_EQ(x, -kInf);
  }
}

TEST_P(PerIsa, d_is_one_and_nkv_is_one) {
  for (auto [d, n_kv] : std::vector<std::pair<int, int>>{{1, 50}, {7, 1}, {1, 1}}) {
    Problem pb;
    pb.isa = isa();
    pb.h = 3, pb.n_q = 20, pb.n_kv = n_kv, pb.d = d, pb.dv = 4;
    Buffers buf(pb);
    expect_matches_oracle(buf);
  }
  Problem pb;
  pb.isa = isa();
  pb.n_q = 9, pb.n_kv = 1, pb.d = 5, pb.dv = 3;
  Buffers buf(pb);
  buf.run_fast();
  for (std::int64_t i = 0; i < pb.n_q; ++i)
    for (std::int64_t c = 0; c < pb.dv; ++c) EXPECT_EQ(buf.o[buf.o_index(0, 0, i, c)], buf.v[c]);  // one key: O = V
}

TEST_P(PerIsa, nan_in_q_propagates_to_its_row_only) {
  Problem pb;
  pb.isa = isa();
  pb.h = 2, pb.n_q = 10, pb.n_kv = 70, pb.d = 16, pb.dv = 8;
  Buffers buf(pb);
  buf.q[3 * pb.d + 5] = std::nanf("");  // head 0, query 3
  buf.run_fast();
  for (std::int64_t h = 0; h < pb.h; ++h)
    for (std::int64_t i = 0; i < pb.n_q; ++i) {
      const bool hit = h == 0 && i == 3;
      EXPECT_EQ(std::isnan(buf.o[buf.o_index(0, h, i, 0)]), hit) << "h=" << h << " i=" << i;
      EXPECT_EQ(std::isnan(buf.lse[h * pb.n_q + i]), hit);
    }
}

TEST_P(PerIsa, nan_in_k_reaches_only_queries_that_see_it) {
  // Causal, Nq = Nkv: key 40 is seen by queries 40.. only.
  Problem pb;
  pb.isa = isa();
  pb.n_q = pb.n_kv = 130, pb.d = 8, pb.dv = 8, pb.causal = true;
  Buffers buf(pb);
  buf.k[40 * pb.d + 2] = std::nanf("");
  buf.run_fast();
  for (std::int64_t i = 0; i < pb.n_q; ++i) EXPECT_EQ(std::isnan(buf.o[buf.o_index(0, 0, i, 0)]), i >= 40) << i;
}

TEST_P(PerIsa, nan_in_v_propagates) {
  Problem pb;
  pb.isa = isa();
  pb.n_q = 4, pb.n_kv = 20, pb.d = 8, pb.dv = 8;
  Buffers buf(pb);
  buf.v[7 * pb.dv + 3] = std::nanf("");
  buf.run_fast();
  for (std::int64_t i = 0; i < pb.n_q; ++i) {
    EXPECT_TRUE(std::isnan(buf.o[buf.o_index(0, 0, i, 3)]));
    EXPECT_FALSE(std::isnan(buf.o[buf.o_index(0, 0, i, 2)]));  // other channels untouched
  }
}

TEST_P(PerIsa, inf_in_input_is_not_hidden) {
  Problem pb;
  pb.isa = isa();
  pb.n_q = 3, pb.n_kv = 20, pb.d = 8, pb.dv = 4;
  {
    Buffers buf(pb);
    buf.v[5 * pb.dv + 1] = kInf;
    buf.run_fast();
    for (std::int64_t i = 0; i < pb.n_q; ++i) EXPECT_FALSE(std::isfinite(buf.o[buf.o_index(0, 0, i, 1)]));
  }
  {
    Buffers buf(pb);
    for (std::int64_t c = 0; c < pb.d; ++c) buf.q[c] = kInf;  // query 0: scores ±inf / NaN
    buf.run_fast();
    buf.run_reference();
    EXPECT_FALSE(std::isfinite(buf.o[0]));
    EXPECT_TRUE(std::isfinite(buf.o[buf.o_index(0, 0, 1, 0)]));
    EXPECT_EQ(std::isnan(buf.o[0]), std::isnan(buf.o_ref[0]));  // the oracle agrees
  }
}

TEST_P(PerIsa, values_at_masked_keys_are_never_read) {
  // Causal: key j > i + offset is invisible to query i, so NaN / 1e30 in V there changes nothing.
  Problem pb;
  pb.isa = isa();
  pb.n_q = pb.n_kv = 150, pb.d = 16, pb.dv = 16, pb.causal = true;
  Buffers clean(pb);
  clean.run_fast();
  Buffers dirty(pb);
  for (std::int64_t c = 0; c < pb.dv; ++c) {
    dirty.v[100 * pb.dv + c] = std::nanf("");
    dirty.v[120 * pb.dv + c] = 1e30f;
  }
  dirty.run_fast();
  for (std::int64_t i = 0; i < 100; ++i)
    for (std::int64_t c = 0; c < pb.dv; ++c)
      ASSERT_EQ(dirty.o[dirty.o_index(0, 0, i, c)], clean.o[clean.o_index(0, 0, i, c)]) << "i=" << i;
  EXPECT_TRUE(std::isnan(dirty.o[dirty.o_index(0, 0, 100, 0)]));
}

TEST_P(PerIsa, causal_nq_ne_nkv_is_bottom_right_aligned) {
  for (auto [n_q, n_kv] : std::vector<std::pair<int, int>>{{10, 130}, {130, 10}, {97, 98}, {1, 500}}) {
    Problem pb;
    pb.isa = isa();
    pb.h = 2, pb.n_q = n_q, pb.n_kv = n_kv, pb.d = 32, pb.dv = 16, pb.causal = true;
    Buffers buf(pb);
    expect_matches_oracle(buf);
    // The last query sees every key, so it equals the non-causal result.
    Buffers full(Problem{pb.b, pb.h, pb.h_kv, pb.n_q, pb.n_kv, pb.d, pb.dv, false, pb.layout, 0, pb.isa, 1, pb.seed});
    full.run_fast();
    for (std::int64_t c = 0; c < pb.dv; ++c)
      EXPECT_EQ(buf.o[buf.o_index(0, 1, n_q - 1, c)], full.o[full.o_index(0, 1, n_q - 1, c)]);
  }
}

TEST_P(PerIsa, gqa_group_8) {
  Problem pb;
  pb.isa = isa();
  pb.b = 2, pb.h = 16, pb.h_kv = 2, pb.n_q = 33, pb.n_kv = 77, pb.d = 64, pb.dv = 64, pb.causal = true;
  Buffers buf(pb);
  expect_matches_oracle(buf);
}

TEST_P(PerIsa, strided_views_in_both_layouts) {
  for (Layout layout : {Layout::bhsd, Layout::bshd}) {
    Problem pb;
    pb.isa = isa();
    pb.b = 2, pb.h = 4, pb.h_kv = 2, pb.n_q = 50, pb.n_kv = 70, pb.d = 24, pb.dv = 40;
    pb.layout = layout;
    pb.row_pad = 5;
    Buffers buf(pb);
    expect_matches_oracle(buf);
  }
}

TEST_P(PerIsa, misaligned_pointers) {
  // Every view starts one float past a 64-byte boundary and rows are odd-sized.
  const std::int64_t n_q = 37, n_kv = 41, d = 33, dv = 17;
  std::vector<float> q(n_q * d + 1), k(n_kv * d + 1), v(n_kv * dv + 1), o(n_q * dv + 1);
  std::vector<double> o_ref(n_q * dv);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);
  Options opt;
  opt.isa = isa();
  const TensorView qv = TensorView::contiguous(q.data() + 1, {1, 1, n_q, d});
  const TensorView kv = TensorView::contiguous(k.data() + 1, {1, 1, n_kv, d});
  const TensorView vv = TensorView::contiguous(v.data() + 1, {1, 1, n_kv, dv});
  attention(qv, kv, vv, TensorView::contiguous(o.data() + 1, {1, 1, n_q, dv}), opt);
  reference_attention(qv, kv, vv, TensorView::contiguous(o_ref.data(), {1, 1, n_q, dv}), opt);
  for (std::int64_t i = 0; i < n_q * dv; ++i) EXPECT_NEAR(o[i + 1], o_ref[i], 1e-5);
}

TEST_P(PerIsa, value_rows_off_a_vector_boundary_give_the_bits_of_aligned_ones) {
  // Prefill blocks (many rows) whose V rows are whole vectors (dv = 64) but
  // start 4, 16 or 36 bytes past a 64-byte boundary: the AVX2 kernels copy
  // such tiles to aligned memory, the others read them in place; either way
  // the output is that of the same values on 64-byte aligned rows, bit for bit.
  const std::int64_t h = 2, n_q = 200, n_kv = 150, d = 48, dv = 64;
  const std::size_t nv = static_cast<std::size_t>(h * n_kv * dv);
  std::vector<float> q(h * n_q * d), k(h * n_kv * d), v_store(nv + 16 + 16);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (auto* x : {&q, &k})
    for (float& e : *x) e = normal(rng);
  std::vector<float> values(nv);
  for (float& e : values) e = normal(rng);
  // The first 64-byte boundary inside v_store.
  const std::size_t base = (64 - reinterpret_cast<std::uintptr_t>(v_store.data()) % 64) % 64 / sizeof(float);
  const TensorView qv = TensorView::contiguous(q.data(), {1, h, n_q, d});
  const TensorView kv = TensorView::contiguous(k.data(), {1, h, n_kv, d});
  for (bool causal : {false, true}) {
    Options opt;
    opt.isa = isa();
    opt.causal = causal;
    std::vector<float> first;
    for (std::size_t off : {0, 1, 4, 9}) {
      float* v = v_store.data() + base + off;
      std::memcpy(v, values.data(), nv * sizeof(float));
      std::vector<float> o(h * n_q * dv);
      attention(qv, kv, TensorView::contiguous(v, {1, h, n_kv, dv}), TensorView::contiguous(o.data(), {1, h, n_q, dv}),
                opt);
      if (first.empty()) {
        first = o;
        continue;
      }
      EXPECT_EQ(0, std::memcmp(first.data(), o.data(), o.size() * sizeof(float)))
          << "V " << off * sizeof(float) << " bytes past a 64-byte boundary, causal " << causal;
    }
  }
}

TEST_P(PerIsa, results_are_bitwise_identical_for_any_thread_count) {
  // {1, 1, 1000, 777, 40}: the blocks of one head meet at the same key tiles
  // (the packed-key cache: one packs, the others use or pack their own), and
  // the last tile is short. {5, 5, 400, 260, 48}: the blocks of `threads`
  // heads are handed out in turn, the last turn with fewer heads (5 = 2+2+1,
  // 3+2).
  for (auto shape : std::vector<std::array<std::int64_t, 5>>{
           {8, 2, 300, 300, 64}, {32, 8, 1, 5000, 128}, {1, 1, 1000, 777, 40}, {5, 5, 400, 260, 48}}) {
    for (bool causal : {false, true}) {
      std::vector<float> first_o, first_lse;
      for (int threads : {1, 2, 3, 7}) {
        Problem pb;
        pb.isa = isa();
        pb.h = shape[0], pb.h_kv = shape[1], pb.n_q = shape[2], pb.n_kv = shape[3], pb.d = pb.dv = shape[4];
        pb.causal = causal;
        pb.threads = threads;
        Buffers buf(pb);
        buf.run_fast();
        if (first_o.empty()) {
          first_o = buf.o;
          first_lse = buf.lse;
        } else {
          EXPECT_EQ(0, std::memcmp(first_o.data(), buf.o.data(), first_o.size() * 4)) << pb;
          EXPECT_EQ(0, std::memcmp(first_lse.data(), buf.lse.data(), first_lse.size() * 4)) << pb;
        }
      }
    }
  }
}

TEST_P(PerIsa, concurrent_calls_from_user_threads) {
  Problem pb;
  pb.isa = isa();
  pb.h = 4, pb.n_q = 100, pb.n_kv = 200, pb.d = 32, pb.dv = 32, pb.threads = 2;
  Buffers expected(pb);
  expected.run_fast();
  std::vector<std::thread> users;
  std::vector<int> same(6, 0);
  for (int t = 0; t < 6; ++t)
    users.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) {
        Buffers buf(pb);
        buf.run_fast();
        same[t] += buf.o == expected.o;
      }
    });
  for (auto& u : users) u.join();
  for (int t = 0; t < 6; ++t) EXPECT_EQ(same[t], 5) << "user thread " << t;
}

// More heads than the packed-tile caches hold at once (2560 heads of 256
// keys, d = 32: 80 MiB of float32 key tiles, 120 MiB in AMX's three parts,
// past the 64 MiB a call may hold): heads share the cache's slots in turn,
// two threads at once. The result is the same, bit for bit, as that of calls
// of 64 heads each (whose tiles all fit), one thread each.
TEST(TileCache, heads_beyond_its_room_share_slots_across_threads_with_the_same_bits) {
  const std::int64_t heads = 2560, n = 256, d = 32, chunk = 64;
  const std::size_t size = static_cast<std::size_t>(heads * n * d);
  std::vector<float> q(size), k(size), v(size), o(size), o_chunks(size);
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal;
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);
  Options opt;
  opt.threads = 2;
  attention(TensorView::contiguous(q.data(), {1, heads, n, d}), TensorView::contiguous(k.data(), {1, heads, n, d}),
            TensorView::contiguous(v.data(), {1, heads, n, d}), TensorView::contiguous(o.data(), {1, heads, n, d}), opt);
  opt.threads = 1;
  for (std::int64_t h0 = 0; h0 < heads; h0 += chunk) {
    const std::size_t at = static_cast<std::size_t>(h0 * n * d);
    attention(TensorView::contiguous(q.data() + at, {1, chunk, n, d}),
              TensorView::contiguous(k.data() + at, {1, chunk, n, d}),
              TensorView::contiguous(v.data() + at, {1, chunk, n, d}),
              TensorView::contiguous(o_chunks.data() + at, {1, chunk, n, d}), opt);
  }
  EXPECT_EQ(0, std::memcmp(o.data(), o_chunks.data(), size * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Isa, PerIsa, ::testing::ValuesIn(compiled_isas()), isa_param_name);

}  // namespace
}  // namespace sdpa::test
