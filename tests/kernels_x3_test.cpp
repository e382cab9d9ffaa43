// Float32 on three bf16 parts per value (kernel_set.h's x3 members, the AMX
// set): the parts of every packed value sum to it exactly, pads are 0 and
// nothing is written past them; scores_x3 and pv_x3 stay within the float32
// bounds against float64 and err no more than the set's own float32 kernels
// on the same values (root mean square, over random shapes around the tiles);
// with per-row key ranges they give the same bits and read nothing outside
// them; Inf and NaN reach the sums. Skipped where the CPU lacks AMX.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "cpu/dispatch.h"
#include "sdpa/attention.h"

namespace sdpa {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();  // 2^-23
constexpr std::uint16_t kGuard16 = 0x7FC1;
constexpr std::uint32_t kGuard32 = 0x7FC00123u;
constexpr std::size_t kGuardElems = 64;

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double widen(std::uint16_t b) { return from_bits(std::uint32_t{b} << 16); }

// The value at index i of three parts `part` values apart.
double parts_sum(const std::vector<std::uint16_t>& x, std::size_t part, std::size_t i) {
  return widen(x[i]) + widen(x[part + i]) + widen(x[2 * part + i]);
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

template <class T>
bool guard_intact(const std::vector<T>& buf, std::size_t used, T guard) {
  for (std::size_t i = used; i < buf.size(); ++i)
    if (std::memcmp(&buf[i], &guard, sizeof(T)) != 0) return false;
  return true;
}

// pv_x3's scratch, with NaN bits it must not depend on.
std::uint16_t* work(const cpu::KernelSet& ks) {
  static std::vector<std::uint16_t> w;
  w.assign(static_cast<std::size_t>(ks.x3_pv_work), kGuard16);
  return w.data();
}

std::vector<const float*> row_pointers(const std::vector<float>& x, int rows, int cols) {
  std::vector<const float*> p(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) p[r] = x.data() + static_cast<std::size_t>(r) * cols;
  return p;
}

// Normal values times 2^e, e uniform in [-spread, spread]: every bit of the
// significand matters, and the parts span many exponents.
std::vector<float> random_floats(std::mt19937& rng, std::size_t count, int spread) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> e(-spread, spread);
  std::vector<float> x(count);
  for (auto& v : x) v = std::ldexp(normal(rng), e(rng));
  return x;
}

class KernelsX3 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!isa_supported(Isa::amx)) GTEST_SKIP() << "CPU lacks amx (the x3 kernels are AMX's)";
    ks_ = &cpu::kernels_for(Isa::amx);
  }
  const cpu::KernelSet* ks_ = nullptr;
};

TEST(KernelsX3Sets, only_the_amx_set_has_them_and_then_all_of_them) {
  for (Isa isa : compiled_isas()) {
    if (!isa_supported(isa)) continue;
    const cpu::KernelSet& ks = cpu::kernels_for(isa);
    const bool any = ks.pack_q_x3 || ks.pack_kt_x3 || ks.scores_x3 || ks.pack_v_x3 || ks.pv_x3;
    const bool all = ks.pack_q_x3 && ks.pack_kt_x3 && ks.scores_x3 && ks.pack_v_x3 && ks.pv_x3;
    EXPECT_EQ(any, all) << ks.name;
    EXPECT_EQ(any, isa == Isa::amx) << ks.name;
    EXPECT_EQ(ks.x3_pv_work > 0, any) << ks.name;
  }
}

const int kDims[] = {1, 3, 16, 31, 32, 33, 64, 80, 128, 200};

TEST_F(KernelsX3, the_parts_of_each_packed_value_sum_to_it_and_pads_are_zero) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(91);
  for (int d : kDims)
    for (int rows : {1, 15, 16, 17, 33, ks.br})
      for (int n : {1, 7, 31, 33, ks.bc, 2 * ks.bc, 3 * ks.bc + 5, 4 * ks.bc}) {
        std::ostringstream where;
        where << "rows=" << rows << " n=" << n << " d=" << d;
        SCOPED_TRACE(where.str());
        const int d2 = round_up(d, ks.bf16_kpad), rows_pad = round_up(rows, ks.bf16_rpad),
                  bc_pad = round_up(n, ks.nr), n_pad = round_up(n, ks.bf16_kpad), dv_pad = round_up(d, ks.w);
        auto q = random_floats(rng, static_cast<std::size_t>(rows) * d, 40);
        auto k = random_floats(rng, static_cast<std::size_t>(n) * d, 40);
        q[0] = 0.0f;
        if (q.size() > 1) q[1] = -0.0f;
        k[0] = 3.0e38f;  // a part rounds up, the next is negative
        const auto kp = row_pointers(k, n, d);
        const std::size_t q3_size = 3u * rows_pad * d2, kt3_size = 3u * d2 * bc_pad, v3_size = 3u * n_pad * dv_pad;
        std::vector<std::uint16_t> q3(q3_size + kGuardElems, kGuard16), kt3(kt3_size + kGuardElems, kGuard16),
            v3(v3_size + kGuardElems, kGuard16);
        // Q scaled as the driver folds 1/sqrt(d) in: the parts are those of
        // the float32 products.
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
        ks.pack_q_x3(row_pointers(q, rows, d).data(), rows, d, scale, q3.data());
        ks.pack_kt_x3(kp.data(), n, d, kt3.data(), bc_pad);
        ks.pack_v_x3(kp.data(), n, d, v3.data(), dv_pad);
        ASSERT_TRUE(guard_intact(q3, q3_size, kGuard16)) << "q3";
        ASSERT_TRUE(guard_intact(kt3, kt3_size, kGuard16)) << "kt3";
        ASSERT_TRUE(guard_intact(v3, v3_size, kGuard16)) << "v3";
        const std::size_t qp = static_cast<std::size_t>(rows_pad) * d2, kp3 = static_cast<std::size_t>(d2) * bc_pad,
                          vp3 = static_cast<std::size_t>(n_pad) * dv_pad;
        for (int r = 0; r < rows_pad; ++r)
          for (int c = 0; c < d2; ++c) {
            const std::size_t i = static_cast<std::size_t>(r) * d2 + c;
            const double want = r < rows && c < d ? q[static_cast<std::size_t>(r) * d + c] * scale : 0.0;
            ASSERT_EQ(parts_sum(q3, qp, i), want) << "q3 at r=" << r << " c=" << c;
          }
        for (int c = 0; c < d2; ++c)
          for (int j = 0; j < bc_pad; ++j) {
            const std::size_t i = 2 * (static_cast<std::size_t>(c / 2) * bc_pad + j) + c % 2;
            const double want = j < n && c < d ? k[static_cast<std::size_t>(j) * d + c] : 0.0;
            ASSERT_EQ(parts_sum(kt3, kp3, i), want) << "kt3 at c=" << c << " j=" << j;
          }
        for (int j = 0; j < n_pad; ++j)
          for (int c = 0; c < dv_pad; ++c) {
            const std::size_t i = 2 * (static_cast<std::size_t>(j / 2) * dv_pad + c) + j % 2;
            const double want = j < n && c < d ? k[static_cast<std::size_t>(j) * d + c] : 0.0;
            ASSERT_EQ(parts_sum(v3, vp3, i), want) << "v3 at j=" << j << " c=" << c;
          }
      }
}

// Root mean square of err / scale over the entries.
struct Rms {
  double sum = 0;
  long count = 0;
  void add(double e) {
    sum += e * e;
    ++count;
  }
  double value() const { return count ? std::sqrt(sum / count) : 0.0; }
};

// Calls f(rows, n) for block heights and tile widths around the AMX tiles
// (16 rows, 32 keys) and the set's BR and BC, traced with the head size.
template <class F>
void around_the_tiles(const cpu::KernelSet& ks, const char* dim_name, int dim, F f) {
  for (int rows : {1, 6, 16, 17, 31, 32, 33, 100, ks.br})
    for (int n : {1, 15, 16, 17, 33, ks.bc - 1, ks.bc, 2 * ks.bc, 4 * ks.bc}) {
      std::ostringstream where;
      where << "rows=" << rows << " n=" << n << " " << dim_name << "=" << dim;
      SCOPED_TRACE(where.str());
      f(rows, n);
    }
}

TEST_F(KernelsX3, scores_are_within_the_float32_bound_and_err_as_the_float32_kernel_does) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(92);
  double worst = 0;
  for (int d : kDims) {
    Rms x3_err, f32_err;
    around_the_tiles(ks, "d", d, [&](int rows, int n) {
        const int d2 = round_up(d, ks.bf16_kpad), rows_pad = round_up(rows, ks.bf16_rpad), bc_pad = round_up(n, ks.nr);
        const auto q = random_floats(rng, static_cast<std::size_t>(rows) * d, 0);
        const auto k = random_floats(rng, static_cast<std::size_t>(n) * d, 0);
        const auto kp = row_pointers(k, n, d);
        std::vector<std::uint16_t> q3(3u * rows_pad * d2), kt3(3u * d2 * bc_pad);
        const std::size_t s_size = static_cast<std::size_t>(rows_pad) * bc_pad;
        std::vector<float> s(s_size + kGuardElems, from_bits(kGuard32)), s32(s_size), kt(static_cast<std::size_t>(d) * bc_pad);
        ks.pack_q_x3(row_pointers(q, rows, d).data(), rows, d, 1.0f, q3.data());
        ks.pack_kt_x3(kp.data(), n, d, kt3.data(), bc_pad);
        ks.scores_x3(q3.data(), rows, d, kt3.data(), bc_pad, s.data(), nullptr, nullptr);
        ASSERT_TRUE(guard_intact(s, s_size, from_bits(kGuard32))) << "S";
        ks.pack_kt(kp.data(), n, d, kt.data(), bc_pad);
        ks.scores(q.data(), rows, d, kt.data(), bc_pad, s32.data());
        for (int r = 0; r < rows_pad; ++r)
          for (int j = 0; j < bc_pad; ++j) {
            const float got = s[static_cast<std::size_t>(r) * bc_pad + j];
            if (r >= rows || j >= n) {
              ASSERT_EQ(got, 0.0f) << "pad row " << r << " or key " << j;
              continue;
            }
            double dot = 0, mag = 0;
            for (int c = 0; c < d; ++c) {
              const double a = q[static_cast<std::size_t>(r) * d + c], b = k[static_cast<std::size_t>(j) * d + c];
              dot += a * b;
              mag += std::abs(a * b);
            }
            // A float32 dot product errs by at most d·u·Σ|q·k| (u = eps/2);
            // the parts add under two roundings of each product (eps·Σ|q·k|)
            // and the small products' sum, 2^-7 of that: (d + 3)·eps·Σ|q·k|
            // covers them.
            const double bound = (d + 3) * kEps * mag;
            const double err = std::abs(got - dot);
            ASSERT_LE(err, bound) << "row " << r << " key " << j << ": got " << got << ", want " << dot;
            if (bound > 0) worst = std::max(worst, err / bound);
            x3_err.add(err / mag);
            f32_err.add(std::abs(s32[static_cast<std::size_t>(r) * bc_pad + j] - dot) / mag);
          }
      });
    std::printf("[ x3 ] scores d=%d: rms relative error %.3g, float32 kernel %.3g\n", d, x3_err.value(),
                f32_err.value());
    // No worse than the float32 kernel on the same values, by more than 2x
    // or a floor of one rounding.
    EXPECT_LE(x3_err.value(), 2 * f32_err.value() + kEps) << "d=" << d;
  }
  std::printf("[ x3 ] scores: worst error %.3g of the bound\n", worst);
}

TEST_F(KernelsX3, pv_is_within_the_float32_bound_and_errs_as_the_float32_kernel_does) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(93);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  double worst = 0;
  for (int dv : kDims) {
    Rms x3_err, f32_err;
    around_the_tiles(ks, "dv", dv, [&](int rows, int n) {
        const int dv_pad = round_up(dv, ks.w), n_pad = round_up(n, ks.bf16_kpad), p_stride = round_up(n, ks.nr);
        std::vector<float> p(static_cast<std::size_t>(rows) * p_stride), alpha(static_cast<std::size_t>(rows));
        for (auto& x : p) x = unit(rng) * unit(rng);  // probabilities, some small
        for (auto& a : alpha) a = unit(rng);
        // V rows of dv_pad floats (what the driver hands the float32 pv).
        auto v = random_floats(rng, static_cast<std::size_t>(n) * dv_pad, 0);
        for (int j = 0; j < n; ++j)
          for (int c = dv; c < dv_pad; ++c) v[static_cast<std::size_t>(j) * dv_pad + c] = 0.0f;
        const auto vp = row_pointers(v, n, dv_pad);
        const auto acc0 = random_floats(rng, static_cast<std::size_t>(rows) * dv_pad, 0);
        const std::size_t acc_size = acc0.size();
        std::vector<float> acc(acc0), acc32(acc0);
        acc.resize(acc_size + kGuardElems, from_bits(kGuard32));
        std::vector<std::uint16_t> v3(3u * n_pad * dv_pad);
        ks.pack_v_x3(vp.data(), n, dv, v3.data(), dv_pad);
        ks.pv_x3(p.data(), rows, n, p_stride, v3.data(), dv_pad, acc.data(), alpha.data(), nullptr, nullptr, work(ks));
        ASSERT_TRUE(guard_intact(acc, acc_size, from_bits(kGuard32))) << "acc";
        ks.pv(p.data(), rows, n, p_stride, vp.data(), dv_pad, acc32.data(), alpha.data(), nullptr, nullptr, 0);
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < dv; ++c) {
            const std::size_t i = static_cast<std::size_t>(r) * dv_pad + c;
            double sum = double(acc0[i]) * alpha[r], mag = std::abs(sum);
            for (int j = 0; j < n; ++j) {
              const double t = double(p[static_cast<std::size_t>(r) * p_stride + j]) * v[static_cast<std::size_t>(j) * dv_pad + c];
              sum += t;
              mag += std::abs(t);
            }
            const double bound = (n + 3) * kEps * mag;
            const double err = std::abs(acc[i] - sum);
            ASSERT_LE(err, bound) << "row " << r << " column " << c << ": got " << acc[i] << ", want " << sum;
            if (bound > 0) worst = std::max(worst, err / bound);
            x3_err.add(err / mag);
            f32_err.add(std::abs(acc32[i] - sum) / mag);
          }
      });
    std::printf("[ x3 ] pv dv=%d: rms relative error %.3g, float32 kernel %.3g\n", dv, x3_err.value(),
                f32_err.value());
    EXPECT_LE(x3_err.value(), 2 * f32_err.value() + kEps) << "dv=" << dv;
  }
  std::printf("[ x3 ] pv: worst error %.3g of the bound\n", worst);
}

// Per-row key ranges as a causal diagonal or a window gives them (some rows
// seeing none), for rows of a tile of n keys.
void random_ranges(std::mt19937& rng, int rows, int n, std::vector<int>& begin, std::vector<int>& end) {
  begin.assign(static_cast<std::size_t>(rows), 0);
  end.assign(static_cast<std::size_t>(rows), 0);
  std::uniform_int_distribution<int> shape(0, 2), any(0, n);
  const int kind = shape(rng), offset = any(rng) - n / 2, width = 1 + any(rng) / 2;
  for (int r = 0; r < rows; ++r) {
    int b = 0, e = n;
    if (kind == 0) e = r + offset;                  // causal
    if (kind == 1) b = r + offset, e = b + width;   // window
    if (kind == 2) b = any(rng), e = b + any(rng) / 4;
    begin[r] = std::clamp(b, 0, n);
    end[r] = std::clamp(e, begin[r], n);
  }
}

TEST_F(KernelsX3, ranged_scores_give_the_bits_of_all_columns_where_rows_see_keys_and_leave_the_rest) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(95);
  for (int d : {16, 64, 128})
    for (int rows : {1, 17, 32, 33, 100, ks.br})
      for (int n : {1, 17, 33, ks.bc, 2 * ks.bc, 4 * ks.bc})
        for (int trial = 0; trial < 3; ++trial) {
          std::ostringstream where;
          where << "rows=" << rows << " n=" << n << " d=" << d << " trial " << trial;
          SCOPED_TRACE(where.str());
          const int d2 = round_up(d, ks.bf16_kpad), rows_pad = round_up(rows, ks.bf16_rpad), bc_pad = round_up(n, ks.nr);
          const auto q = random_floats(rng, static_cast<std::size_t>(rows) * d, 0);
          const auto k = random_floats(rng, static_cast<std::size_t>(n) * d, 0);
          const auto kp = row_pointers(k, n, d);
          std::vector<std::uint16_t> q3(3u * rows_pad * d2), kt3(3u * d2 * bc_pad);
          ks.pack_q_x3(row_pointers(q, rows, d).data(), rows, d, 1.0f, q3.data());
          ks.pack_kt_x3(kp.data(), n, d, kt3.data(), bc_pad);
          std::vector<int> b, e;
          random_ranges(rng, rows, n, b, e);
          const std::size_t s_size = static_cast<std::size_t>(rows_pad) * bc_pad;
          std::vector<float> all(s_size), ranged(s_size, from_bits(kGuard32));
          ks.scores_x3(q3.data(), rows, d, kt3.data(), bc_pad, all.data(), nullptr, nullptr);
          ks.scores_x3(q3.data(), rows, d, kt3.data(), bc_pad, ranged.data(), b.data(), e.data());
          for (int r = 0; r < rows; ++r)
            for (int j = 0; j < bc_pad; ++j) {
              const std::size_t i = static_cast<std::size_t>(r) * bc_pad + j;
              if (j >= b[r] && j < e[r]) {
                ASSERT_EQ(std::memcmp(&ranged[i], &all[i], 4), 0) << "row " << r << " key " << j;
              } else if (ranged[i] != all[i]) {
                // Left as it was: only columns some row of a 32-row strip sees are computed.
                std::uint32_t u;
                std::memcpy(&u, &ranged[i], 4);
                ASSERT_EQ(u, kGuard32) << "row " << r << " key " << j;
              }
            }
          // A strip whose rows see nothing is not touched at all.
          for (int r0 = 0; r0 < rows; r0 += 32) {
            bool none = true;
            for (int r = r0; r < std::min(rows, r0 + 32); ++r) none = none && b[r] >= e[r];
            if (!none) continue;
            for (int r = r0; r < std::min(rows, r0 + 32); ++r)
              for (int j = 0; j < bc_pad; ++j) {
                std::uint32_t u;
                std::memcpy(&u, &ranged[static_cast<std::size_t>(r) * bc_pad + j], 4);
                ASSERT_EQ(u, kGuard32) << "empty strip row " << r << " key " << j;
              }
          }
        }
}

TEST_F(KernelsX3, ranged_pv_reads_p_only_in_its_columns_and_gives_the_bits_of_all_keys) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(96);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int dv : {16, 40, 128})
    for (int rows : {1, 17, 32, 33, 100, ks.br})
      for (int n : {1, 17, 33, ks.bc, 2 * ks.bc, 4 * ks.bc})
        for (int trial = 0; trial < 3; ++trial) {
          std::ostringstream where;
          where << "rows=" << rows << " n=" << n << " dv=" << dv << " trial " << trial;
          SCOPED_TRACE(where.str());
          const int dv_pad = round_up(dv, ks.w), n_pad = round_up(n, ks.bf16_kpad), p_stride = round_up(n, ks.nr);
          std::vector<int> b, e;
          random_ranges(rng, rows, n, b, e);
          // P in a row's columns (0 at some), NaN outside them: never read.
          std::vector<float> p(static_cast<std::size_t>(rows) * p_stride), p_zero(p.size(), 0.0f);
          std::vector<float> alpha(static_cast<std::size_t>(rows));
          for (int r = 0; r < rows; ++r) {
            alpha[r] = unit(rng);
            for (int j = 0; j < p_stride; ++j) {
              const std::size_t i = static_cast<std::size_t>(r) * p_stride + j;
              const bool in = j >= b[r] && j < e[r];
              p[i] = in ? (unit(rng) < 0.2f ? 0.0f : unit(rng)) : std::numeric_limits<float>::quiet_NaN();
              p_zero[i] = in ? p[i] : 0.0f;
            }
          }
          auto v = random_floats(rng, static_cast<std::size_t>(n) * dv_pad, 0);
          const auto vp = row_pointers(v, n, dv_pad);
          std::vector<std::uint16_t> v3(3u * n_pad * dv_pad);
          ks.pack_v_x3(vp.data(), n, dv, v3.data(), dv_pad);
          const auto acc0 = random_floats(rng, static_cast<std::size_t>(rows) * dv_pad, 0);
          std::vector<float> ranged(acc0), all(acc0);
          ks.pv_x3(p.data(), rows, n, p_stride, v3.data(), dv_pad, ranged.data(), alpha.data(), b.data(), e.data(), work(ks));
          ks.pv_x3(p_zero.data(), rows, n, p_stride, v3.data(), dv_pad, all.data(), alpha.data(), nullptr, nullptr, work(ks));
          for (int r = 0; r < rows; ++r)
            for (int c = 0; c < dv; ++c) {
              const std::size_t i = static_cast<std::size_t>(r) * dv_pad + c;
              ASSERT_TRUE(std::isfinite(ranged[i])) << "row " << r << " column " << c << ": P read outside its columns";
              ASSERT_EQ(ranged[i], all[i]) << "row " << r << " column " << c;
            }
        }
}

TEST_F(KernelsX3, inf_and_nan_reach_the_sums) {
  const cpu::KernelSet& ks = *ks_;
  const int rows = 20, n = 40, d = 48;
  std::mt19937 rng(94);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    const int d2 = round_up(d, ks.bf16_kpad), rows_pad = round_up(rows, ks.bf16_rpad), bc_pad = round_up(n, ks.nr),
              dv_pad = round_up(d, ks.w), n_pad = round_up(n, ks.bf16_kpad);
    const auto q = random_floats(rng, static_cast<std::size_t>(rows) * d, 0);
    auto k = random_floats(rng, static_cast<std::size_t>(n) * d, 0);
    k[5 * d + 7] = bad;  // key 5; also value row 5 below
    const auto kp = row_pointers(k, n, d);
    std::vector<std::uint16_t> q3(3u * rows_pad * d2), kt3(3u * d2 * bc_pad), v3(3u * n_pad * dv_pad);
    std::vector<float> s(static_cast<std::size_t>(rows_pad) * bc_pad);
    ks.pack_q_x3(row_pointers(q, rows, d).data(), rows, d, 1.0f, q3.data());
    ks.pack_kt_x3(kp.data(), n, d, kt3.data(), bc_pad);
    ks.scores_x3(q3.data(), rows, d, kt3.data(), bc_pad, s.data(), nullptr, nullptr);
    for (int r = 0; r < rows; ++r) {
      EXPECT_FALSE(std::isfinite(s[static_cast<std::size_t>(r) * bc_pad + 5])) << "row " << r << " bad " << bad;
      EXPECT_TRUE(std::isfinite(s[static_cast<std::size_t>(r) * bc_pad + 4])) << "row " << r << " bad " << bad;
    }
    std::vector<float> v(static_cast<std::size_t>(n) * dv_pad, 0.5f);
    v[5 * static_cast<std::size_t>(dv_pad) + 7] = bad;
    const auto vp = row_pointers(v, n, dv_pad);
    std::vector<float> p(static_cast<std::size_t>(rows) * bc_pad, 0.25f), acc(static_cast<std::size_t>(rows) * dv_pad, 0.0f);
    ks.pack_v_x3(vp.data(), n, d, v3.data(), dv_pad);
    ks.pv_x3(p.data(), rows, n, bc_pad, v3.data(), dv_pad, acc.data(), nullptr, nullptr, nullptr, work(ks));
    for (int r = 0; r < rows; ++r) {
      EXPECT_FALSE(std::isfinite(acc[static_cast<std::size_t>(r) * dv_pad + 7])) << "row " << r << " bad " << bad;
      EXPECT_EQ(acc[static_cast<std::size_t>(r) * dv_pad + 6], 0.25f * 0.5f * n) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace sdpa
