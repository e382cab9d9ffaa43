// 16-bit and int8 storage against the float64 oracle.
//
// The precision policy (README, "16-bit storage"): with Q, K, V (and O) stored
// in float16 or bfloat16, the fast path's worst error against the oracle run
// on the same rounded values is at most twice that of a plain implementation
// computing in float32 from the same 16-bit values (its O rounded to O's
// dtype too), plus a floor of a few float32 roundings. Options::round_p has
// its own bound: the same policy against a plain implementation that rounds P
// to V's type before P·V. int8 K/V: the fast path is held to the policy on
// the dequantised values, and its distance from float32 attention on the
// original values to a first-order bound computed from the scales.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "half.h"
#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/serving.h"

namespace sdpa {
namespace {

// A float array in one storage dtype: the rounded values (as floats) and the
// bytes the library reads.
struct Stored {
  DType dtype = DType::f32;
  std::vector<float> values;         // exactly representable in dtype
  std::vector<std::uint16_t> bits;   // 16-bit storage
  void* data() { return dtype == DType::f32 ? static_cast<void*>(values.data()) : static_cast<void*>(bits.data()); }
};

float round_to(float x, DType t) {
  if (t == DType::f16) return half_to_float(float_to_half(x));
  if (t == DType::bf16) return bf16_to_float(float_to_bf16(x));
  return x;
}

Stored store(const std::vector<float>& x, DType t) {
  Stored s;
  s.dtype = t;
  s.values.resize(x.size());
  if (t != DType::f32) s.bits.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    s.values[i] = round_to(x[i], t);
    if (t == DType::f16) s.bits[i] = float_to_half(x[i]);
    if (t == DType::bf16) s.bits[i] = float_to_bf16(x[i]);
  }
  return s;
}

std::vector<float> randn(std::size_t n, std::uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> x(n);
  for (float& e : x) e = dist(g);
  return x;
}

// An output buffer of dtype t with n elements, read back as doubles.
struct Out {
  DType dtype;
  std::vector<float> f;
  std::vector<std::uint16_t> h;
  Out(DType t, std::size_t n) : dtype(t), f(t == DType::f32 ? n : 0, NAN), h(t == DType::f32 ? 0 : n, 0x7E00u) {}
  void* data() { return dtype == DType::f32 ? static_cast<void*>(f.data()) : static_cast<void*>(h.data()); }
  std::vector<double> read() const {
    std::vector<double> r(dtype == DType::f32 ? f.size() : h.size());
    for (std::size_t i = 0; i < r.size(); ++i)
      r[i] = dtype == DType::f32 ? f[i] : dtype == DType::f16 ? half_to_float(h[i]) : bf16_to_float(h[i]);
    return r;
  }
};

double max_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]));
  return e;
}
double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// One dense problem [B, H, N, d] with bottom-right causal optional.
struct Problem {
  std::int64_t b = 1, h = 2, h_kv = 1, n_q = 9, n_kv = 37, d = 16, dv = 16;
  bool causal = false;
  DType qd = DType::f32, kd = DType::f32, vd = DType::f32, od = DType::f32;
  bool round_p = false;
  std::uint64_t seed = 1;

  std::string describe() const {
    std::ostringstream os;
    os << "B=" << b << " H=" << h << " Hkv=" << h_kv << " Nq=" << n_q << " Nkv=" << n_kv << " d=" << d << " dv=" << dv
       << (causal ? " causal" : "") << " q=" << dtype_name(qd) << " k=" << dtype_name(kd) << " v=" << dtype_name(vd)
       << " o=" << dtype_name(od) << (round_p ? " round_p" : "");
    return os.str();
  }
};

// The plain implementation: float32 loops from the stored values, sequential
// sums, P·V with P normalised last; P rounded to `p_type` first when given.
std::vector<double> plain(const Problem& pb, const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, DType p_type = DType::f32) {
  std::vector<double> o(static_cast<std::size_t>(pb.b * pb.h * pb.n_q * pb.dv));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(pb.d)));
  const std::int64_t group = pb.h / pb.h_kv;
  std::vector<float> s(static_cast<std::size_t>(pb.n_kv)), acc(static_cast<std::size_t>(pb.dv));
  for (std::int64_t b = 0; b < pb.b; ++b)
    for (std::int64_t h = 0; h < pb.h; ++h)
      for (std::int64_t i = 0; i < pb.n_q; ++i) {
        const std::int64_t hk = h / group;
        const float* qr = &q[((b * pb.h + h) * pb.n_q + i) * pb.d];
        float m = -INFINITY;
        const std::int64_t last = pb.causal ? i + pb.n_kv - pb.n_q : pb.n_kv - 1;
        for (std::int64_t j = 0; j < pb.n_kv; ++j) {
          if (j > last) {
            s[j] = -INFINITY;
            continue;
          }
          const float* kr = &k[((b * pb.h_kv + hk) * pb.n_kv + j) * pb.d];
          float dot = 0;
          for (std::int64_t c = 0; c < pb.d; ++c) dot += qr[c] * kr[c];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double* out = &o[((b * pb.h + h) * pb.n_q + i) * pb.dv];
        if (m == -INFINITY) continue;  // no visible key: O = 0
        float l = 0;
        for (std::int64_t j = 0; j < pb.n_kv; ++j) l += (s[j] = std::exp(s[j] - m));
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::int64_t j = 0; j < pb.n_kv; ++j) {
          const float pj = round_to(s[j], p_type);
          const float* vr = &v[((b * pb.h_kv + hk) * pb.n_kv + j) * pb.dv];
          for (std::int64_t c = 0; c < pb.dv; ++c) acc[c] += pj * vr[c];
        }
        for (std::int64_t c = 0; c < pb.dv; ++c) out[c] = round_to(acc[c] / l, pb.od);
      }
  return o;
}

struct Results {
  std::vector<double> fast, oracle, plain;
};

Results run(const Problem& pb, Isa isa, int threads = 2) {
  const auto q = randn(static_cast<std::size_t>(pb.b * pb.h * pb.n_q * pb.d), pb.seed);
  const auto k = randn(static_cast<std::size_t>(pb.b * pb.h_kv * pb.n_kv * pb.d), pb.seed + 1);
  const auto v = randn(static_cast<std::size_t>(pb.b * pb.h_kv * pb.n_kv * pb.dv), pb.seed + 2);
  Stored qs = store(q, pb.qd), ks = store(k, pb.kd), vs = store(v, pb.vd);
  Out o(pb.od, static_cast<std::size_t>(pb.b * pb.h * pb.n_q * pb.dv));
  Options opt;
  opt.causal = pb.causal;
  opt.isa = isa;
  opt.threads = threads;
  opt.round_p = pb.round_p;
  attention(TensorView::contiguous(qs.data(), pb.qd, {pb.b, pb.h, pb.n_q, pb.d}),
            TensorView::contiguous(ks.data(), pb.kd, {pb.b, pb.h_kv, pb.n_kv, pb.d}),
            TensorView::contiguous(vs.data(), pb.vd, {pb.b, pb.h_kv, pb.n_kv, pb.dv}),
            TensorView::contiguous(o.data(), pb.od, {pb.b, pb.h, pb.n_q, pb.dv}), opt);
  Results r;
  r.fast = o.read();
  // The oracle on the same rounded values, in float64.
  std::vector<double> q64(qs.values.begin(), qs.values.end()), k64(ks.values.begin(), ks.values.end()),
      v64(vs.values.begin(), vs.values.end()), o64(r.fast.size());
  Options ref;
  ref.causal = pb.causal;
  reference_attention(TensorView::contiguous(q64.data(), {pb.b, pb.h, pb.n_q, pb.d}),
                      TensorView::contiguous(k64.data(), {pb.b, pb.h_kv, pb.n_kv, pb.d}),
                      TensorView::contiguous(v64.data(), {pb.b, pb.h_kv, pb.n_kv, pb.dv}),
                      TensorView::contiguous(o64.data(), {pb.b, pb.h, pb.n_q, pb.dv}), ref);
  r.oracle = o64;
  r.plain = plain(pb, qs.values, ks.values, vs.values, pb.round_p ? pb.vd : DType::f32);
  return r;
}

void expect_policy(const Problem& pb, Isa isa, int threads = 2) {
  const Results r = run(pb, isa, threads);
  for (double x : r.fast) ASSERT_TRUE(std::isfinite(x)) << pb.describe();
  const double err = max_err(r.fast, r.oracle), plain_err = max_err(r.plain, r.oracle);
  const double floor = 16 * 0x1p-24 * max_abs(r.oracle);
  EXPECT_LE(err, 2 * plain_err + floor) << isa_name(isa) << ", " << pb.describe() << ": fast " << err
                                        << ", plain float32 " << plain_err << ", floor " << floor;
}

class PerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam()) << "; its kernels are not tested here";
  }
};

INSTANTIATE_TEST_SUITE_P(Isas, PerIsa, ::testing::ValuesIn(compiled_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

constexpr DType kF32 = DType::f32, kF16 = DType::f16, kBF16 = DType::bf16;

// Every storage combination a caller is likely to use, over random shapes
// (sizes off every tile), causal or not, MHA and GQA.
TEST_P(PerIsa, sixteen_bit_storage_meets_the_policy_over_random_shapes) {
  const DType combos[][4] = {{kF16, kF16, kF16, kF16},   {kBF16, kBF16, kBF16, kBF16}, {kF32, kBF16, kBF16, kF32},
                             {kF32, kF16, kF16, kF32},   {kBF16, kBF16, kBF16, kF32},  {kF16, kBF16, kF16, kBF16},
                             {kBF16, kF32, kF32, kBF16}, {kF16, kF16, kBF16, kF32}};
  std::mt19937_64 g(7);
  auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(g); };
  const std::int64_t heads[] = {1, 3, 16, 64, 80, 128};
  int n = 0;
  for (const auto& c : combos)
    for (int rep = 0; rep < 5; ++rep) {
      Problem pb;
      pb.qd = c[0];
      pb.kd = c[1];
      pb.vd = c[2];
      pb.od = c[3];
      pb.h_kv = pick(1, 2);
      pb.h = pb.h_kv * pick(1, 3);
      pb.b = pick(1, 2);
      pb.n_q = pick(1, 70);
      pb.n_kv = pick(1, 300);
      pb.d = heads[pick(0, 5)];
      pb.dv = rep % 2 ? pb.d : heads[pick(0, 5)];
      pb.causal = rep % 3 == 0;
      pb.seed = static_cast<std::uint64_t>(++n);
      expect_policy(pb, GetParam());
    }
}

// Blocks of more than a few rows (packed, transposed K tiles) and decode
// blocks (scores straight from K rows, split-KV with its merge).
TEST_P(PerIsa, sixteen_bit_prefill_and_split_kv_decode) {
  for (DType t : {kF16, kBF16}) {
    Problem prefill;
    prefill.h = prefill.h_kv = 2;
    prefill.n_q = 300;
    prefill.n_kv = 333;
    prefill.d = prefill.dv = 128;
    prefill.qd = prefill.kd = prefill.vd = prefill.od = t;
    prefill.causal = true;
    expect_policy(prefill, GetParam());
    Problem decode;
    decode.h = 8;
    decode.h_kv = 2;
    decode.n_q = 1;
    decode.n_kv = 3001;
    decode.d = decode.dv = 64;
    decode.kd = decode.vd = t;
    expect_policy(decode, GetParam());
  }
}

// round_p: its own bound, against a plain implementation that rounds P the
// same way; and it does round (the result differs from the float32-P one).
TEST_P(PerIsa, round_p_meets_its_bound_and_rounds) {
  for (DType t : {kF16, kBF16}) {
    Problem pb;
    pb.h = pb.h_kv = 2;
    pb.n_q = 200;
    pb.n_kv = 257;
    pb.d = pb.dv = 64;
    pb.qd = pb.kd = pb.vd = t;
    pb.round_p = true;
    expect_policy(pb, GetParam());
    const Results rounded = run(pb, GetParam());
    pb.round_p = false;
    const Results exact = run(pb, GetParam());
    EXPECT_GT(max_err(rounded.fast, exact.fast), 0.0) << "round_p changed nothing with " << dtype_name(t);
  }
}

TEST_P(PerIsa, sixteen_bit_results_are_identical_for_every_thread_count) {
  Problem pb;
  pb.h = 4;
  pb.h_kv = 2;
  pb.n_q = 1;
  pb.n_kv = 4000;
  pb.d = pb.dv = 64;
  pb.kd = pb.vd = pb.od = kBF16;
  const Results one = run(pb, GetParam(), 1), two = run(pb, GetParam(), 2);
  EXPECT_EQ(one.fast, two.fast);
}

// ---- Serving storages with 16-bit caches ----

// A KV cache in bfloat16 appended from float32 k_new/v_new: the new rows are
// rounded into the cache, and attention over it matches the oracle on the
// cache's values.
TEST_P(PerIsa, sixteen_bit_kv_cache_append_rounds_and_attends) {
  const std::int64_t b = 2, h = 4, h_kv = 2, cap = 50, d = 32, n_new = 3;
  for (DType t : {kF16, kBF16}) {
    const auto k0 = randn(static_cast<std::size_t>(b * h_kv * cap * d), 11), v0 = randn(k0.size(), 12);
    Stored kc = store(k0, t), vc = store(v0, t);
    const auto kn = randn(static_cast<std::size_t>(b * h_kv * n_new * d), 13), vn = randn(kn.size(), 14);
    const auto q = randn(static_cast<std::size_t>(b * h * 1 * d), 15);
    std::vector<std::int32_t> lens = {20, 41};
    std::vector<float> o(static_cast<std::size_t>(b * h * d), NAN);
    Options opt;
    opt.isa = GetParam();
    attention_kvcache(TensorView::contiguous(q.data(), {b, h, 1, d}), TensorView::contiguous(kc.data(), t, {b, h_kv, cap, d}),
                      TensorView::contiguous(vc.data(), t, {b, h_kv, cap, d}),
                      TensorView::contiguous(lens.data(), DType::i32, {b}),
                      TensorView::contiguous(kn.data(), {b, h_kv, n_new, d}),
                      TensorView::contiguous(vn.data(), {b, h_kv, n_new, d}), TensorView::contiguous(o.data(), {b, h, 1, d}),
                      opt);
    // The cache holds the rounded new rows.
    std::vector<double> k64(kc.bits.size()), v64(vc.bits.size());
    for (std::size_t e = 0; e < k64.size(); ++e) {
      k64[e] = t == kF16 ? half_to_float(kc.bits[e]) : bf16_to_float(kc.bits[e]);
      v64[e] = t == kF16 ? half_to_float(vc.bits[e]) : bf16_to_float(vc.bits[e]);
    }
    for (std::int64_t bb = 0; bb < b; ++bb)
      for (std::int64_t hk = 0; hk < h_kv; ++hk)
        for (std::int64_t j = 0; j < n_new; ++j)
          for (std::int64_t c = 0; c < d; ++c) {
            const std::size_t at = static_cast<std::size_t>(((bb * h_kv + hk) * cap + lens[bb] + j) * d + c);
            ASSERT_EQ(k64[at], round_to(kn[((bb * h_kv + hk) * n_new + j) * d + c], t));
          }
    std::vector<double> q64(q.begin(), q.end()), o64(o.size());
    std::vector<std::int32_t> after = {lens[0] + 3, lens[1] + 3};
    attention_kvcache(TensorView::contiguous(q64.data(), {b, h, 1, d}), TensorView::contiguous(k64.data(), {b, h_kv, cap, d}),
                      TensorView::contiguous(v64.data(), {b, h_kv, cap, d}),
                      TensorView::contiguous(after.data(), DType::i32, {b}), {}, {},
                      TensorView::contiguous(o64.data(), {b, h, 1, d}), {}, true);
    std::vector<double> of(o.begin(), o.end());
    EXPECT_LE(max_err(of, o64), 1e-5) << dtype_name(t);
  }
}

// Paged float16 K/V and packed bfloat16 sequences against the oracle.
TEST_P(PerIsa, sixteen_bit_paged_and_packed) {
  const std::int64_t h = 2, h_kv = 1, d = 24, page = 5, pages = 12;
  {
    const std::int64_t b = 2;
    const auto kp = randn(static_cast<std::size_t>(pages * page * h_kv * d), 21), vp = randn(kp.size(), 22);
    Stored ks = store(kp, kF16), vs = store(vp, kF16);
    const auto q = randn(static_cast<std::size_t>(b * h * 2 * d), 23);
    std::vector<std::int64_t> table = {3, 7, 1, 0, 11, 5, 2, 9, 4, 6, 8, 10};  // [2, 6]
    std::vector<std::int64_t> lens = {17, 29};
    std::vector<float> o(static_cast<std::size_t>(b * h * 2 * d));
    Options opt;
    opt.isa = GetParam();
    opt.causal = true;
    auto call = [&](const TensorView& kv, const TensorView& vv, const TensorView& qv, const TensorView& ov, bool ref) {
      attention_paged(qv, kv, vv, TensorView::contiguous(table.data(), DType::i64, {b, 6}),
                      TensorView::contiguous(lens.data(), DType::i64, {b}), {}, {}, ov, opt, ref);
    };
    call(TensorView::contiguous(ks.data(), kF16, {pages, page, h_kv, d}), TensorView::contiguous(vs.data(), kF16, {pages, page, h_kv, d}),
         TensorView::contiguous(q.data(), {b, h, 2, d}), TensorView::contiguous(o.data(), {b, h, 2, d}), false);
    std::vector<double> k64(ks.values.begin(), ks.values.end()), v64(vs.values.begin(), vs.values.end()),
        q64(q.begin(), q.end()), o64(o.size());
    opt.isa = Isa::automatic;
    call(TensorView::contiguous(k64.data(), {pages, page, h_kv, d}), TensorView::contiguous(v64.data(), {pages, page, h_kv, d}),
         TensorView::contiguous(q64.data(), {b, h, 2, d}), TensorView::contiguous(o64.data(), {b, h, 2, d}), true);
    EXPECT_LE(max_err(std::vector<double>(o.begin(), o.end()), o64), 1e-5);
  }
  {
    std::vector<std::int32_t> cu_q = {0, 5, 5, 36}, cu_k = {0, 9, 30, 100};
    const std::int64_t tq = 36, tk = 100;
    Stored qs = store(randn(static_cast<std::size_t>(tq * h * d), 31), kBF16),
           ks = store(randn(static_cast<std::size_t>(tk * h_kv * d), 32), kBF16),
           vs = store(randn(static_cast<std::size_t>(tk * h_kv * d), 33), kBF16);
    Out o(kBF16, static_cast<std::size_t>(tq * h * d));
    Options opt;
    opt.isa = GetParam();
    opt.causal = true;
    attention_varlen(TensorView::contiguous(qs.data(), kBF16, {tq, h, d}), TensorView::contiguous(ks.data(), kBF16, {tk, h_kv, d}),
                     TensorView::contiguous(vs.data(), kBF16, {tk, h_kv, d}), TensorView::contiguous(o.data(), kBF16, {tq, h, d}),
                     TensorView::contiguous(cu_q.data(), DType::i32, {4}), TensorView::contiguous(cu_k.data(), DType::i32, {4}), opt);
    std::vector<double> q64(qs.values.begin(), qs.values.end()), k64(ks.values.begin(), ks.values.end()),
        v64(vs.values.begin(), vs.values.end()), o64(o.h.size());
    Options ref;
    ref.causal = true;
    attention_varlen(TensorView::contiguous(q64.data(), {tq, h, d}), TensorView::contiguous(k64.data(), {tk, h_kv, d}),
                     TensorView::contiguous(v64.data(), {tk, h_kv, d}), TensorView::contiguous(o64.data(), {tq, h, d}),
                     TensorView::contiguous(cu_q.data(), DType::i32, {4}), TensorView::contiguous(cu_k.data(), DType::i32, {4}),
                     ref, -1, -1, true);
    // O in bfloat16: within one rounding (2^-8 relative) of the oracle.
    const std::vector<double> of = o.read();
    for (std::size_t e = 0; e < of.size(); ++e)
      ASSERT_LE(std::abs(of[e] - o64[e]), 0x1p-8 * std::abs(o64[e]) + 1e-6) << e;
  }
}

// ---- int8 ----

TEST(Quantize, groups_scales_and_rounding) {
  // Group 1: max 127 -> scale 1, values exact; group 2: all zero; group 3:
  // max 2.54 -> scale 0.02, 1.01 -> round(50.5) = 50 (half to even).
  std::vector<float> x = {127, -3, 2, 0.5f, 0, 0, 0, 0, 2.54f, 1.01f, -2.54f, 0};
  std::vector<std::int8_t> q(12);
  std::vector<float> s(3);
  quantize_int8(TensorView::contiguous(x.data(), {12}), TensorView::contiguous(q.data(), DType::i8, {12}),
                TensorView::contiguous(s.data(), {3}));
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -3);
  EXPECT_EQ(q[3], 0);  // 0.5 rounds to even
  EXPECT_EQ(s[1], 0.0f);
  for (int c = 4; c < 8; ++c) EXPECT_EQ(q[c], 0);
  EXPECT_FLOAT_EQ(s[2], 2.54f / 127);
  EXPECT_EQ(q[8], 127);
  EXPECT_EQ(q[10], -127);
  EXPECT_EQ(q[9], static_cast<std::int8_t>(std::nearbyint(1.01 / static_cast<double>(s[2]))));
  // A NaN or inf in a group makes its scale NaN.
  std::vector<float> bad = {1, NAN, 2, 3, INFINITY, 1, 1, 1};
  std::vector<std::int8_t> qb(8);
  std::vector<std::uint16_t> sb(2);
  quantize_int8(TensorView::contiguous(bad.data(), {2, 4}), TensorView::contiguous(qb.data(), DType::i8, {2, 4}),
                TensorView::contiguous(sb.data(), DType::f16, {2, 1}));
  EXPECT_TRUE(std::isnan(half_to_float(sb[0])));
  EXPECT_TRUE(std::isnan(half_to_float(sb[1])));
}

TEST(Quantize, round_trip_error_is_at_most_half_a_step) {
  const auto x = randn(64 * 128, 5, 3.0f);
  std::vector<std::int8_t> q(x.size());
  for (DType sd : {kF32, kF16}) {
    std::vector<float> s32(64 * 4);
    std::vector<std::uint16_t> s16(64 * 4);
    void* s = sd == kF32 ? static_cast<void*>(s32.data()) : static_cast<void*>(s16.data());
    quantize_int8(TensorView::contiguous(x.data(), {64, 128}), TensorView::contiguous(q.data(), DType::i8, {64, 128}),
                  TensorView::contiguous(s, sd, {64, 4}));
    for (std::size_t e = 0; e < x.size(); ++e) {
      const std::size_t g = e / 32;
      const double scale = sd == kF32 ? s32[g] : half_to_float(s16[g]);
      // Half a step, plus what rounding the scale to its dtype moves the largest value.
      const double slack = sd == kF32 ? 1e-6 : 127 * scale * 0x1p-11;
      ASSERT_LE(std::abs(q[e] * scale - x[e]), scale / 2 + slack) << e;
    }
  }
}

TEST(Quantize, errors_name_the_argument) {
  std::vector<float> x(8);
  std::vector<std::int8_t> q(8);
  std::vector<float> s(3);
  auto msg = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([&] {
              quantize_int8(TensorView::contiguous(x.data(), {8}), TensorView::contiguous(q.data(), DType::i8, {8}),
                            TensorView::contiguous(s.data(), {3}));
            }).find("scales"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              quantize_int8(TensorView::contiguous(x.data(), {8}), TensorView::contiguous(x.data(), {8}),
                            TensorView::contiguous(s.data(), {2}));
            }).find("values: expected int8"),
            std::string::npos);
}

// An int8 cache, appended (quantised) by the library, in the dense cache and
// paged layouts, with float32 and float16 scales, for prefill blocks and
// split-KV decode.
TEST_P(PerIsa, int8_cache_meets_the_policy_and_its_quantisation_bound) {
  const std::int64_t b = 2, h = 8, h_kv = 2, cap = 2600, d = 64, group = 32;
  for (DType sd : {kF32, kF16})
    for (std::int64_t n_q : {1, 19}) {
      const auto k_new = randn(static_cast<std::size_t>(b * h_kv * cap * d), 41),
                 v_new = randn(k_new.size(), 42);
      const auto q = randn(static_cast<std::size_t>(b * h * n_q * d), 43);
      std::vector<std::int8_t> kq(k_new.size()), vq(v_new.size());
      const std::size_t ns = k_new.size() / group;
      std::vector<float> ks32(ns), vs32(ns);
      std::vector<std::uint16_t> ks16(ns), vs16(ns);
      void* ksp = sd == kF32 ? static_cast<void*>(ks32.data()) : static_cast<void*>(ks16.data());
      void* vsp = sd == kF32 ? static_cast<void*>(vs32.data()) : static_cast<void*>(vs16.data());
      std::vector<std::int32_t> zero = {0, 0};
      Options opt;
      opt.isa = GetParam();
      opt.k_scales = TensorView::contiguous(ksp, sd, {b, h_kv, cap, d / group});
      opt.v_scales = TensorView::contiguous(vsp, sd, {b, h_kv, cap, d / group});
      std::vector<float> o(static_cast<std::size_t>(b * h * n_q * d), NAN);
      // Fill the whole cache through the library's append, then attend.
      attention_kvcache(TensorView::contiguous(q.data(), {b, h, n_q, d}),
                        TensorView::contiguous(kq.data(), DType::i8, {b, h_kv, cap, d}),
                        TensorView::contiguous(vq.data(), DType::i8, {b, h_kv, cap, d}),
                        TensorView::contiguous(zero.data(), DType::i32, {b}),
                        TensorView::contiguous(k_new.data(), {b, h_kv, cap, d}),
                        TensorView::contiguous(v_new.data(), {b, h_kv, cap, d}),
                        TensorView::contiguous(o.data(), {b, h, n_q, d}), opt);
      auto scale_at = [&](bool key, std::size_t g) {
        return sd == kF32 ? (key ? ks32 : vs32)[g] : half_to_float((key ? ks16 : vs16)[g]);
      };
      std::vector<float> kdq(kq.size()), vdq(vq.size());
      for (std::size_t e = 0; e < kq.size(); ++e) {
        kdq[e] = static_cast<float>(kq[e]) * scale_at(true, e / group);
        vdq[e] = static_cast<float>(vq[e]) * scale_at(false, e / group);
      }
      // The policy, on the dequantised values.
      Problem pb;
      pb.b = b;
      pb.h = h;
      pb.h_kv = h_kv;
      pb.n_q = n_q;
      pb.n_kv = cap;
      pb.d = pb.dv = d;
      std::vector<double> q64(q.begin(), q.end()), k64(kdq.begin(), kdq.end()), v64(vdq.begin(), vdq.end()),
          o64(o.size());
      reference_attention(TensorView::contiguous(q64.data(), {b, h, n_q, d}), TensorView::contiguous(k64.data(), {b, h_kv, cap, d}),
                          TensorView::contiguous(v64.data(), {b, h_kv, cap, d}), TensorView::contiguous(o64.data(), {b, h, n_q, d}));
      const std::vector<double> of(o.begin(), o.end()), op = plain(pb, q, kdq, vdq);
      const double err = max_err(of, o64), plain_err = max_err(op, o64);
      EXPECT_LE(err, 2 * plain_err + 16 * 0x1p-24 * max_abs(o64)) << dtype_name(sd) << " n_q=" << n_q;
      // Against attention on the original values: a first-order bound from
      // the quantisation's changes to V and to the scores.
      std::vector<double> kn64(k_new.begin(), k_new.end()), vn64(v_new.begin(), v_new.end()), exact(o.size());
      reference_attention(TensorView::contiguous(q64.data(), {b, h, n_q, d}), TensorView::contiguous(kn64.data(), {b, h_kv, cap, d}),
                          TensorView::contiguous(vn64.data(), {b, h_kv, cap, d}), TensorView::contiguous(exact.data(), {b, h, n_q, d}));
      double dv_max = 0, v_lo = 0, v_hi = 0, ds_max = 0;
      for (std::size_t e = 0; e < kq.size(); ++e) {
        dv_max = std::max(dv_max, std::abs(static_cast<double>(vdq[e]) - v_new[e]));
        v_lo = std::min(v_lo, static_cast<double>(v_new[e]));
        v_hi = std::max(v_hi, static_cast<double>(v_new[e]));
      }
      // The largest change of a score, from the data.
      for (std::int64_t bb = 0; bb < b; ++bb)
        for (std::int64_t hh = 0; hh < h; ++hh)
          for (std::int64_t i = 0; i < n_q; ++i)
            for (std::int64_t j = 0; j < cap; ++j) {
              const std::int64_t hk = hh / (h / h_kv);
              double dot = 0;
              for (std::int64_t c = 0; c < d; ++c) {
                const std::size_t kat = static_cast<std::size_t>(((bb * h_kv + hk) * cap + j) * d + c);
                dot += q[((bb * h + hh) * n_q + i) * d + c] * (static_cast<double>(kdq[kat]) - k_new[kat]);
              }
              ds_max = std::max(ds_max, std::abs(dot) / std::sqrt(static_cast<double>(d)));
            }
      // First order: |dO| <= max|dV| + max|dS|·(max V - min V) (the
      // probabilities' change sums to zero), with a quarter for the rest.
      const double bound = 1.25 * (dv_max + ds_max * (v_hi - v_lo));
      const double qerr = max_err(of, exact);
      EXPECT_LE(qerr, bound) << dtype_name(sd) << " n_q=" << n_q;
      RecordProperty("int8_error_" + std::string(dtype_name(sd)) + "_nq" + std::to_string(n_q), std::to_string(qerr));
      std::cout << "int8 cache (" << dtype_name(sd) << " scales, Nq=" << n_q << "): max |O - O_f32| = " << qerr
                << " (bound " << bound << ", max |O| " << max_abs(exact) << ")\n";
    }
}

// Groups of whole vectors (64) take the decode kernels that dequantise in
// registers; groups of 8 (not a whole AVX-512 vector) are converted first.
TEST_P(PerIsa, int8_paged_cache_matches_the_oracle) {
  for (const std::int64_t group : {64, 8}) {
  const std::int64_t b = 2, h = 4, h_kv = 2, d = 64, page = 16, pages = 40, ng = d / group;
  const auto kx = randn(static_cast<std::size_t>(pages * page * h_kv * d), 51), vx = randn(kx.size(), 52);
  std::vector<std::int8_t> kq(kx.size()), vq(vx.size());
  std::vector<float> ks(kx.size() / group), vs(vx.size() / group);
  quantize_int8(TensorView::contiguous(kx.data(), {pages, page, h_kv, d}), TensorView::contiguous(kq.data(), DType::i8, {pages, page, h_kv, d}),
                TensorView::contiguous(ks.data(), {pages, page, h_kv, ng}));
  quantize_int8(TensorView::contiguous(vx.data(), {pages, page, h_kv, d}), TensorView::contiguous(vq.data(), DType::i8, {pages, page, h_kv, d}),
                TensorView::contiguous(vs.data(), {pages, page, h_kv, ng}));
  std::vector<std::int32_t> table(b * 20);
  for (std::size_t e = 0; e < table.size(); ++e) table[e] = static_cast<std::int32_t>((e * 7) % pages);
  std::vector<std::int32_t> lens = {300, 77};
  const auto q = randn(static_cast<std::size_t>(b * h * d), 53);
  std::vector<float> o(q.size()), o_ref(q.size());
  Options opt;
  opt.isa = GetParam();
  opt.k_scales = TensorView::contiguous(ks.data(), {pages, page, h_kv, ng});
  opt.v_scales = TensorView::contiguous(vs.data(), {pages, page, h_kv, ng});
  for (bool ref : {false, true}) {
    attention_paged(TensorView::contiguous(q.data(), {b, h, 1, d}), TensorView::contiguous(kq.data(), DType::i8, {pages, page, h_kv, d}),
                    TensorView::contiguous(vq.data(), DType::i8, {pages, page, h_kv, d}),
                    TensorView::contiguous(table.data(), DType::i32, {b, 20}), TensorView::contiguous(lens.data(), DType::i32, {b}),
                    {}, {}, TensorView::contiguous((ref ? o_ref : o).data(), {b, h, 1, d}), opt, ref);
  }
  EXPECT_LE(max_err(std::vector<double>(o.begin(), o.end()), std::vector<double>(o_ref.begin(), o_ref.end())), 2e-6)
      << "group " << group;
  }
}

// Decode over a paged cache in float32, float16, bfloat16 and int8 (the
// all-heads kernels: each key's rows for every head read together; float32 V
// rows of a partial vector take runs of keys) against the same keys in a
// contiguous cache (the per-head kernels): bit for bit, for MHA and GQA, d
// with and without a partial vector, lengths that end mid-page and mid-tile,
// shuffled pages. Float32 MHA at d = 64, 128, 80 and 256: contiguous, its
// one-row scores kernel with d fixed, at run time, in one chunk and in
// several.
TEST_P(PerIsa, stored_paged_decode_equals_contiguous_bit_for_bit) {
  const std::int64_t b = 3, cap = 600;
  const std::vector<std::int32_t> lens = {600, 37, 1};
  struct Case {
    DType t;
    std::int64_t h, h_kv, d, page;
  };
  for (const Case c : {Case{kF16, 8, 8, 72, 16}, Case{kBF16, 8, 2, 72, 5}, Case{kF16, 6, 3, 128, 7},
                       Case{DType::i8, 4, 4, 64, 16}, Case{DType::i8, 8, 2, 64, 3}, Case{kF32, 4, 4, 64, 16},
                       Case{kF32, 8, 2, 72, 5}, Case{kF32, 6, 3, 128, 3}, Case{kF32, 4, 4, 128, 7},
                       Case{kF32, 3, 3, 80, 4}, Case{kF32, 2, 2, 256, 5}, Case{kF32, 32, 2, 64, 16},
                       Case{kF16, 24, 2, 72, 5}}) {  // the last two: 16 and 12 rows per K/V head
    const std::int64_t d = c.d, hk = c.h_kv, group = 32, ng = d / group;
    const std::int64_t max_pages = (cap + c.page - 1) / c.page, pages = b * max_pages + 3;
    const bool i8 = c.t == DType::i8;
    const std::int64_t es = static_cast<std::int64_t>(dtype_size(c.t));
    // The cache in pages [pages, page, Hkv, d] (and scales [.., ng]), then the
    // same rows copied into a contiguous cache [B, Hkv, cap, d].
    std::vector<std::uint8_t> kp(pages * c.page * hk * d * es), vp(kp.size());
    std::vector<std::uint16_t> ksp(pages * c.page * hk * ng), vsp(ksp.size());
    auto fill = [&](std::vector<std::uint8_t>& dst, std::vector<std::uint16_t>& scales, std::uint64_t seed) {
      const std::vector<float> x = randn(static_cast<std::size_t>(pages * c.page * hk * d), seed);
      if (i8) {
        quantize_int8(TensorView::contiguous(x.data(), {pages, c.page, hk, d}),
                      TensorView::contiguous(dst.data(), DType::i8, {pages, c.page, hk, d}),
                      TensorView::contiguous(scales.data(), kF16, {pages, c.page, hk, ng}));
      } else {
        Stored st = store(x, c.t);
        std::memcpy(dst.data(), st.data(), dst.size());
      }
    };
    fill(kp, ksp, 71);
    fill(vp, vsp, 72);
    std::vector<std::int32_t> order(pages), table(b * max_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(c.page)));
    for (std::int64_t i = 0; i < b * max_pages; ++i) table[i] = order[i];
    std::vector<std::uint8_t> kc(b * hk * cap * d * es), vc(kc.size());
    std::vector<std::uint16_t> ksc(b * hk * cap * ng), vsc(ksc.size());
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t j = 0; j < lens[i]; ++j)
        for (std::int64_t x = 0; x < hk; ++x) {
          const std::int64_t src = (table[i * max_pages + j / c.page] * c.page + j % c.page) * hk + x;
          const std::int64_t dst = (i * hk + x) * cap + j;
          std::memcpy(kc.data() + dst * d * es, kp.data() + src * d * es, d * es);
          std::memcpy(vc.data() + dst * d * es, vp.data() + src * d * es, d * es);
          std::copy_n(ksp.data() + src * ng, ng, ksc.data() + dst * ng);
          std::copy_n(vsp.data() + src * ng, ng, vsc.data() + dst * ng);
        }
    const std::vector<float> q = randn(static_cast<std::size_t>(b * c.h * d), 73);
    std::vector<float> o1(q.size()), o2(q.size());
    const TensorView qv = TensorView::contiguous(q.data(), {b, c.h, 1, d});
    const TensorView lv = TensorView::contiguous(lens.data(), DType::i32, {b});
    for (int threads : {1, 2, 12}) {  // 12: the all-heads items share out the heads
      Options opt;
      opt.isa = GetParam();
      opt.threads = threads;
      if (i8) {
        opt.k_scales = TensorView::contiguous(ksc.data(), kF16, {b, hk, cap, ng});
        opt.v_scales = TensorView::contiguous(vsc.data(), kF16, {b, hk, cap, ng});
      }
      attention_kvcache(qv, TensorView::contiguous(kc.data(), c.t, {b, hk, cap, d}),
                        TensorView::contiguous(vc.data(), c.t, {b, hk, cap, d}), lv, {}, {},
                        TensorView::contiguous(o1.data(), {b, c.h, 1, d}), opt);
      if (i8) {
        opt.k_scales = TensorView::contiguous(ksp.data(), kF16, {pages, c.page, hk, ng});
        opt.v_scales = TensorView::contiguous(vsp.data(), kF16, {pages, c.page, hk, ng});
      }
      attention_paged(qv, TensorView::contiguous(kp.data(), c.t, {pages, c.page, hk, d}),
                      TensorView::contiguous(vp.data(), c.t, {pages, c.page, hk, d}),
                      TensorView::contiguous(table.data(), DType::i32, {b, max_pages}), lv, {}, {},
                      TensorView::contiguous(o2.data(), {b, c.h, 1, d}), opt);
      for (float x : o2) ASSERT_TRUE(std::isfinite(x));
      ASSERT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 4))
          << dtype_name(c.t) << " h " << c.h << " h_kv " << hk << " d " << d << " page " << c.page << " threads "
          << threads;
    }
  }
}

// ---- The backward from 16-bit storage ----

// Q, K, V, O, dO in 16 bits and 16-bit gradients: exactly the float32
// backward of the same values, each gradient rounded once to its dtype.

TEST_P(PerIsa, backward_reads_and_writes_sixteen_bit_storage) {
  const std::int64_t b = 1, h = 2, n = 45, d = 32;
  for (DType t : {kF16, kBF16}) {
    Stored q = store(randn(static_cast<std::size_t>(b * h * n * d), 61), t), k = store(randn(q.values.size(), 62), t),
           v = store(randn(q.values.size(), 63), t), go = store(randn(q.values.size(), 64), t);
    const auto view = [&](void* p, DType dt) { return TensorView::contiguous(p, dt, {b, h, n, d}); };
    Out o(t, q.values.size()), dq(t, q.values.size()), dk(t, q.values.size()), dv(t, q.values.size());
    std::vector<float> lse(static_cast<std::size_t>(b * h * n));
    Options opt;
    opt.isa = GetParam();
    opt.causal = true;
    opt.lse = TensorView::contiguous(lse.data(), {b, h, n});
    attention(view(q.data(), t), view(k.data(), t), view(v.data(), t), view(o.data(), t), opt);
    opt.lse = {};
    attention_backward(view(q.data(), t), view(k.data(), t), view(v.data(), t), view(o.data(), t),
                       TensorView::contiguous(lse.data(), {b, h, n}), view(go.data(), t),
                       Gradients{view(dq.data(), t), view(dk.data(), t), view(dv.data(), t), {}}, opt);
    std::vector<double> o64 = o.read();
    std::vector<float> qv(q.values), kv(k.values), vv(v.values), gv(go.values);
    // The same backward with float32 storage of the same values (and float32
    // gradients): the 16-bit call must give its results rounded once.
    std::vector<float> of(o64.begin(), o64.end()), fq(o64.size()), fk(o64.size()), fv(o64.size());
    const auto f32v = [&](float* x) { return TensorView::contiguous(x, {b, h, n, d}); };
    attention_backward(f32v(qv.data()), f32v(kv.data()), f32v(vv.data()), f32v(of.data()),
                       TensorView::contiguous(lse.data(), {b, h, n}), f32v(gv.data()),
                       Gradients{f32v(fq.data()), f32v(fk.data()), f32v(fv.data()), {}}, opt);
    const std::vector<float>* f32_grads[] = {&fq, &fk, &fv};
    const std::vector<double> got[] = {dq.read(), dk.read(), dv.read()};
    const char* names[] = {"dq", "dk", "dv"};
    // (The float32 backward itself is held to the oracle by backward_test.)
    for (int g = 0; g < 3; ++g)
      for (std::size_t e = 0; e < got[g].size(); ++e)
        ASSERT_EQ(got[g][e], round_to((*f32_grads[g])[e], t)) << names[g] << " " << dtype_name(t) << " " << e;
  }
}

// ---- Errors ----

TEST(StorageErrors, name_the_argument_and_what_was_expected) {
  std::vector<float> f(64);
  std::vector<std::int8_t> i8(64);
  std::vector<double> f64(64);
  auto msg = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto v4 = [](void* p, DType t, std::int64_t x = 4) { return TensorView::contiguous(p, t, {1, 1, 4, x}); };
  // float64 on the fast path.
  EXPECT_EQ(msg([&] { attention(v4(f64.data(), DType::f64), v4(f.data(), kF32), v4(f.data(), kF32), v4(f.data(), kF32)); }),
            "q: expected float32, float16 or bfloat16, got float64");
  // int8 K without scales, scales without int8, scales of the wrong shape.
  EXPECT_EQ(msg([&] { attention(v4(f.data(), kF32), v4(i8.data(), DType::i8), v4(f.data(), kF32), v4(f.data() + 16, kF32)); }),
            "k_scales: expected scales for the int8 k, got an unset view");
  Options opt;
  opt.v_scales = TensorView::contiguous(f.data(), {1, 1, 4, 1});
  EXPECT_EQ(msg([&] { attention(v4(f.data(), kF32), v4(f.data(), kF32), v4(f.data(), kF32), v4(f.data() + 16, kF32), opt); }),
            "v_scales: expected unset unless v is int8, got a view");
  Options bad;
  bad.k_scales = TensorView::contiguous(f.data() + 32, {1, 1, 4, 3});
  EXPECT_NE(msg([&] { attention(v4(f.data(), kF32), v4(i8.data(), DType::i8), v4(f.data(), kF32), v4(f.data() + 16, kF32), bad); })
                .find("k_scales: expected the shape of k [1, 1, 4, 4] with a last axis dividing 4"),
            std::string::npos);
  // int8 for the backward.
  std::vector<float> lse(4);
  Options ok;
  ok.k_scales = TensorView::contiguous(f.data() + 48, {1, 1, 4, 1});
  EXPECT_EQ(msg([&] {
              attention_backward(v4(f.data(), kF32), v4(i8.data(), DType::i8), v4(f.data(), kF32), v4(f.data(), kF32),
                                 TensorView::contiguous(lse.data(), {1, 1, 4}), v4(f.data(), kF32),
                                 Gradients{v4(f.data() + 16, kF32), v4(f.data() + 32, kF32), v4(f.data() + 48, kF32), {}}, ok);
            }),
            "k: expected float32, float16 or bfloat16 for the backward, got int8");
}

}  // namespace
}  // namespace sdpa
