// Which keys each query sees, against expectations worked out by hand from the
// definitions in sdpa/options.h and sdpa/serving.h: the oracle is checked on
// its own here (not only by agreeing with the fast path), and the fast path
// against the same tables.
//
// Every score is 0 (q = 0) and value row j is the unit vector e_j, so o[i, j]
// is 1/count where query i sees key j and 0 elsewhere; a row reads as a
// string, "1100" = keys 0 and 1 visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "sdpa/attention.h"
#include "sdpa/serving.h"

namespace sdpa {
namespace {

using Rows = std::vector<std::string>;
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

// o [rows, cols] (one head) as '1'/'0' strings.
Rows seen(const std::vector<float>& o, std::int64_t rows, std::int64_t cols) {
  Rows r;
  for (std::int64_t i = 0; i < rows; ++i) {
    std::string s;
    for (std::int64_t j = 0; j < cols; ++j) s += o[i * cols + j] > 0 ? '1' : '0';
    r.push_back(s);
  }
  return r;
}

// A dense call, B batch entries of Nq queries and Nkv keys, one head, d = 1:
// the rows of every batch entry, one after the other.
Rows dense(std::int64_t b, std::int64_t n_q, std::int64_t n_kv, Options opt, bool reference) {
  std::vector<float> q(b * n_q, 0.0f), k(b * n_kv, 0.0f), v(b * n_kv * n_kv, 0.0f), o(b * n_q * n_kv, -1.0f);
  for (std::int64_t e = 0; e < b; ++e)
    for (std::int64_t j = 0; j < n_kv; ++j) v[(e * n_kv + j) * n_kv + j] = 1.0f;
  opt.threads = 1;
  const TensorView qv = TensorView::contiguous(q.data(), {b, 1, n_q, 1}),
                   kv = TensorView::contiguous(k.data(), {b, 1, n_kv, 1}),
                   vv = TensorView::contiguous(v.data(), {b, 1, n_kv, n_kv}),
                   ov = TensorView::contiguous(o.data(), {b, 1, n_q, n_kv});
  if (reference)
    reference_attention(qv, kv, vv, ov, opt);
  else
    attention(qv, kv, vv, ov, opt);
  return seen(o, b * n_q, n_kv);
}

class Visibility : public ::testing::TestWithParam<bool> {};  // true: the oracle

TEST_P(Visibility, causal_bottom_right) {
  Options opt;
  opt.causal = true;
  EXPECT_EQ(dense(1, 2, 4, opt, GetParam()), (Rows{"1110", "1111"}));
  EXPECT_EQ(dense(1, 3, 3, opt, GetParam()), (Rows{"100", "110", "111"}));
  // Nq > Nkv: offset -2, the first two queries see nothing.
  EXPECT_EQ(dense(1, 4, 2, opt, GetParam()), (Rows{"00", "00", "10", "11"}));
}

TEST_P(Visibility, causal_top_left) {
  Options opt;
  opt.causal = true;
  opt.align = Align::top_left;
  EXPECT_EQ(dense(1, 2, 4, opt, GetParam()), (Rows{"1000", "1100"}));
  EXPECT_EQ(dense(1, 4, 2, opt, GetParam()), (Rows{"10", "11", "11", "11"}));
}

TEST_P(Visibility, windows) {
  Options opt;
  opt.align = Align::top_left;
  opt.window_left = 1;
  opt.window_right = 0;
  EXPECT_EQ(dense(1, 4, 4, opt, GetParam()), (Rows{"1000", "1100", "0110", "0011"}));
  opt.window_left = -1;
  opt.window_right = 1;
  EXPECT_EQ(dense(1, 2, 4, opt, GetParam()), (Rows{"1100", "1110"}));
  // Bottom-right, offset 3: p = 3, 4; window [p - 2, p + 0].
  opt.align = Align::bottom_right;
  opt.window_left = 2;
  opt.window_right = 0;
  EXPECT_EQ(dense(1, 2, 5, opt, GetParam()), (Rows{"01110", "00111"}));
  // Windows and offsets at the ends of int64: nothing may overflow.
  opt.window_left = kMax;
  opt.window_right = kMax;
  EXPECT_EQ(dense(1, 2, 3, opt, GetParam()), (Rows{"111", "111"}));
}

TEST_P(Visibility, position_offsets) {
  Options opt;
  opt.causal = true;
  std::vector<std::int64_t> off = {1, -1};
  opt.position_offsets = TensorView::contiguous(off.data(), DType::i64, {2});
  EXPECT_EQ(dense(2, 2, 3, opt, GetParam()), (Rows{"110", "111", "000", "100"}));
  // Extreme offsets: a query at +inf sees every key causally and none through
  // a window of 0 to the left; one at -inf sees none causally.
  off = {kMax, kMin};
  EXPECT_EQ(dense(2, 2, 3, opt, GetParam()), (Rows{"111", "111", "000", "000"}));
  opt.causal = false;
  opt.window_left = 0;
  EXPECT_EQ(dense(2, 1, 3, opt, GetParam()), (Rows{"000", "111"}));
  opt.window_left = -1;
  opt.window_right = 0;
  EXPECT_EQ(dense(2, 1, 3, opt, GetParam()), (Rows{"111", "000"}));
}

TEST_P(Visibility, key_padding_does_not_move_the_alignment) {
  Options opt;
  std::vector<std::int32_t> lens = {2, 3, 0};
  opt.key_lengths = TensorView::contiguous(lens.data(), DType::i32, {3});
  EXPECT_EQ(dense(3, 1, 3, opt, GetParam()), (Rows{"110", "111", "000"}));
  // Bottom-right against Nkv = 4, not against the key lengths: p = 2, 3.
  opt.causal = true;
  EXPECT_EQ(dense(3, 2, 4, opt, GetParam()), (Rows{"1100", "1100", "1110", "1110", "0000", "0000"}));
}

TEST_P(Visibility, packed_sequences_align_per_sequence) {
  // Sequence 0: 2 queries, 4 keys; sequence 1: 3 queries, 1 key; one head, d = 1.
  const std::vector<std::int64_t> cu_q = {0, 2, 5}, cu_k = {0, 4, 5};
  const std::int64_t tq = 5, tk = 5;
  std::vector<float> q(tq, 0.0f), k(tk, 0.0f), v(tk * tk, 0.0f), o(tq * tk, -1.0f);
  for (std::int64_t j = 0; j < tk; ++j) v[j * tk + j] = 1.0f;  // packed row j is e_j
  Options opt;
  opt.causal = true;
  opt.threads = 1;
  attention_varlen(TensorView::contiguous(q.data(), {tq, 1, 1}), TensorView::contiguous(k.data(), {tk, 1, 1}),
                   TensorView::contiguous(v.data(), {tk, 1, tk}), TensorView::contiguous(o.data(), {tq, 1, tk}),
                   TensorView::contiguous(cu_q.data(), DType::i64, {3}),
                   TensorView::contiguous(cu_k.data(), DType::i64, {3}), opt, -1, -1, GetParam());
  // Columns are packed key rows: sequence 1's key is column 4.
  EXPECT_EQ(seen(o, tq, tk), (Rows{"11100", "11110", "00000", "00000", "00001"}));
}

// Paged: sequence 0 holds 4 keys and sequence 1 holds 2, one more key each is
// appended; pages are handed out in a shuffled order. Value row j of sequence
// b is e_j (the appended one e_4 or e_2), dv = 6.
Rows paged(std::int64_t page_size, bool reference) {
  const std::int64_t b = 2, n_q = 2, dv = 6, max_pages = (6 + page_size - 1) / page_size;
  const std::int64_t num_pages = b * max_pages + 1;
  std::vector<std::int32_t> table(b * max_pages);
  for (std::int64_t e = 0; e < b * max_pages; ++e) table[e] = static_cast<std::int32_t>((e * 7 + 3) % num_pages);
  const std::vector<std::int32_t> lens = {4, 2};
  // Entries past a sequence's keys are never read: make them unusable.
  for (std::int64_t s = 0; s < b; ++s)
    for (std::int64_t e = (lens[s] + 1 + page_size - 1) / page_size; e < max_pages; ++e)
      table[s * max_pages + e] = std::numeric_limits<std::int32_t>::max();
  std::vector<float> kp(num_pages * page_size, 0.0f), vp(num_pages * page_size * dv, 0.0f);
  for (std::int64_t s = 0; s < b; ++s)
    for (std::int64_t j = 0; j < lens[s]; ++j) {
      const std::int64_t page = table[s * max_pages + j / page_size];
      vp[(page * page_size + j % page_size) * dv + j] = 1.0f;
    }
  std::vector<float> kn(b, 0.0f), vn(b * dv, 0.0f), q(b * n_q, 0.0f), o(b * n_q * dv, -1.0f);
  for (std::int64_t s = 0; s < b; ++s) vn[s * dv + lens[s]] = 1.0f;
  Options opt;
  opt.causal = true;
  opt.threads = 1;
  attention_paged(TensorView::contiguous(q.data(), {b, 1, n_q, 1}),
                  TensorView::contiguous(kp.data(), {num_pages, page_size, 1, 1}),
                  TensorView::contiguous(vp.data(), {num_pages, page_size, 1, dv}),
                  TensorView::contiguous(table.data(), DType::i32, {b, max_pages}),
                  TensorView::contiguous(lens.data(), DType::i32, {b}), TensorView::contiguous(kn.data(), {b, 1, 1, 1}),
                  TensorView::contiguous(vn.data(), {b, 1, 1, dv}), TensorView::contiguous(o.data(), {b, 1, n_q, dv}),
                  opt, reference);
  return seen(o, b * n_q, dv);
}

TEST_P(Visibility, paged_with_page_size_1_and_3) {
  // 5 and 3 keys after the append, bottom-right per sequence: offsets 3 and 1.
  const Rows want = {"111100", "111110", "110000", "111000"};
  EXPECT_EQ(paged(1, GetParam()), want);
  EXPECT_EQ(paged(3, GetParam()), want);
}

INSTANTIATE_TEST_SUITE_P(Path, Visibility, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "oracle" : "fast"; });

}  // namespace
}  // namespace sdpa
