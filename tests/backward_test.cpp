// The fast backward against the float64 oracle, held to FlashAttention's
// policy: for each of dQ, dK, dV (and dsinks), the fast path's worst error
// against the oracle must be at most twice the worst error of a plain float32
// implementation that materialises the scores (written here, loops in float
// with sequential sums), plus a rounding floor. Every feature, shapes off
// every tile size, every ISA this CPU runs; bitwise identical results for
// every thread count, with and without dropout.
//
// The plain implementation takes the visibility, the float mask and ALiBi as
// one additive bias per (b, h, i, j), read off the oracle's forward (its
// scores at the softcapped and masked stages), so that it differs from the
// oracle only by float32 arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/dropout.h"
#include "sdpa/serving.h"
#include "support/problem.h"

namespace sdpa {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Store { bhsd, bshd, packed };

// One backward problem: float32 data, its views, and the three answers
// (fast, oracle, plain float32).
struct Case {
  std::int64_t b = 2, h = 2, h_kv = 2, n_q = 17, n_kv = 23, d = 16, dv = 16;
  Store store = Store::bhsd;
  std::vector<std::int64_t> cu_q, cu_k;  // packed: prefix sums (b is their count)
  Options opt;                           // features; threads and isa are set per run
  bool sinks = false;
  std::uint64_t seed = 1;
  float v_scale = 1.0f;

  std::vector<float> q, k, v, go, sink, o, lse;

  std::int64_t rows_q() const { return store == Store::packed ? cu_q.back() : b * n_q; }
  std::int64_t rows_k() const { return store == Store::packed ? cu_k.back() : b * n_kv; }
  std::int64_t nq(std::int64_t bb) const { return store == Store::packed ? cu_q[bb + 1] - cu_q[bb] : n_q; }
  std::int64_t nkv(std::int64_t bb) const { return store == Store::packed ? cu_k[bb + 1] - cu_k[bb] : n_kv; }

  // Element offset of (b, head, n, 0) of a tensor with `heads` heads, N rows
  // per batch entry (cu for packed) and X columns.
  std::int64_t at(std::int64_t bb, std::int64_t hh, std::int64_t n, std::int64_t heads, std::int64_t rows,
                  const std::vector<std::int64_t>& cu, std::int64_t x) const {
    switch (store) {
      case Store::bhsd: return ((bb * heads + hh) * rows + n) * x;
      case Store::bshd: return ((bb * rows + n) * heads + hh) * x;
      default: return ((cu[bb] + n) * heads + hh) * x;
    }
  }
  std::int64_t qi(std::int64_t bb, std::int64_t hh, std::int64_t i, std::int64_t x) const {
    return at(bb, hh, i, h, n_q, cu_q, x);
  }
  std::int64_t ki(std::int64_t bb, std::int64_t hh, std::int64_t j, std::int64_t x) const {
    return at(bb, hh, j, h_kv, n_kv, cu_k, x);
  }

  // Views of a query-side tensor [B, H, Nq, x] and a key-side one [B, Hkv, Nkv, x].
  template <class T>
  TensorView qview(const T* p, std::int64_t x) const {
    return view(p, h, n_q, store == Store::packed ? rows_q() : 0, x);
  }
  template <class T>
  TensorView kview(const T* p, std::int64_t x) const {
    return view(p, h_kv, n_kv, store == Store::packed ? rows_k() : 0, x);
  }
  template <class T>
  TensorView view(const T* p, std::int64_t heads, std::int64_t rows, std::int64_t packed_rows, std::int64_t x) const {
    const DType t = sizeof(T) == 8 ? DType::f64 : DType::f32;
    switch (store) {
      case Store::bhsd: return TensorView::contiguous(p, t, {b, heads, rows, x});
      case Store::bshd: return TensorView::bshd(p, t, b, rows, heads, x);
      default: return TensorView::contiguous(p, t, {packed_rows, heads, x});
    }
  }
  template <class T>
  TensorView lse_view(const T* p) const {
    const DType t = sizeof(T) == 8 ? DType::f64 : DType::f32;
    return store == Store::packed ? TensorView::contiguous(p, t, {h, rows_q()})
                                  : TensorView::contiguous(p, t, {b, h, n_q});
  }
  std::int64_t lse_at(std::int64_t bb, std::int64_t hh, std::int64_t i) const {
    return store == Store::packed ? hh * rows_q() + cu_q[bb] + i : (bb * h + hh) * n_q + i;
  }

  void init() {
    if (store == Store::packed) {
      b = static_cast<std::int64_t>(cu_q.size()) - 1;
      n_q = n_kv = 0;
      for (std::int64_t s = 0; s < b; ++s) {
        n_q = std::max(n_q, cu_q[s + 1] - cu_q[s]);
        n_kv = std::max(n_kv, cu_k[s + 1] - cu_k[s]);
      }
    }
    q = test::randn(rows_q() * h * d, seed);
    k = test::randn(rows_k() * h_kv * d, seed + 1);
    v = test::randn(rows_k() * h_kv * dv, seed + 2);
    for (float& x : v) x *= v_scale;
    go = test::randn(rows_q() * h * dv, seed + 3);
    if (sinks) {
      sink = test::randn(h, seed + 4);
      opt.sinks = TensorView::contiguous(sink.data(), {h});
    }
    o.assign(go.size(), 0.0f);
    lse.assign(rows_q() * h, 0.0f);
  }

  struct Grads {
    std::vector<double> dq, dk, dv, ds;  // ds: dsinks
  };

  // The fast forward (O, lse) and the fast backward.
  Grads run_fast(Isa isa, int threads) {
    Options f = opt;
    f.isa = isa;
    f.threads = threads;
    f.lse = lse_view(lse.data());
    forward(f, q.data(), k.data(), v.data(), o.data());
    f.lse = {};
    std::vector<float> dq(q.size(), NAN), dk(k.size(), NAN), dvv(v.size(), NAN), ds(h, NAN);
    Gradients g{qview(dq.data(), d), kview(dk.data(), d), kview(dvv.data(), dv), {}};
    if (sinks) g.dsinks = TensorView::contiguous(ds.data(), {h});
    if (store == Store::packed)
      attention_varlen_backward(qview(q.data(), d), kview(k.data(), d),
                                kview(v.data(), dv), qview(o.data(), dv), lse_view(lse.data()),
                                qview(go.data(), dv), g, cu_view(cu_q), cu_view(cu_k), f);
    else
      attention_backward(qview(q.data(), d), kview(k.data(), d), kview(v.data(), dv),
                         qview(o.data(), dv), lse_view(lse.data()), qview(go.data(), dv), g, f);
    Grads r{{dq.begin(), dq.end()}, {dk.begin(), dk.end()}, {dvv.begin(), dvv.end()}, {}};
    if (sinks) r.ds.assign(ds.begin(), ds.end());
    return r;
  }

  // The oracle, on the same (float32) data in float64 views.
  Grads run_oracle() {
    const std::vector<double> q64(q.begin(), q.end()), k64(k.begin(), k.end()), v64(v.begin(), v.end()),
        go64(go.begin(), go.end());
    std::vector<double> o64(o.size()), l64(lse.size());
    Grads r{std::vector<double>(q.size()), std::vector<double>(k.size()), std::vector<double>(v.size()), {}};
    std::vector<float> ds(h);
    Gradients g{qview(r.dq.data(), d), kview(r.dk.data(), d), kview(r.dv.data(), dv),
                {}};
    if (sinks) g.dsinks = TensorView::contiguous(ds.data(), {h});
    if (store == Store::packed)
      attention_varlen_backward(qview(q64.data(), d), kview(k64.data(), d),
                                kview(v64.data(), dv), qview(o64.data(), dv), lse_view(l64.data()),
                                qview(go64.data(), dv), g, cu_view(cu_q), cu_view(cu_k), opt, -1, -1, true);
    else
      reference_attention_backward(qview(q64.data(), d), kview(k64.data(), d),
                                   kview(v64.data(), dv), qview(o64.data(), dv),
                                   lse_view(l64.data()), qview(go64.data(), dv), g, opt);
    if (sinks) r.ds.assign(ds.begin(), ds.end());
    return r;
  }

  // The bias of sequence bb (visibility, float mask, ALiBi) [h][nq][nkv] from
  // the oracle's forward: scores at the masked stage minus the softcapped
  // stage (-inf where a key is not visible).
  std::vector<double> bias(std::int64_t bb) const {
    const std::int64_t nqb = nq(bb), nkb = nkv(bb);
    std::vector<double> out(static_cast<std::size_t>(h * nqb * nkb), 0.0);
    if (nqb == 0 || nkb == 0) return out;
    // Sequence bb alone, as a dense call of batch 1 (per-batch options sliced).
    std::vector<double> q64, k64, v64;
    for (std::int64_t hh = 0; hh < h; ++hh)
      for (std::int64_t i = 0; i < nqb; ++i)
        for (std::int64_t c = 0; c < d; ++c) q64.push_back(q[qi(bb, hh, i, d) + c]);
    for (std::int64_t hh = 0; hh < h_kv; ++hh)
      for (std::int64_t j = 0; j < nkb; ++j) {
        for (std::int64_t c = 0; c < d; ++c) k64.push_back(k[ki(bb, hh, j, d) + c]);
        for (std::int64_t c = 0; c < dv; ++c) v64.push_back(v[ki(bb, hh, j, dv) + c]);
      }
    Options f = opt;
    f.dropout_p = 0;
    auto slice = [&](const TensorView& t) {  // a [B]- or [B, ...]-leading per-batch view, at entry bb
      if (!t.is_set() || t.rank == 0) return t;
      TensorView r = t;
      r.data = static_cast<char*>(t.data) + bb * t.stride[0] * static_cast<std::int64_t>(dtype_size(t.dtype));
      r.shape[0] = 1;
      return r;
    };
    f.position_offsets = slice(opt.position_offsets);
    f.key_lengths = slice(opt.key_lengths);
    if (opt.alibi_slopes.is_set() && opt.alibi_slopes.rank == 2) f.alibi_slopes = slice(opt.alibi_slopes);
    if (opt.mask.is_set() && opt.mask.rank == 4 && opt.mask.shape[0] == b) f.mask = slice(opt.mask);
    std::vector<double> o64(h * nqb * dv), capped(h * nqb * nkb), masked(h * nqb * nkb);
    const TensorView qv = TensorView::contiguous(q64.data(), {1, h, nqb, d});
    const TensorView kv = TensorView::contiguous(k64.data(), {1, h_kv, nkb, d});
    const TensorView vv = TensorView::contiguous(v64.data(), {1, h_kv, nkb, dv});
    const TensorView ov = TensorView::contiguous(o64.data(), {1, h, nqb, dv});
    f.scores_stage = ScoresStage::softcapped;
    f.scores = TensorView::contiguous(capped.data(), {1, h, nqb, nkb});
    reference_attention(qv, kv, vv, ov, f);
    f.scores_stage = ScoresStage::masked;
    f.scores = TensorView::contiguous(masked.data(), {1, h, nqb, nkb});
    reference_attention(qv, kv, vv, ov, f);
    for (std::size_t e = 0; e < out.size(); ++e) out[e] = masked[e] == -kInf ? -kInf : masked[e] - capped[e];
    return out;
  }

  // A plain float32 backward that materialises the scores of each row.
  Grads run_plain() {
    Grads r{std::vector<double>(q.size()), std::vector<double>(k.size()), std::vector<double>(v.size()),
            std::vector<double>(h)};
    std::vector<float> dq(q.size()), dk(k.size()), dvv(v.size()), ds(h);
    const float scale = static_cast<float>(opt.scale ? *opt.scale : 1.0 / std::sqrt(double(d)));
    const float cap = static_cast<float>(opt.softcap);
    const std::int64_t group = h / h_kv;
    for (std::int64_t bb = 0; bb < b; ++bb) {
      const std::vector<double> bs = bias(bb);
      const std::int64_t nqb = nq(bb), nkb = nkv(bb);
      std::vector<float> x(nkb), t(nkb), p(nkb), z(nkb), o_row(dv);
      for (std::int64_t hh = 0; hh < h; ++hh) {
        const std::int64_t hk = hh / group;
        for (std::int64_t i = 0; i < nqb; ++i) {
          const float* qr = &q[qi(bb, hh, i, d)];
          const float* gr = &go[qi(bb, hh, i, dv)];
          float m = sinks ? sink[hh] : -INFINITY;
          for (std::int64_t j = 0; j < nkb; ++j) {
            const float* kr = &k[ki(bb, hk, j, d)];
            float dot = 0;
            for (std::int64_t c = 0; c < d; ++c) dot += qr[c] * kr[c];
            x[j] = dot * scale;
            const float sc = cap > 0 ? cap * std::tanh(x[j] / cap) : x[j];
            const double bias = bs[(hh * nqb + i) * nkb + j];
            t[j] = bias == -kInf ? -INFINITY : sc + static_cast<float>(bias);
            if (cap > 0) x[j] = sc;  // keep the softcapped score for the derivative
            m = std::max(m, t[j]);
            z[j] = opt.dropout_p > 0 ? (dropout_keep(opt.dropout_p, opt.dropout_seed, opt.dropout_offset, h, bb, hh,
                                                     i, j)
                                            ? static_cast<float>(1.0 / (1.0 - opt.dropout_p))
                                            : 0.0f)
                                     : 1.0f;
          }
          if (m == -INFINITY) continue;  // sees nothing: no gradient
          float l = sinks ? std::exp(sink[hh] - m) : 0.0f;
          for (std::int64_t j = 0; j < nkb; ++j) l += (p[j] = std::exp(t[j] - m));
          for (std::int64_t j = 0; j < nkb; ++j) p[j] /= l;
          std::fill(o_row.begin(), o_row.end(), 0.0f);
          for (std::int64_t j = 0; j < nkb; ++j)
            for (std::int64_t c = 0; c < dv; ++c) o_row[c] += p[j] * z[j] * v[ki(bb, hk, j, dv) + c];
          float dd = 0;
          for (std::int64_t c = 0; c < dv; ++c) dd += gr[c] * o_row[c];
          if (sinks) ds[hh] -= std::exp(sink[hh] - m) / l * dd;
          for (std::int64_t j = 0; j < nkb; ++j) {
            if (p[j] == 0.0f) continue;
            const float* vr = &v[ki(bb, hk, j, dv)];
            float dp = 0;
            for (std::int64_t c = 0; c < dv; ++c) dp += gr[c] * vr[c];
            float dsj = p[j] * (z[j] * dp - dd);
            if (cap > 0) dsj *= 1.0f - (x[j] / cap) * (x[j] / cap);
            for (std::int64_t c = 0; c < d; ++c) {
              dq[qi(bb, hh, i, d) + c] += scale * dsj * k[ki(bb, hk, j, d) + c];
              dk[ki(bb, hk, j, d) + c] += scale * dsj * qr[c];
            }
            for (std::int64_t c = 0; c < dv; ++c) dvv[ki(bb, hk, j, dv) + c] += p[j] * z[j] * gr[c];
          }
        }
      }
    }
    r.dq.assign(dq.begin(), dq.end());
    r.dk.assign(dk.begin(), dk.end());
    r.dv.assign(dvv.begin(), dvv.end());
    if (sinks) r.ds.assign(ds.begin(), ds.end());
    else r.ds.clear();
    return r;
  }

  std::string describe() const {
    std::ostringstream s;
    s << "B=" << b << " H=" << h << " Hkv=" << h_kv << " Nq=" << n_q << " Nkv=" << n_kv << " d=" << d << " dv=" << dv
      << (store == Store::bshd ? " bshd" : store == Store::packed ? " packed" : "") << (opt.causal ? " causal" : "")
      << (opt.align == Align::top_left ? " top-left" : "") << (opt.window_left >= 0 ? " window" : "")
      << (opt.softcap > 0 ? " softcap" : "") << (sinks ? " sinks" : "") << (opt.dropout_p > 0 ? " dropout" : "")
      << (opt.mask.is_set() ? " mask" : "") << (opt.alibi_slopes.is_set() ? " alibi" : "")
      << (opt.key_lengths.is_set() ? " key_lengths" : "") << (opt.position_offsets.is_set() ? " offsets" : "");
    return s.str();
  }

 private:
  TensorView cu_view(const std::vector<std::int64_t>& cu) const {
    return TensorView::contiguous(cu.data(), DType::i64, {static_cast<std::int64_t>(cu.size())});
  }
  void forward(const Options& f, const float* qp, const float* kp, const float* vp, float* op) const {
    if (store == Store::packed)
      attention_varlen(qview(qp, d), kview(kp, d), kview(vp, dv), qview(op, dv),
                       cu_view(cu_q), cu_view(cu_k), f);
    else
      attention(qview(qp, d), kview(kp, d), kview(vp, dv), qview(op, dv), f);
  }
};

double max_err(const std::vector<double>& a, const std::vector<double>& ref) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - ref[i]));
  return e;
}
double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::abs(e));
  return m;
}

// FlashAttention's policy, gradient by gradient.
void expect_policy(Case& c, Isa isa, int threads = 2) {
  const Case::Grads fast = c.run_fast(isa, threads), ref = c.run_oracle(), plain = c.run_plain();
  const char* names[] = {"dq", "dk", "dv", "dsinks"};
  const std::vector<double>* f[] = {&fast.dq, &fast.dk, &fast.dv, &fast.ds};
  const std::vector<double>* r[] = {&ref.dq, &ref.dk, &ref.dv, &ref.ds};
  const std::vector<double>* p[] = {&plain.dq, &plain.dk, &plain.dv, &plain.ds};
  for (int g = 0; g < 4; ++g) {
    if (f[g]->empty()) continue;
    for (double x : *f[g]) ASSERT_TRUE(std::isfinite(x)) << names[g] << " not finite: " << c.describe();
    const double err = max_err(*f[g], *r[g]), plain_err = max_err(*p[g], *r[g]);
    // The floor: a few float32 roundings of the largest gradient element.
    const double floor = 16 * 0x1p-24 * max_abs(*r[g]);
    EXPECT_LE(err, 2 * plain_err + floor)
        << names[g] << " (" << isa_name(isa) << ", " << c.describe() << "): fast " << err << ", plain float32 "
        << plain_err << ", floor " << floor;
  }
}

class PerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam()) << "; its kernels are not tested here";
  }
};

INSTANTIATE_TEST_SUITE_P(Isas, PerIsa, ::testing::ValuesIn(compiled_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

TEST_P(PerIsa, random_shapes_off_every_tile) {
  // Sizes that are multiples of no tile (BC = 32 or 64, BR, the 64-row blocks,
  // vector widths 8 and 16), GQA groups, dv != d, both layouts.
  struct S {
    std::int64_t b, h, h_kv, n_q, n_kv, d, dv;
    Store store;
  };
  for (const S& s : {S{1, 1, 1, 1, 1, 1, 1, Store::bhsd}, S{2, 4, 2, 77, 131, 24, 40, Store::bhsd},
                     S{1, 3, 1, 65, 67, 17, 9, Store::bshd}, S{1, 8, 2, 130, 70, 64, 64, Store::bhsd},
                     S{2, 2, 2, 5, 200, 128, 72, Store::bshd}, S{1, 2, 1, 150, 3, 33, 16, Store::bhsd}}) {
    for (bool causal : {false, true}) {
      Case c;
      c.b = s.b, c.h = s.h, c.h_kv = s.h_kv, c.n_q = s.n_q, c.n_kv = s.n_kv, c.d = s.d, c.dv = s.dv;
      c.store = s.store;
      c.opt.causal = causal;
      c.seed = static_cast<std::uint64_t>(s.n_q * 7 + s.d + causal);
      c.init();
      expect_policy(c, GetParam());
    }
  }
}

TEST_P(PerIsa, every_feature) {
  const std::int64_t b = 2, h = 4, nq = 37, nkv = 53;
  std::vector<std::int32_t> offsets{3, -5}, lengths{50, 29};
  std::vector<float> slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  std::vector<std::uint8_t> bmask(b * nkv);
  for (std::size_t e = 0; e < bmask.size(); ++e) bmask[e] = (e * 7 + 3) % 5 != 0;
  std::vector<float> fmask(nq * nkv);
  for (std::size_t e = 0; e < fmask.size(); ++e) fmask[e] = e % 11 == 0 ? -INFINITY : 0.3f * std::sin(0.7f * e);
  struct F {
    const char* name;
    void (*set)(Case&, void*);
  };
  auto base = [&](auto&& set) {
    Case c;
    c.b = b, c.h = h, c.h_kv = 2, c.n_q = nq, c.n_kv = nkv, c.d = 20, c.dv = 28;
    set(c);
    c.init();
    SCOPED_TRACE(c.describe());
    expect_policy(c, GetParam());
  };
  base([](Case& c) { c.opt.causal = true, c.opt.align = Align::top_left; });
  base([](Case& c) { c.opt.causal = true; });
  base([&](Case& c) {
    c.opt.causal = true;
    c.opt.position_offsets = TensorView::contiguous(offsets.data(), DType::i32, {b});
  });
  base([](Case& c) { c.opt.window_left = 9, c.opt.window_right = 4; });
  base([&](Case& c) { c.opt.key_lengths = TensorView::contiguous(lengths.data(), DType::i32, {b}); });
  base([&](Case& c) { c.opt.mask = TensorView::contiguous(bmask.data(), DType::boolean, {b, 1, 1, nkv}); });
  base([&](Case& c) { c.opt.mask = TensorView::contiguous(fmask.data(), {nq, nkv}); });
  base([&](Case& c) { c.opt.alibi_slopes = TensorView::contiguous(slopes.data(), {h}); });
  base([](Case& c) { c.opt.softcap = 2.5; });
  base([](Case& c) { c.sinks = true; });
  base([](Case& c) { c.opt.scale = 0.7; });
  base([](Case& c) { c.opt.dropout_p = 0.3, c.opt.dropout_seed = 99, c.opt.dropout_offset = 4; });
  base([](Case& c) { c.h_kv = 1; });  // MQA
  base([&](Case& c) {                  // everything at once
    c.opt.causal = true;
    c.opt.window_left = 20;
    c.opt.key_lengths = TensorView::contiguous(lengths.data(), DType::i32, {b});
    c.opt.mask = TensorView::contiguous(fmask.data(), {nq, nkv});
    c.opt.alibi_slopes = TensorView::contiguous(slopes.data(), {h});
    c.opt.softcap = 4.0;
    c.sinks = true;
    c.opt.dropout_p = 0.2;
    c.store = Store::bshd;
  });
}

TEST_P(PerIsa, packed_sequences) {
  for (bool causal : {false, true}) {
    Case c;
    c.store = Store::packed;
    c.cu_q = {0, 5, 5, 75, 76};
    c.cu_k = {0, 9, 12, 80, 80};  // an empty query sequence, a sequence with no keys
    c.h = 4, c.h_kv = 2, c.d = 24, c.dv = 16;
    c.opt.causal = causal;
    c.opt.softcap = causal ? 3.0 : 0.0;
    c.sinks = causal;
    c.opt.dropout_p = causal ? 0.0 : 0.25;
    c.init();
    expect_policy(c, GetParam());
  }
}

TEST_P(PerIsa, bitwise_identical_for_any_thread_count) {
  for (double p : {0.0, 0.4}) {
    Case c;
    c.b = 1, c.h = 4, c.h_kv = 2, c.n_q = 150, c.n_kv = 700, c.d = 32, c.dv = 24;
    c.opt.causal = true;
    c.opt.dropout_p = p;
    c.sinks = true;
    c.init();
    const Case::Grads one = c.run_fast(GetParam(), 1);
    for (int t : {2, 3, 7}) {
      const Case::Grads many = c.run_fast(GetParam(), t);
      EXPECT_EQ(one.dq, many.dq) << t << " threads, p=" << p;
      EXPECT_EQ(one.dk, many.dk) << t << " threads, p=" << p;
      EXPECT_EQ(one.dv, many.dv) << t << " threads, p=" << p;
      EXPECT_EQ(one.ds, many.ds) << t << " threads, p=" << p;
    }
  }
}

TEST_P(PerIsa, gradients_whose_float32_sums_overflow_come_out_exact) {
  // Every key has the same value row (entries ~10) and dO ~ 1e37: each
  // dP = dO·v (8 products of ~1e38) overflows float32, while the true
  // dS = P·(dP - D) is 0 (dP = D for every key) and dV = Pᵀ·dO ~ 1e37 fits.
  // The float32 pass gives Inf - Inf; the float64 recomputation the exact answer.
  Case c;
  c.b = 1, c.h = 2, c.h_kv = 1, c.n_q = 40, c.n_kv = 9, c.d = 8, c.dv = 8;
  c.init();
  for (std::int64_t j = 0; j < c.n_kv; ++j)
    for (std::int64_t x = 0; x < c.dv; ++x) c.v[c.ki(0, 0, j, c.dv) + x] = 10.0f + static_cast<float>(x);
  for (float& x : c.go) x = 1e37f;
  const Case::Grads fast = c.run_fast(GetParam(), 2), ref = c.run_oracle();
  for (auto [f, r] : {std::pair{&fast.dq, &ref.dq}, std::pair{&fast.dk, &ref.dk}, std::pair{&fast.dv, &ref.dv}})
    for (std::size_t e = 0; e < r->size(); ++e) {
      ASSERT_TRUE(std::isfinite((*f)[e])) << "element " << e;
      EXPECT_EQ((*f)[e], static_cast<double>(static_cast<float>((*r)[e]))) << "element " << e;
    }
  EXPECT_GT(max_abs(fast.dv), 1e36);
}

TEST_P(PerIsa, nan_in_the_data_is_not_hidden) {
  Case c;
  c.b = 1, c.h = 2, c.h_kv = 2, c.n_q = 20, c.n_kv = 30, c.d = 8, c.dv = 8;
  c.opt.causal = true;
  c.init();
  c.v[c.ki(0, 1, 25, c.dv) + 3] = NAN;  // seen by the last queries of head 1 only
  const Case::Grads fast = c.run_fast(GetParam(), 2), ref = c.run_oracle();
  for (auto [f, r] : {std::pair{&fast.dq, &ref.dq}, std::pair{&fast.dk, &ref.dk}, std::pair{&fast.dv, &ref.dv}})
    for (std::size_t e = 0; e < r->size(); ++e) {
      ASSERT_EQ(std::isnan((*f)[e]), std::isnan((*r)[e])) << "element " << e;
      if (!std::isnan((*r)[e])) {
        EXPECT_NEAR((*f)[e], (*r)[e], 1e-4 * (1 + std::abs((*r)[e])));
      }
    }
}

TEST(Backward, gradient_layouts_are_the_callers) {
  // dQ, dK, dV in a layout other than Q's: the values land at the same (b, h, n, c).
  Case c;
  c.b = 2, c.h = 2, c.h_kv = 2, c.n_q = 9, c.n_kv = 11, c.d = 8, c.dv = 8;
  c.init();
  const Case::Grads dense = c.run_fast(Isa::automatic, 1);
  Options f = c.opt;
  f.threads = 1;
  std::vector<float> dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
  const Gradients g{TensorView::bshd(dq.data(), c.b, c.n_q, c.h, c.d), TensorView::bshd(dk.data(), c.b, c.n_kv, c.h_kv, c.d),
                    TensorView::bshd(dv.data(), c.b, c.n_kv, c.h_kv, c.dv), {}};
  attention_backward(c.qview(c.q.data(), c.d), c.kview(c.k.data(), c.d),
                     c.kview(c.v.data(), c.dv), c.qview(c.o.data(), c.dv),
                     c.lse_view(c.lse.data()), c.qview(c.go.data(), c.dv), g, f);
  for (std::int64_t b = 0; b < c.b; ++b)
    for (std::int64_t h = 0; h < c.h; ++h)
      for (std::int64_t i = 0; i < c.n_q; ++i)
        for (std::int64_t x = 0; x < c.d; ++x)
          ASSERT_EQ(dq[((b * c.n_q + i) * c.h + h) * c.d + x], static_cast<float>(dense.dq[c.qi(b, h, i, c.d) + x]));
}


// ---- Dropout in the fast forward -------------------------------------------------

TEST_P(PerIsa, forward_dropout_matches_oracle) {
  // Prefill and split-KV decode shapes (Nq = 1 against 2000 keys splits the
  // keys into chunks), causal or not, both layouts.
  struct S {
    std::int64_t b, h, h_kv, n_q, n_kv, d;
    bool causal;
  };
  for (const S& s : {S{2, 4, 2, 70, 90, 24, false}, S{1, 2, 2, 130, 130, 64, true}, S{1, 8, 2, 1, 2000, 32, false}}) {
    for (double p : {0.1, 0.5}) {
      test::Problem pb;
      pb.b = s.b, pb.h = s.h, pb.h_kv = s.h_kv, pb.n_q = s.n_q, pb.n_kv = s.n_kv, pb.d = pb.dv = s.d;
      pb.causal = s.causal;
      pb.isa = GetParam();
      pb.threads = 2;
      pb.layout = s.n_q == 1 ? test::Layout::bshd : test::Layout::bhsd;
      test::Buffers buf(pb);
      buf.base.dropout_p = p;
      if (s.causal) buf.base.window_left = 37;  // tiles that start off a multiple of 4 keys
      buf.base.dropout_seed = 0x123456789ull;
      buf.base.dropout_offset = 17;
      buf.run_fast();
      buf.run_reference();
      // Kept probabilities are scaled by 1/(1-p): so is the error bound of O.
      const double tol = test::tolerance_o(pb, test::max_abs(buf.q), test::max_abs(buf.k), test::max_abs(buf.v)) / (1 - p);
      const test::Worst w = test::worst_o(buf);
      EXPECT_LE(w.err, tol) << pb << " p=" << p << "\n" << w.describe();
      EXPECT_LE(test::worst_lse(buf).err, test::tolerance_lse(pb, test::max_abs(buf.q), test::max_abs(buf.k)));
    }
  }
}

TEST_P(PerIsa, forward_dropout_is_bitwise_identical_for_any_thread_count) {
  for (std::int64_t n_q : {1, 150}) {  // split-KV decode and prefill
    test::Problem pb;
    pb.b = 1, pb.h = 4, pb.h_kv = 2, pb.n_q = n_q, pb.n_kv = 1500, pb.d = pb.dv = 32;
    pb.isa = GetParam();
    pb.threads = 1;
    test::Buffers one(pb);
    one.base.dropout_p = 0.3;
    one.run_fast();
    for (int t : {2, 3, 7}) {
      pb.threads = t;
      test::Buffers many(pb);
      many.base.dropout_p = 0.3;
      many.run_fast();
      EXPECT_EQ(one.o, many.o) << t << " threads, Nq=" << n_q;
      EXPECT_EQ(one.lse, many.lse) << t << " threads, Nq=" << n_q;
    }
  }
}

TEST(Dropout, fast_mask_output_is_the_keep_function) {
  const std::int64_t b = 2, h = 3, nq = 5, nkv = 37;
  std::vector<float> q = test::randn(b * h * nq * 8, 1), k = test::randn(b * h * nkv * 8, 2),
                     v = test::randn(b * h * nkv * 8, 3), o(q.size());
  std::vector<std::uint8_t> keep(b * h * nq * nkv, 7);
  Options opt;
  opt.dropout_p = 0.35;
  opt.dropout_seed = 42;
  opt.dropout_offset = 3;
  opt.dropout_mask = TensorView::contiguous(keep.data(), DType::boolean, {b, h, nq, nkv});
  attention(TensorView::contiguous(q.data(), {b, h, nq, 8}), TensorView::contiguous(k.data(), {b, h, nkv, 8}),
            TensorView::contiguous(v.data(), {b, h, nkv, 8}), TensorView::contiguous(o.data(), {b, h, nq, 8}), opt);
  std::int64_t kept = 0;
  for (std::int64_t bb = 0; bb < b; ++bb)
    for (std::int64_t hh = 0; hh < h; ++hh)
      for (std::int64_t i = 0; i < nq; ++i)
        for (std::int64_t j = 0; j < nkv; ++j) {
          const std::uint8_t got = keep[((bb * h + hh) * nq + i) * nkv + j];
          ASSERT_EQ(got, dropout_keep(0.35, 42, 3, h, bb, hh, i, j) ? 1 : 0) << bb << " " << hh << " " << i << " " << j;
          kept += got;
        }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, b * h * nq * nkv);
}

}  // namespace
}  // namespace sdpa
