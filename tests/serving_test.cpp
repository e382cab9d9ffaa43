// Packed variable-length batches, KV cache append + attend, and paged caches:
// each equals the plain call it stands for bit for bit, matches the oracle,
// and rejects bad calls before writing anything.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <numeric>
#include <random>
#include <vector>

#include "sdpa/attention.h"
#include "support/problem.h"
#include "sdpa/serving.h"

namespace sdpa {
namespace {

using test::randn;

class Serving : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
  }
  Options opts(bool causal, int threads = 2) const {
    Options o;
    o.isa = GetParam();
    o.causal = causal;
    o.threads = threads;
    return o;
  }
};

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

TEST_P(Serving, varlen_equals_separate_calls_bit_for_bit) {
  const std::int64_t h = 4, h_kv = 2, d = 32, dv = 24;
  const std::vector<std::int64_t> len_q = {5, 0, 130, 1, 64}, len_k = {9, 7, 130, 700, 0};
  for (bool causal : {false, true}) {
    for (int window : {-1, 40}) {
      std::vector<std::int32_t> cu_q = {0}, cu_k = {0};
      for (std::size_t s = 0; s < len_q.size(); ++s) {
        cu_q.push_back(cu_q.back() + len_q[s]);
        cu_k.push_back(cu_k.back() + len_k[s]);
      }
      const std::int64_t tq = cu_q.back(), tk = cu_k.back();
      std::vector<float> q = randn(tq * h * d, 1), k = randn(tk * h_kv * d, 2), v = randn(tk * h_kv * dv, 3);
      std::vector<float> o(tq * h * dv, NAN), lse(h * tq, NAN);
      Options opt = opts(causal);
      opt.window_left = window;
      opt.lse = TensorView::contiguous(lse.data(), {h, tq});
      const std::int64_t n = static_cast<std::int64_t>(len_q.size());
      attention_varlen(TensorView::contiguous(q.data(), {tq, h, d}), TensorView::contiguous(k.data(), {tk, h_kv, d}),
                       TensorView::contiguous(v.data(), {tk, h_kv, dv}), TensorView::contiguous(o.data(), {tq, h, dv}),
                       TensorView::contiguous(cu_q.data(), DType::i32, {n + 1}),
                       TensorView::contiguous(cu_k.data(), DType::i32, {n + 1}), opt, 130, 700);
      for (std::int64_t s = 0; s < n; ++s) {
        // The same sequence as a call of its own, through [B, N, H, d] views of the packed rows.
        std::vector<float> os(len_q[s] * h * dv, NAN), ls(h * len_q[s], NAN);
        Options one = opt;
        one.lse = TensorView::contiguous(ls.data(), {1, h, len_q[s]});
        attention(TensorView::bshd(q.data() + cu_q[s] * h * d, 1, len_q[s], h, d),
                  TensorView::bshd(k.data() + cu_k[s] * h_kv * d, 1, len_k[s], h_kv, d),
                  TensorView::bshd(v.data() + cu_k[s] * h_kv * dv, 1, len_k[s], h_kv, dv),
                  TensorView::bshd(os.data(), 1, len_q[s], h, dv), one);
        ASSERT_TRUE(os.empty() || std::memcmp(os.data(), o.data() + cu_q[s] * h * dv, os.size() * 4) == 0)
            << "sequence " << s << " causal " << causal << " window " << window;
        for (std::int64_t hh = 0; hh < h; ++hh)
          for (std::int64_t i = 0; i < len_q[s]; ++i) {
            const float a = ls[hh * len_q[s] + i], b = lse[hh * tq + cu_q[s] + i];
            ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "lse of sequence " << s;
          }
      }
    }
  }
}

TEST_P(Serving, varlen_matches_oracle) {
  const std::int64_t h = 2, h_kv = 1, d = 16, dv = 16;
  std::vector<std::int64_t> cu_q = {0, 3, 3, 40}, cu_k = {0, 50, 51, 90};
  std::vector<float> q = randn(40 * h * d, 4), k = randn(90 * h_kv * d, 5), v = randn(90 * h_kv * dv, 6);
  std::vector<float> o(40 * h * dv);
  std::vector<double> o_ref(o.size());
  auto call = [&](const TensorView& out, bool ref) {
    attention_varlen(TensorView::contiguous(q.data(), {40, h, d}), TensorView::contiguous(k.data(), {90, h_kv, d}),
                     TensorView::contiguous(v.data(), {90, h_kv, dv}), out,
                     TensorView::contiguous(cu_q.data(), DType::i64, {4}),
                     TensorView::contiguous(cu_k.data(), DType::i64, {4}), opts(true), -1, -1, ref);
  };
  call(TensorView::contiguous(o.data(), {40, h, dv}), false);
  call(TensorView::contiguous(o_ref.data(), {40, h, dv}), true);
  for (std::size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], o_ref[i], 2e-6) << i;
}

// A KV cache of `capacity` slots per sequence with guard values around what is written.
struct Cache {
  std::int64_t b, h_kv, cap, d;
  std::vector<float> k, v;
  Cache(std::int64_t b_, std::int64_t h_kv_, std::int64_t cap_, std::int64_t d_, std::uint64_t seed)
      : b(b_), h_kv(h_kv_), cap(cap_), d(d_), k(randn(b * h_kv * cap * d, seed)), v(randn(b * h_kv * cap * d, seed + 1)) {}
  TensorView kv() { return TensorView::contiguous(k.data(), {b, h_kv, cap, d}); }
  TensorView vv() { return TensorView::contiguous(v.data(), {b, h_kv, cap, d}); }
};

TEST_P(Serving, kvcache_append_writes_exactly_the_new_slots) {
  const std::int64_t b = 3, h = 8, h_kv = 2, cap = 40, d = 16, n_new = 3;
  Cache cache(b, h_kv, cap, d, 10);
  const std::vector<float> k_before = cache.k, v_before = cache.v;
  std::vector<std::int32_t> lens = {0, 17, 37};
  std::vector<float> kn = randn(b * h_kv * n_new * d, 11), vn = randn(b * h_kv * n_new * d, 12);
  std::vector<float> q = randn(b * h * n_new * d, 13), o(b * h * n_new * d);
  attention_kvcache(TensorView::contiguous(q.data(), {b, h, n_new, d}), cache.kv(), cache.vv(),
                    TensorView::contiguous(lens.data(), DType::i32, {b}),
                    TensorView::contiguous(kn.data(), {b, h_kv, n_new, d}),
                    TensorView::contiguous(vn.data(), {b, h_kv, n_new, d}), TensorView::contiguous(o.data(), {b, h, n_new, d}),
                    opts(true));
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t hk = 0; hk < h_kv; ++hk)
      for (std::int64_t j = 0; j < cap; ++j)
        for (std::int64_t c = 0; c < d; ++c) {
          const std::int64_t at = ((i * h_kv + hk) * cap + j) * d + c;
          const bool fresh = j >= lens[i] && j < lens[i] + n_new;
          const std::int64_t src = ((i * h_kv + hk) * n_new + (j - lens[i])) * d + c;
          ASSERT_EQ(cache.k[at], fresh ? kn[src] : k_before[at]) << "b=" << i << " j=" << j;
          ASSERT_EQ(cache.v[at], fresh ? vn[src] : v_before[at]) << "b=" << i << " j=" << j;
        }
  // The output equals plain causal attention over each sequence's first lens + n_new keys.
  for (std::int64_t i = 0; i < b; ++i) {
    const std::int64_t total = lens[i] + n_new;
    std::vector<double> ref(h * n_new * d);
    TensorView kv = TensorView::contiguous(cache.k.data() + i * h_kv * cap * d, {1, h_kv, total, d});
    kv.stride = {0, cap * d, d, 1};
    TensorView vv = TensorView::contiguous(cache.v.data() + i * h_kv * cap * d, {1, h_kv, total, d});
    vv.stride = {0, cap * d, d, 1};
    reference_attention(TensorView::contiguous(q.data() + i * h * n_new * d, {1, h, n_new, d}), kv, vv,
                        TensorView::contiguous(ref.data(), {1, h, n_new, d}), opts(true));
    for (std::size_t e = 0; e < ref.size(); ++e) ASSERT_NEAR(o[i * h * n_new * d + e], ref[e], 2e-6) << "b=" << i;
  }
}

TEST_P(Serving, kvcache_overflow_is_rejected_before_writing) {
  const std::int64_t b = 2, h = 2, h_kv = 2, cap = 10, d = 8;
  Cache cache(b, h_kv, cap, d, 20);
  const std::vector<float> k_before = cache.k;
  std::vector<std::int64_t> lens = {3, 9};  // 9 + 2 > 10
  std::vector<float> kn(b * h_kv * 2 * d, 7.0f), q(b * h * 1 * d), o(b * h * d, 42.0f);
  try {
    attention_kvcache(TensorView::contiguous(q.data(), {b, h, 1, d}), cache.kv(), cache.vv(),
                      TensorView::contiguous(lens.data(), DType::i64, {b}),
                      TensorView::contiguous(kn.data(), {b, h_kv, 2, d}), TensorView::contiguous(kn.data(), {b, h_kv, 2, d}),
                      TensorView::contiguous(o.data(), {b, h, 1, d}), opts(true));
    FAIL() << "accepted an overflow";
  } catch (const Error& e) {
    EXPECT_EQ(e.arg(), "cache_seqlens");
    EXPECT_THAT(e.what(), ::testing::HasSubstr("9 + 2 at [1]"));
  }
  EXPECT_EQ(cache.k, k_before);
  for (float x : o) EXPECT_EQ(x, 42.0f);
}

// Paged and contiguous caches hold the same keys; attention over them must agree bit for bit.
TEST_P(Serving, paged_equals_contiguous_bit_for_bit) {
  const std::int64_t b = 3, h = 8, h_kv = 2, d = 64, cap = 600;
  const std::vector<std::int32_t> lens = {0, 257, 590};
  for (std::int64_t page_size : {1, 3, 16, 256}) {
    for (std::int64_t n_new : {1, 7}) {  // decode, and prefill into the cache
      Cache cache(b, h_kv, cap, d, 30);
      const std::int64_t max_pages = (cap + page_size - 1) / page_size, num_pages = b * max_pages + 5;
      // Shuffled page order: sequence i's page p is a random free page.
      std::vector<std::int32_t> order(num_pages);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(page_size)));
      std::vector<std::int32_t> table(b * max_pages);
      for (std::int64_t i = 0; i < b * max_pages; ++i) table[i] = order[i];
      std::vector<float> kp(num_pages * page_size * h_kv * d, NAN), vp(kp.size(), NAN);
      for (std::int64_t i = 0; i < b; ++i)
        for (std::int64_t j = 0; j < lens[i]; ++j)
          for (std::int64_t hk = 0; hk < h_kv; ++hk) {
            const std::int64_t page = table[i * max_pages + j / page_size];
            const std::int64_t dst = ((page * page_size + j % page_size) * h_kv + hk) * d;
            const std::int64_t src = ((i * h_kv + hk) * cap + j) * d;
            std::copy_n(cache.k.data() + src, d, kp.data() + dst);
            std::copy_n(cache.v.data() + src, d, vp.data() + dst);
          }
      std::vector<float> kn = randn(b * h_kv * n_new * d, 31), vn = randn(b * h_kv * n_new * d, 32);
      std::vector<float> q = randn(b * h * n_new * d, 33), o1(b * h * n_new * d), o2(o1.size()), l1(b * h * n_new),
                         l2(l1.size());
      for (int threads : {1, 2}) {
        Options opt = opts(true, threads);
        Cache c2 = cache;
        opt.lse = TensorView::contiguous(l1.data(), {b, h, n_new});
        attention_kvcache(TensorView::contiguous(q.data(), {b, h, n_new, d}), c2.kv(), c2.vv(),
                          TensorView::contiguous(lens.data(), DType::i32, {b}),
                          TensorView::contiguous(kn.data(), {b, h_kv, n_new, d}),
                          TensorView::contiguous(vn.data(), {b, h_kv, n_new, d}),
                          TensorView::contiguous(o1.data(), {b, h, n_new, d}), opt);
        std::vector<float> kp2 = kp, vp2 = vp;
        opt.lse = TensorView::contiguous(l2.data(), {b, h, n_new});
        attention_paged(TensorView::contiguous(q.data(), {b, h, n_new, d}),
                        TensorView::contiguous(kp2.data(), {num_pages, page_size, h_kv, d}),
                        TensorView::contiguous(vp2.data(), {num_pages, page_size, h_kv, d}),
                        TensorView::contiguous(table.data(), DType::i32, {b, max_pages}),
                        TensorView::contiguous(lens.data(), DType::i32, {b}),
                        TensorView::contiguous(kn.data(), {b, h_kv, n_new, d}),
                        TensorView::contiguous(vn.data(), {b, h_kv, n_new, d}),
                        TensorView::contiguous(o2.data(), {b, h, n_new, d}), opt);
        ASSERT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 4)) << "page_size " << page_size << " n_new " << n_new
                                                                       << " threads " << threads;
        ASSERT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * 4));
      }
    }
  }
}

TEST_P(Serving, decode_is_bitwise_identical_for_1_and_2_threads) {
  const std::int64_t b = 2, h = 32, h_kv = 8, d = 128, cap = 5000;
  Cache cache(b, h_kv, cap, d, 40);
  std::vector<std::int32_t> lens = {4999, 3000};
  std::vector<float> q = randn(b * h * d, 41), o1(b * h * d), o2(o1.size());
  for (auto [threads, out] : {std::pair{1, &o1}, std::pair{2, &o2}}) {
    attention_kvcache(TensorView::contiguous(q.data(), {b, h, 1, d}), cache.kv(), cache.vv(),
                      TensorView::contiguous(lens.data(), DType::i32, {b}), TensorView(), TensorView(),
                      TensorView::contiguous(out->data(), {b, h, 1, d}), opts(false, threads));
  }
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 4));
}

TEST(ServingErrors, bad_calls_name_their_argument) {
  auto arg_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.arg() + " | " + e.what();
    }
    return "accepted";
  };
  std::vector<float> q(10 * 2 * 8), k(10 * 2 * 8), o(q.size());
  std::vector<std::int32_t> bad = {0, 6, 4, 10}, good = {0, 4, 6, 10};
  auto varlen = [&](std::vector<std::int32_t>& cq, std::int64_t hkv) {
    attention_varlen(TensorView::contiguous(q.data(), {10, 2, 8}), TensorView::contiguous(k.data(), {10, hkv, 8 * 2 / hkv}),
                     TensorView::contiguous(k.data(), {10, hkv, 8 * 2 / hkv}), TensorView::contiguous(o.data(), {10, 2, 8}),
                     TensorView::contiguous(cq.data(), DType::i32, {4}), TensorView::contiguous(good.data(), DType::i32, {4}));
  };
  EXPECT_THAT(arg_of([&] { varlen(bad, 2); }), ::testing::StartsWith("cu_seqlens_q | cu_seqlens_q: expected non-decreasing"));
  std::vector<float> k3(10 * 3 * 8);
  EXPECT_THAT(arg_of([&] {
                attention_varlen(TensorView::contiguous(q.data(), {10, 2, 8}), TensorView::contiguous(k3.data(), {10, 3, 8}),
                                 TensorView::contiguous(k3.data(), {10, 3, 8}), TensorView::contiguous(o.data(), {10, 2, 8}),
                                 TensorView::contiguous(good.data(), DType::i32, {4}),
                                 TensorView::contiguous(good.data(), DType::i32, {4}));
              }),
              ::testing::StartsWith("k | k: expected heads Hkv dividing H=2"));
  // A page index out of range.
  std::vector<float> pages(4 * 2 * 1 * 8), q1(1 * 1 * 1 * 8), o1(8);
  std::vector<std::int32_t> table = {0, 7}, lens = {3};
  EXPECT_THAT(arg_of([&] {
                attention_paged(TensorView::contiguous(q1.data(), {1, 1, 1, 8}),
                                TensorView::contiguous(pages.data(), {4, 2, 1, 8}),
                                TensorView::contiguous(pages.data(), {4, 2, 1, 8}),
                                TensorView::contiguous(table.data(), DType::i32, {1, 2}),
                                TensorView::contiguous(lens.data(), DType::i32, {1}), TensorView(), TensorView(),
                                TensorView::contiguous(o1.data(), {1, 1, 1, 8}));
              }),
              ::testing::HasSubstr("block_table: expected page indices in [0, num_pages=4), got 7 at [0, 1]"));
}

// A paged cache of 2 sequences, 1 KV head, d = dv = 4, page_size 2, 4 pages
// per sequence, all in one float buffer `mem` (after `before` spare floats) so
// that outputs can be placed next to, or inside, the pages.
template <class T>
struct PagedCall {
  static constexpr std::int64_t b = 2, h = 1, d = 4, page_size = 2, num_pages = 8;
  std::vector<T> mem;
  std::int64_t before;
  std::vector<std::int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7}, lens = {3, 5};
  std::vector<T> q = std::vector<T>(b * h * d, T(0.5)), kn = std::vector<T>(b * d, T(2)), vn = kn;
  Options opt;
  bool reference = false;
  explicit PagedCall(std::int64_t before_, std::int64_t after) : mem(before_ + 2 * pool() + after, T(1)), before(before_) {}
  static std::int64_t pool() { return num_pages * page_size * d; }
  T* k_pages() { return mem.data() + before; }
  T* v_pages() { return k_pages() + pool(); }
  T* end() { return v_pages() + pool(); }
  void run(const TensorView& o) {
    attention_paged(TensorView::contiguous(q.data(), {b, h, 1, d}),
                    TensorView::contiguous(k_pages(), {num_pages, page_size, 1, d}),
                    TensorView::contiguous(v_pages(), {num_pages, page_size, 1, d}),
                    TensorView::contiguous(table.data(), DType::i32, {b, 4}),
                    TensorView::contiguous(lens.data(), DType::i32, {b}), TensorView::contiguous(kn.data(), {b, 1, 1, d}),
                    TensorView::contiguous(vn.data(), {b, 1, 1, d}), o, opt, reference);
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ServingOverlap, paged_lse_overlapping_a_page_pool_is_rejected_before_writing) {
  PagedCall<float> c(0, 0);
  std::vector<float> o(c.b * c.d, 42.0f);
  const std::vector<float> before = c.mem;
  c.opt.lse = TensorView::contiguous(c.v_pages() + 5, {c.b, c.h, 1});
  EXPECT_EQ(error_of([&] { c.run(TensorView::contiguous(o.data(), {c.b, c.h, 1, c.d})); }),
            "v_pages: expected memory disjoint from output lse, got overlapping views");
  EXPECT_EQ(c.mem, before) << "the rejected call appended k_new/v_new";
  for (float x : o) EXPECT_EQ(x, 42.0f);
  // Without new keys the pools are inputs only.
  c.opt.lse = TensorView::contiguous(c.k_pages() + 7, {c.b, c.h, 1});
  EXPECT_EQ(error_of([&] {
              attention_paged(TensorView::contiguous(c.q.data(), {c.b, c.h, 1, c.d}),
                              TensorView::contiguous(c.k_pages(), {c.num_pages, c.page_size, 1, c.d}),
                              TensorView::contiguous(c.v_pages(), {c.num_pages, c.page_size, 1, c.d}),
                              TensorView::contiguous(c.table.data(), DType::i32, {c.b, 4}),
                              TensorView::contiguous(c.lens.data(), DType::i32, {c.b}), TensorView(), TensorView(),
                              TensorView::contiguous(o.data(), {c.b, c.h, 1, c.d}), c.opt);
            }),
            "lse: expected memory disjoint from input k_pages, got overlapping views");
  EXPECT_EQ(c.mem, before);
}

// O [B, H, 1, d] with its batch axis reversed: data points at the last batch
// entry and stride_b is negative, so the view reaches below data.
TensorView reversed_o(float* last_entry, std::int64_t b, std::int64_t d) {
  TensorView o = TensorView::contiguous(last_entry, {b, 1, 1, d});
  o.stride[0] = -d;
  return o;
}

TEST(ServingOverlap, negative_strides_are_measured_from_their_lowest_address) {
  // O sits right after the pages, reversed: disjoint, accepted, and equal to
  // the same call with a plain O.
  PagedCall<float> c(0, 2 * 4);
  const std::vector<float> start = c.mem;
  c.run(reversed_o(c.end() + 4, c.b, c.d));
  std::vector<float> got(c.end(), c.end() + 8);
  c.mem = start;
  std::vector<float> plain(8);
  c.run(TensorView::contiguous(plain.data(), {c.b, 1, 1, c.d}));
  EXPECT_EQ(std::vector<float>(got.begin() + 4, got.end()), std::vector<float>(plain.begin(), plain.begin() + 4));
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 4), std::vector<float>(plain.begin() + 4, plain.end()));
  // Reversed O whose data lies past the pools but whose first entry reaches
  // back into v_pages: rejected, nothing written.
  c.mem = start;
  EXPECT_EQ(error_of([&] { c.run(reversed_o(c.end() + 2, c.b, c.d)); }),
            "v_pages: expected memory disjoint from output o, got overlapping views");
  EXPECT_EQ(c.mem, start);
  // The same on a dense call: Q is mem[0, 8), O reversed over mem[8, 16) is
  // fine; one float lower it overlaps Q.
  std::vector<float> mem(16, 0.5f), k(2 * 3 * 4, 1.0f);
  auto dense = [&](float* last_entry) {
    attention(TensorView::contiguous(mem.data(), {2, 1, 1, 4}), TensorView::contiguous(k.data(), {2, 1, 3, 4}),
              TensorView::contiguous(k.data(), {2, 1, 3, 4}), reversed_o(last_entry, 2, 4));
  };
  EXPECT_EQ(error_of([&] { dense(mem.data() + 12); }), "accepted");
  EXPECT_EQ(error_of([&] { dense(mem.data() + 11); }), "o: expected memory disjoint from input q, got overlapping views");
}

TEST(ServingOverlap, float64_views_on_the_reference_path) {
  // f64 O over doubles [0, 8) and pages from double 5 on: only O's upper half
  // overlaps k_pages (4-byte elements would have missed it).
  PagedCall<double> c(5, 0);
  c.reference = true;
  const std::vector<double> start = c.mem;
  EXPECT_EQ(error_of([&] { c.run(TensorView::contiguous(c.mem.data(), {c.b, 1, 1, c.d})); }),
            "k_pages: expected memory disjoint from output o, got overlapping views");
  EXPECT_EQ(c.mem, start);
  // Accepted with O elsewhere: the append and the oracle read f64 pages as the
  // f32 call reads f32 ones.
  std::vector<double> o64(c.b * c.d);
  c.run(TensorView::contiguous(o64.data(), {c.b, 1, 1, c.d}));
  PagedCall<float> f(5, 0);
  f.reference = true;
  std::vector<float> o32(f.b * f.d);
  f.run(TensorView::contiguous(o32.data(), {f.b, 1, 1, f.d}));
  for (std::size_t i = 0; i < o32.size(); ++i) EXPECT_NEAR(o64[i], o32[i], 1e-6) << i;
  for (std::size_t i = 0; i < f.mem.size(); ++i) ASSERT_EQ(c.mem[i], static_cast<double>(f.mem[i])) << i;
}

TEST(ServingErrors, rejected_cache_calls_name_their_argument_and_write_nothing) {
  const std::int64_t b = 2, h = 2, h_kv = 1, cap = 8, d = 4;
  Cache cache(b, h_kv, cap, d, 50);
  const std::vector<float> k_before = cache.k, v_before = cache.v;
  std::vector<std::int32_t> lens = {2, 5};
  std::vector<float> kn(b * h_kv * d, 3.0f), q(b * h * d, 0.5f), o(b * h * d, 42.0f);
  const TensorView qv = TensorView::contiguous(q.data(), {b, h, 1, d}), ov = TensorView::contiguous(o.data(), {b, h, 1, d});
  const TensorView lv = TensorView::contiguous(lens.data(), DType::i32, {b});
  const TensorView knv = TensorView::contiguous(kn.data(), {b, h_kv, 1, d});
  auto kvcache = [&](const TensorView& k_new, const TensorView& v_new, const Options& opt) {
    return error_of([&] { attention_kvcache(qv, cache.kv(), cache.vv(), lv, k_new, v_new, ov, opt); });
  };
  EXPECT_THAT(kvcache(knv, TensorView(), {}), ::testing::StartsWith("v_new: expected to be given together with k_new"));
  EXPECT_THAT(kvcache(TensorView(), knv, {}), ::testing::StartsWith("k_new: expected to be given together with v_new"));
  Options padded;
  padded.key_lengths = lv;
  EXPECT_THAT(kvcache(knv, knv, padded), ::testing::StartsWith("key_lengths: expected unset with a KV cache"));
  std::vector<double> k64(kn.begin(), kn.end());
  EXPECT_THAT(kvcache(TensorView::contiguous(k64.data(), {b, h_kv, 1, d}), knv, {}),
              ::testing::StartsWith("k_new: expected float32, float16 or bfloat16 [B=2, Hkv=1, n_new, 4], got float64"));
  // New keys read from the cache they are appended to.
  EXPECT_EQ(kvcache(TensorView::contiguous(cache.k.data() + 4 * d, {b, h_kv, 1, d}), knv, {}),
            "k_cache: expected memory disjoint from input k_new, got overlapping views");
  // An output inside the cache.
  EXPECT_EQ(error_of([&] {
              attention_kvcache(qv, cache.kv(), cache.vv(), lv, knv, knv,
                                TensorView::contiguous(cache.v.data() + 3, {b, h, 1, d}));
            }),
            "v_cache: expected memory disjoint from output o, got overlapping views");
  // A paged call with new keys and one bad page index writes no page.
  std::vector<float> pages(6 * 2 * d, 1.0f);
  const std::vector<float> pages_before = pages;
  std::vector<std::int32_t> table = {0, 1, 2, 3, 4, 9};
  EXPECT_THAT(error_of([&] {
                attention_paged(qv, TensorView::contiguous(pages.data(), {6, 2, 1, d}),
                                TensorView::contiguous(pages.data(), {6, 2, 1, d}),
                                TensorView::contiguous(table.data(), DType::i32, {b, 3}), lv, knv, knv, ov);
              }),
              ::testing::HasSubstr("block_table: expected page indices in [0, num_pages=6), got 9 at [1, 2]"));
  Options masked;
  std::vector<float> mask(8, 0.0f);
  masked.mask = TensorView::contiguous(mask.data(), {8});
  EXPECT_THAT(error_of([&] {
                attention_paged(qv, TensorView::contiguous(pages.data(), {6, 2, 1, d}),
                                TensorView::contiguous(pages.data(), {6, 2, 1, d}),
                                TensorView::contiguous(table.data(), DType::i32, {b, 3}), lv, knv, knv, ov, masked);
              }),
              ::testing::StartsWith("mask: expected unset with a paged cache"));
  // Sizes are reported in the pages' own layout.
  EXPECT_EQ(error_of([&] {
              attention_paged(qv, TensorView::contiguous(pages.data(), {12, 2, 1, 2}),
                              TensorView::contiguous(pages.data(), {12, 2, 1, 2}),
                              TensorView::contiguous(table.data(), DType::i32, {b, 3}), lv, TensorView(), TensorView(), ov);
            }),
            "k_pages: expected head size d=4 (from q), got 2 in [12, 2, 1, 2]");
  EXPECT_EQ(pages, pages_before);
  EXPECT_EQ(cache.k, k_before);
  EXPECT_EQ(cache.v, v_before);
  for (float x : o) EXPECT_EQ(x, 42.0f);
}

TEST(ServingErrors, packed_calls_refuse_per_batch_options) {
  std::vector<float> q(6 * 2 * 4, 0.5f), o(q.size()), probs(64);
  std::vector<std::int32_t> cu = {0, 2, 6};
  Options opt;
  opt.probs = TensorView::contiguous(probs.data(), {1, 2, 6, 6});
  EXPECT_THAT(error_of([&] {
                attention_varlen(TensorView::contiguous(q.data(), {6, 2, 4}), TensorView::contiguous(q.data(), {6, 2, 4}),
                                 TensorView::contiguous(q.data(), {6, 2, 4}), TensorView::contiguous(o.data(), {6, 2, 4}),
                                 TensorView::contiguous(cu.data(), DType::i32, {3}),
                                 TensorView::contiguous(cu.data(), DType::i32, {3}), opt);
              }),
              ::testing::StartsWith("probs: expected unset with packed sequences"));
}

// ALiBi slopes [n, H] with packed sequences: one row of slopes per sequence.
TEST(ServingVarlen, per_sequence_alibi_matches_the_oracle) {
  const std::int64_t h = 2, d = 8;
  std::vector<std::int64_t> cu_q = {0, 3, 7}, cu_k = {0, 5, 6};
  std::vector<float> q = randn(7 * h * d, 60), k = randn(6 * h * d, 61), v = randn(6 * h * d, 62);
  std::vector<float> slopes = {0.5f, 0.25f, 2.0f, 1.0f}, o(7 * h * d);
  std::vector<double> ref(o.size());
  Options opt;
  opt.causal = true;
  opt.alibi_slopes = TensorView::contiguous(slopes.data(), {2, h});
  auto call = [&](const TensorView& out, bool reference) {
    attention_varlen(TensorView::contiguous(q.data(), {7, h, d}), TensorView::contiguous(k.data(), {6, h, d}),
                     TensorView::contiguous(v.data(), {6, h, d}), out, TensorView::contiguous(cu_q.data(), DType::i64, {3}),
                     TensorView::contiguous(cu_k.data(), DType::i64, {3}), opt, -1, -1, reference);
  };
  call(TensorView::contiguous(o.data(), {7, h, d}), false);
  call(TensorView::contiguous(ref.data(), {7, h, d}), true);
  for (std::size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], ref[i], 2e-6) << i;
  // Sequence 1 alone, with its own row of slopes.
  std::vector<float> one(4 * h * d);
  Options single = opt;
  single.alibi_slopes = TensorView::contiguous(slopes.data() + h, {h});
  attention(TensorView::bshd(q.data() + 3 * h * d, 1, 4, h, d), TensorView::bshd(k.data() + 5 * h * d, 1, 1, h, d),
            TensorView::bshd(v.data() + 5 * h * d, 1, 1, h, d), TensorView::bshd(one.data(), 1, 4, h, d), single);
  EXPECT_EQ(0, std::memcmp(one.data(), o.data() + 3 * h * d, one.size() * 4));
}

INSTANTIATE_TEST_SUITE_P(Isa, Serving, ::testing::ValuesIn(compiled_isas()), isa_param_name);

}  // namespace
}  // namespace sdpa
