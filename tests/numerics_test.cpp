// The stability contract at its edges and the fast path's precision against a
// plain float32 materialising implementation, for every ISA and for the
// split-KV decode path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "support/problem.h"

namespace sdpa::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

class Numerics : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
  }
  Isa isa() const { return GetParam(); }
};

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

// A plain float32 implementation, as a framework without fused kernels runs
// it: S = (Q·Kᵀ)·scale in float (one FMA chain per score, BLAS-like), P =
// exp(S - max) / sum in float, O = P·V in float. Dense bhsd, no masks.
std::vector<float> plain_f32(const Buffers& buf) {
  const Problem& pb = buf.pb;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(pb.d)));
  const std::int64_t group = pb.h / pb.h_kv;
  std::vector<float> o(buf.o.size()), s(static_cast<std::size_t>(pb.n_kv));
  for (std::int64_t b = 0; b < pb.b; ++b)
    for (std::int64_t h = 0; h < pb.h; ++h) {
      const std::int64_t hk = h / group;
      for (std::int64_t i = 0; i < pb.n_q; ++i) {
        const float* q = &buf.q[((b * pb.h + h) * pb.n_q + i) * pb.d];
        float mx = -kInf;
        for (std::int64_t j = 0; j < pb.n_kv; ++j) {
          const float* k = &buf.k[((b * pb.h_kv + hk) * pb.n_kv + j) * pb.d];
          float dot = 0;
          for (std::int64_t c = 0; c < pb.d; ++c) dot = std::fma(q[c], k[c], dot);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        float l = 0;
        for (std::int64_t j = 0; j < pb.n_kv; ++j) {
          s[j] = std::exp(s[j] - mx);
          l += s[j];
        }
        for (std::int64_t j = 0; j < pb.n_kv; ++j) s[j] /= l;
        for (std::int64_t c = 0; c < pb.dv; ++c) {
          float a = 0;
          for (std::int64_t j = 0; j < pb.n_kv; ++j) a = std::fma(s[j], buf.v[((b * pb.h_kv + hk) * pb.n_kv + j) * pb.dv + c], a);
          o[buf.o_index(b, h, i, c)] = a;
        }
      }
    }
  return o;
}

// Root-mean-square error over O: the worst element alone is too noisy a
// statistic to compare two implementations of about the same accuracy.
double rms_against_oracle(const std::vector<float>& got, const Buffers& buf) {
  double w = 0;
  for (std::size_t i = 0; i < got.size(); ++i) w += (got[i] - buf.o_ref[i]) * (got[i] - buf.o_ref[i]);
  return std::sqrt(w / static_cast<double>(got.size()));
}

struct Ratio {
  double fast = 0, plain = 0;
};

// Fast path's and plain float32's RMS errors (summed) against the oracle, over
// several seeds, with q and k ~ N(0, sigma²).
Ratio precision_at(Isa isa, double sigma, std::int64_t h, std::int64_t n_q, std::int64_t n_kv, std::int64_t d) {
  Ratio r;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    Problem pb;
    pb.isa = isa;
    pb.h = pb.h_kv = h;
    pb.n_q = n_q, pb.n_kv = n_kv, pb.d = pb.dv = d;
    pb.seed = seed;
    Buffers buf(pb);
    for (float& x : buf.q) x = static_cast<float>(x * sigma);
    for (float& x : buf.k) x = static_cast<float>(x * sigma);
    buf.run_fast();
    buf.run_reference();
    r.fast += rms_against_oracle(buf.o, buf);
    r.plain += rms_against_oracle(plain_f32(buf), buf);
  }
  return r;
}

// q, k ~ N(0, sigma²) at d = 64: scaled scores of magnitude sigma², i.e. 0.01 .. 100.
constexpr double kSigmas[] = {0.1, 0.316, 1.0, 3.16, 10.0};

TEST_P(Numerics, error_at_most_plain_float32_at_every_magnitude) {
  for (double sigma : kSigmas) {
    const Ratio r = precision_at(isa(), sigma, 4, 64, 64, 64);
    std::printf("[ %s ] sigma %-4g N 64: fast %.3g plain %.3g ratio %.3f\n", isa_name(isa()), sigma, r.fast, r.plain,
                r.fast / r.plain);
    EXPECT_LE(r.fast, r.plain) << "sigma " << sigma;
  }
}

TEST_P(Numerics, decode_error_at_most_plain_float32_at_every_magnitude) {
  for (double sigma : kSigmas) {
    const Ratio r = precision_at(isa(), sigma, 4, 8, 4096, 64);
    std::printf("[ %s ] sigma %-4g decode: fast %.3g plain %.3g ratio %.3f\n", isa_name(isa()), sigma, r.fast, r.plain,
                r.fast / r.plain);
    EXPECT_LE(r.fast, r.plain) << "sigma " << sigma;
  }
}

// ---- the stability contract at its edges ------------------------------------

// Prefill (tiled) and decode (Nq = 1..8 against long keys: split-KV) shapes.
std::vector<Problem> edge_shapes(Isa isa) {
  std::vector<Problem> out;
  for (auto [n_q, n_kv] : std::vector<std::pair<int, int>>{{70, 90}, {1, 3000}, {8, 1100}}) {
    Problem pb;
    pb.isa = isa;
    pb.h = 2, pb.n_q = n_q, pb.n_kv = n_kv, pb.d = 16, pb.dv = 8, pb.threads = 2;
    out.push_back(pb);
  }
  return out;
}

TEST_P(Numerics, huge_values_do_not_overflow_the_accumulator) {
  for (Problem pb : edge_shapes(isa())) {
    Buffers buf(pb);
    for (float& x : buf.v) x = x > 0 ? 3e38f : -3e38f;
    buf.run_fast();
    buf.run_reference();
    for (float x : buf.o) ASSERT_TRUE(std::isfinite(x)) << pb;
    const Worst w = worst_o(buf);
    EXPECT_LE(w.err, 1e-5 * 3e38) << pb << w.describe();
  }
}

TEST_P(Numerics, huge_queries_and_keys_do_not_overflow_the_scores) {
  for (Problem pb : edge_shapes(isa())) {
    Buffers buf(pb);
    for (float& x : buf.q) x = x > 0 ? 1e38f : -1e38f;
    for (float& x : buf.k) x = x > 0 ? 1e38f : -1e38f;
    buf.run_fast();
    buf.run_reference();
    for (float x : buf.o) ASSERT_FALSE(std::isnan(x)) << pb;
    const Worst w = worst_o(buf);
    EXPECT_LE(w.err, 1e-5 * max_abs(buf.v)) << pb << w.describe();
  }
}

TEST_P(Numerics, inf_in_k_that_makes_every_score_minus_inf_is_nan) {
  for (Problem pb : edge_shapes(isa())) {
    Buffers buf(pb);
    // Query 0 of head 0 is all -1 and every key has +inf at c = 0: every score
    // of that row is -inf, from the data, with no key masked.
    for (std::int64_t c = 0; c < pb.d; ++c) buf.q[c] = -1.0f;
    for (std::int64_t j = 0; j < pb.n_kv; ++j) buf.k[j * pb.d] = kInf;
    buf.run_fast();
    buf.run_reference();
    EXPECT_TRUE(std::isnan(buf.o[buf.o_index(0, 0, 0, 0)])) << pb;
    EXPECT_TRUE(std::isnan(buf.lse[0])) << pb;
    EXPECT_TRUE(std::isnan(buf.o_ref[buf.o_index(0, 0, 0, 0)])) << pb;  // the oracle agrees
    EXPECT_TRUE(std::isnan(buf.lse_ref[0])) << pb;
  }
}

}  // namespace
INSTANTIATE_TEST_SUITE_P(Isa, Numerics, ::testing::ValuesIn(compiled_isas()), isa_param_name);
}  // namespace sdpa::test
