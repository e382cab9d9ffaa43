// The bfloat16 kernels (KernelSet's *_bf16 members) of every set that has
// them (avx512bf16, amx) against float64 on the same bf16 values: packing
// layouts exactly, with the set's padding (bf16_kpad, bf16_rpad) zero-filled
// and nothing written past it, scores_bf16 and pv_bf16 within the float32
// dot-product bound, pv_bf16's rounding of P to nearest even on hand-picked
// values, the same results from any thread, and the set's float32 kernels bit
// for bit against the avx512 set they are copied from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cpu/dispatch.h"
#include "sdpa/attention.h"

namespace sdpa {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();  // 2^-23

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bf16_to_float(std::uint16_t b) { return from_bits(std::uint32_t{b} << 16); }

// Round to nearest even, as vcvtne2ps2bf16 does for normal finite values.
std::uint16_t round_bf16(float f) {
  const std::uint32_t u = to_bits(f);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

bool has_bf16(const cpu::KernelSet& ks) {
  return ks.pack_q_bf16 || ks.pack_kt_bf16 || ks.scores_bf16 || ks.pack_v_bf16 || ks.pv_bf16;
}

// The sets with bf16 kernels.
bool is_bf16_isa(Isa isa) { return isa == Isa::avx512bf16 || isa == Isa::amx; }

std::vector<Isa> bf16_isas() {
  std::vector<Isa> out;
  for (Isa isa : compiled_isas())
    if (is_bf16_isa(isa)) out.push_back(isa);
  return out;
}

TEST(KernelsBf16, only_the_bf16_sets_have_them_and_then_all_of_them) {
  for (Isa isa : compiled_isas()) {
    if (!isa_supported(isa)) continue;  // not filled in (kernels_test)
    const cpu::KernelSet& ks = cpu::kernels_for(isa);
    const bool all = ks.pack_q_bf16 && ks.pack_kt_bf16 && ks.scores_bf16 && ks.pack_v_bf16 && ks.pv_bf16;
    EXPECT_EQ(has_bf16(ks), all) << ks.name;
    EXPECT_EQ(has_bf16(ks), is_bf16_isa(isa)) << ks.name;
  }
}

// What the driver relies on: pairs are whole, a block's rows and a tile's
// keys (bc, and any bc_pad, a multiple of nr) are whole multiples of the pads.
TEST(KernelsBf16, padding_fits_the_tiling) {
  for (Isa isa : bf16_isas()) {
    if (!isa_supported(isa)) continue;
    const cpu::KernelSet& ks = cpu::kernels_for(isa);
    EXPECT_TRUE(ks.bf16_kpad >= 2 && ks.bf16_kpad % 2 == 0) << ks.name << " kpad " << ks.bf16_kpad;
    EXPECT_GE(ks.bf16_rpad, 1) << ks.name;
    EXPECT_EQ(ks.br % ks.bf16_rpad, 0) << ks.name;
    EXPECT_EQ(ks.bc % ks.bf16_kpad, 0) << ks.name;
  }
  if (!bf16_isas().empty() && bf16_isas().back() == Isa::amx && isa_supported(Isa::amx)) {
    const cpu::KernelSet& ks = cpu::kernels_for(Isa::amx);
    EXPECT_EQ(ks.bf16_kpad, 32);
    EXPECT_EQ(ks.bf16_rpad, 16);
    EXPECT_TRUE(ks.bf16_fast);
  }
}

TEST(KernelsBf16, isa_names_round_trip) {
  EXPECT_STREQ(isa_name(Isa::avx512bf16), "avx512bf16");
  EXPECT_EQ(parse_isa("avx512bf16"), Isa::avx512bf16);
  EXPECT_STREQ(isa_name(Isa::amx), "amx");
  EXPECT_EQ(parse_isa("amx"), Isa::amx);
}

// One set with bf16 kernels, where the CPU runs it.
class KernelsBf16Set : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
    ks_ = &cpu::kernels_for(GetParam());
  }
  const cpu::KernelSet* ks_ = nullptr;
};

// Random bf16 values: normal floats rounded to bf16.
std::vector<std::uint16_t> random_bf16(std::mt19937& rng, std::size_t count) {
  std::normal_distribution<float> normal;
  std::vector<std::uint16_t> x(count);
  for (auto& e : x) e = round_bf16(normal(rng));
  return x;
}

std::vector<const std::uint16_t*> row_pointers(const std::vector<std::uint16_t>& x, int rows, int cols) {
  std::vector<const std::uint16_t*> p(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) p[r] = x.data() + static_cast<std::size_t>(r) * cols;
  return p;
}

const int kDims[] = {1, 3, 16, 31, 32, 33, 63, 64, 80, 128};

// Row and key counts: 1, around the units (MR, NR, tiles), the tile's edges,
// and random ones.
std::vector<int> sizes_around(std::mt19937& rng, std::initializer_list<int> units, int max) {
  std::vector<int> v = {1, 2, max - 1, max};
  for (int unit : units)
    for (int x : {unit - 1, unit, unit + 1}) v.push_back(x);
  std::uniform_int_distribution<int> any(1, max);
  for (int i = 0; i < 3; ++i) v.push_back(any(rng));
  std::vector<int> out;
  for (int x : v)
    if (x >= 1 && x <= max) out.push_back(x);
  return out;
}

// Guards after each buffer a kernel writes: NaN bits it must leave alone.
constexpr std::uint16_t kGuard16 = 0x7FC1;
constexpr std::uint32_t kGuard32 = 0x7FC00123u;
constexpr std::size_t kGuardElems = 64;

// Checks that the guard after the first `size` elements of x is intact.
template <typename T>
::testing::AssertionResult guard_intact(const std::vector<T>& x, std::size_t size, T guard, const char* what) {
  for (std::size_t i = size; i < x.size(); ++i) {
    T got = x[i];
    if (std::memcmp(&got, &guard, sizeof(T)) != 0)
      return ::testing::AssertionFailure() << what << ": written past its end, at element " << i - size;
  }
  return ::testing::AssertionSuccess();
}

TEST_P(KernelsBf16Set, scores_within_the_float32_dot_bound) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(20240611);
  double worst_ratio = 0;
  for (int d : kDims) {
    // Rows around MR (6) and the tile height (16); keys around NR/4 and a tile's 32.
    const std::vector<int> rows_list = sizes_around(rng, {6, 16, 32}, ks.br),
                           n_list = sizes_around(rng, {ks.nr / 4, 32}, ks.bc);
    for (std::size_t t = 0; t < rows_list.size(); ++t) {
      const int rows = rows_list[t], n = n_list[t % n_list.size()];
      const int d2 = round_up(d, ks.bf16_kpad), rows_pad = round_up(rows, ks.bf16_rpad), bc_pad = round_up(n, ks.nr);
      const float scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d)));
      std::ostringstream where;
      where << ks.name << " rows=" << rows << " n=" << n << " d=" << d;
      SCOPED_TRACE(where.str());
      const auto q = random_bf16(rng, static_cast<std::size_t>(rows) * d);
      const auto k = random_bf16(rng, static_cast<std::size_t>(n) * d);
      const auto qp = row_pointers(q, rows, d), kp = row_pointers(k, n, d);
      // Garbage where the kernels must write, guards past what they may write.
      const std::size_t q2_size = static_cast<std::size_t>(rows_pad) * d2,
                        kt2_size = static_cast<std::size_t>(d2 / 2) * 2 * bc_pad,
                        s_size = static_cast<std::size_t>(rows_pad) * bc_pad;
      std::vector<std::uint16_t> q2(q2_size + kGuardElems, kGuard16), kt2(kt2_size + kGuardElems, kGuard16);
      std::vector<float> s(s_size + kGuardElems, from_bits(kGuard32));
      ks.pack_q_bf16(qp.data(), rows, d, q2.data());
      ks.pack_kt_bf16(kp.data(), n, d, kt2.data(), bc_pad);
      ASSERT_TRUE(guard_intact(q2, q2_size, kGuard16, "q2"));
      ASSERT_TRUE(guard_intact(kt2, kt2_size, kGuard16, "kt2"));
      for (int r = 0; r < rows_pad; ++r)
        for (int c = 0; c < d2; ++c)
          ASSERT_EQ(q2[static_cast<std::size_t>(r) * d2 + c],
                    r < rows && c < d ? q[static_cast<std::size_t>(r) * d + c] : 0)
              << "q2 at r=" << r << " c=" << c;
      for (int c2 = 0; c2 < d2 / 2; ++c2)
        for (int j = 0; j < bc_pad; ++j)
          for (int h = 0; h < 2; ++h) {
            const int c = 2 * c2 + h;
            const std::uint16_t want = j < n && c < d ? k[static_cast<std::size_t>(j) * d + c] : 0;
            ASSERT_EQ(kt2[2 * (static_cast<std::size_t>(c2) * bc_pad + j) + h], want)
                << "kt2 at c2=" << c2 << " j=" << j << " half " << h;
          }
      ks.scores_bf16(q2.data(), rows, d, kt2.data(), bc_pad, scale, s.data());
      ASSERT_TRUE(guard_intact(s, s_size, from_bits(kGuard32), "S"));
      for (int r = 0; r < rows_pad; ++r)
        for (int j = 0; j < bc_pad; ++j) {
          const float got = s[static_cast<std::size_t>(r) * bc_pad + j];
          if (j >= n || r >= rows) {
            // Zero keys, or zero rows of q2's padding.
            ASSERT_EQ(got, 0.0f) << "padded key j=" << j << " or row " << r;
            continue;
          }
          double dot = 0, mag = 0;
          for (int c = 0; c < d; ++c) {
            const double a = bf16_to_float(q[static_cast<std::size_t>(r) * d + c]);
            const double b = bf16_to_float(k[static_cast<std::size_t>(j) * d + c]);
            dot += a * b;
            mag += std::abs(a * b);
          }
          const double want = dot * scale;
          // A float32 sum of d exact products, then one product by the scale,
          // errs by at most (d + 1)·u·scale·Σ|q_c·k_c| (u = eps/2; Higham,
          // recursive summation); the blocked sum's bound is smaller. The
          // bound used: d·eps·scale·Σ|q_c·k_c| = 2d·u·..., >= (d + 1)·u·... for d >= 1.
          const double bound = d * kEps * scale * mag;
          const double err = std::abs(got - want);
          ASSERT_LE(err, bound) << "row " << r << " key " << j << ": got " << got << ", want " << want;
          if (bound > 0) worst_ratio = std::max(worst_ratio, err / bound);
        }
    }
  }
  std::printf("[ %s ] scores_bf16: worst error %.3g of the bound d*eps*scale*sum|q*k|\n", ks.name, worst_ratio);
}

TEST_P(KernelsBf16Set, pv_within_the_float32_bound_with_p_rounded) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  double worst_ratio = 0;
  int variant = 0;
  for (int dv : kDims) {
    const std::vector<int> rows_list = sizes_around(rng, {6, 16, 32}, ks.br),
                           n_list = sizes_around(rng, {ks.nr / 4, 32}, ks.bc);
    for (std::size_t t = 0; t < rows_list.size(); ++t, ++variant) {
      const int rows = rows_list[t], n = n_list[(t + 3) % n_list.size()];
      const int dv_pad = round_up(dv, ks.w), p_stride = round_up(n, ks.nr), n2 = round_up(n, ks.bf16_kpad) / 2;
      // alpha: per-row values, nullptr (1), or all 0 (the accumulator dropped).
      const int alpha_kind = variant % 3;
      std::ostringstream where;
      where << ks.name << " rows=" << rows << " n=" << n << " dv=" << dv << " alpha="
            << (alpha_kind == 0   ? "random"
                : alpha_kind == 1 ? "nullptr"
                                  : "0");
      SCOPED_TRACE(where.str());
      const auto v = random_bf16(rng, static_cast<std::size_t>(n) * dv);
      const auto vp = row_pointers(v, n, dv);
      const std::size_t v2_size = static_cast<std::size_t>(n2) * 2 * dv_pad;
      std::vector<std::uint16_t> v2(v2_size + kGuardElems, kGuard16);
      ks.pack_v_bf16(vp.data(), n, dv, v2.data(), dv_pad);
      ASSERT_TRUE(guard_intact(v2, v2_size, kGuard16, "v2"));
      for (int j2 = 0; j2 < n2; ++j2)
        for (int c = 0; c < dv_pad; ++c)
          for (int h = 0; h < 2; ++h) {
            const int j = 2 * j2 + h;
            const std::uint16_t want = j < n && c < dv ? v[static_cast<std::size_t>(j) * dv + c] : 0;
            ASSERT_EQ(v2[2 * (static_cast<std::size_t>(j2) * dv_pad + c) + h], want)
                << "v2 at j2=" << j2 << " c=" << c << " half " << h;
          }
      // P past n is NaN: the kernel must not read it.
      std::vector<float> p(static_cast<std::size_t>(rows) * p_stride, std::nanf(""));
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < n; ++j) p[static_cast<std::size_t>(r) * p_stride + j] = unit(rng);
      // acc has `rows` rows: the guard stands where a tile's further rows would be.
      const std::size_t acc_size = static_cast<std::size_t>(rows) * dv_pad;
      std::vector<float> acc(acc_size + 16 * static_cast<std::size_t>(dv_pad), from_bits(kGuard32)),
          alpha(static_cast<std::size_t>(rows), 0.0f);
      std::normal_distribution<float> normal;
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < dv_pad; ++c) acc[static_cast<std::size_t>(r) * dv_pad + c] = c < dv ? normal(rng) : 0.0f;
        if (alpha_kind == 0) alpha[r] = unit(rng);
      }
      const std::vector<float> acc0 = acc;
      ks.pv_bf16(p.data(), rows, n, p_stride, v2.data(), dv_pad, acc.data(), alpha_kind == 1 ? nullptr : alpha.data());
      ASSERT_TRUE(guard_intact(acc, acc_size, from_bits(kGuard32), "acc"));
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < dv_pad; ++c) {
          const std::size_t at = static_cast<std::size_t>(r) * dv_pad + c;
          const double a = alpha_kind == 1 ? 1.0 : alpha[r];
          if (c >= dv) {
            ASSERT_EQ(acc[at], 0.0f) << "padded column c=" << c << " row " << r;
            continue;
          }
          double want = acc0[at] * a, mag = std::abs(want);
          for (int j = 0; j < n; ++j) {
            const double pj = bf16_to_float(round_bf16(p[static_cast<std::size_t>(r) * p_stride + j]));
            const double x = pj * bf16_to_float(v[static_cast<std::size_t>(j) * dv + c]);
            want += x;
            mag += std::abs(x);
          }
          // One rounding of acc·alpha and n float32 additions of exact
          // products: (n + 1)·u·(|acc·alpha| + Σ|p_j·v_j|) (u = eps/2); bound
          // used: (n + 1)·eps·(...), twice that.
          const double bound = (n + 1) * kEps * mag;
          const double err = std::abs(acc[at] - want);
          ASSERT_LE(err, bound) << "row " << r << " column " << c << ": got " << acc[at] << ", want " << want;
          if (bound > 0) worst_ratio = std::max(worst_ratio, err / bound);
        }
    }
  }
  std::printf("[ %s ] pv_bf16: worst error %.3g of the bound (n+1)*eps*(|acc*alpha| + sum|p*v|)\n", ks.name,
              worst_ratio);
}

// P -> bf16 is round to nearest, ties to even, at either half of a pair:
// with V = 1 and acc = 0 the result is the rounded P exactly.
TEST_P(KernelsBf16Set, pv_rounds_p_to_nearest_even) {
  const cpu::KernelSet& ks = *ks_;
  struct Case {
    std::uint32_t p;     // float32 bits
    std::uint16_t want;  // bf16 bits
  };
  const Case cases[] = {
      {0x3F800000u, 0x3F80},  // 1: exact
      {0x3F808000u, 0x3F80},  // 1 + 2^-8: a tie, to the even 1
      {0x3F818000u, 0x3F82},  // 1 + 3·2^-8: a tie, to the even 1 + 2^-6
      {0x3F808001u, 0x3F81},  // just above a tie: up
      {0x3F817FFFu, 0x3F81},  // just below a tie: down
      {0x3F7FFFFFu, 0x3F80},  // just below 1: up, into the next binade
      {0x3EAAAAABu, 0x3EAB},  // 1/3
      {0xBF818000u, 0xBF82},  // -(1 + 3·2^-8): ties to even by magnitude
      {0x0C808000u, 0x0C80},  // a small normal tie
      {0x7F7FFFFFu, 0x7F80},  // FLT_MAX: rounds to +inf
      {0x00000000u, 0x0000},  // 0
  };
  const int dv = 16, dv_pad = 16;
  std::vector<std::uint16_t> zeros(dv, 0), ones(dv, 0x3F80),
      v2(static_cast<std::size_t>(round_up(2, ks.bf16_kpad)) * dv_pad);
  for (const Case& cs : cases) {
    ASSERT_EQ(round_bf16(from_bits(cs.p)), cs.want) << "the test's own rounding, p bits " << std::hex << cs.p;
    for (int half = 0; half < 2; ++half) {
      // half 0: n = 1, P = {p}, V = {1}; half 1: n = 2, P = {0, p}, V = {0, 1}.
      const int n = half + 1;
      const std::uint16_t* rows[2] = {half ? zeros.data() : ones.data(), ones.data()};
      ks.pack_v_bf16(rows, n, dv, v2.data(), dv_pad);
      const float p[2] = {half ? 0.0f : from_bits(cs.p), from_bits(cs.p)};
      std::vector<float> acc(dv_pad, 0.0f);
      ks.pv_bf16(p, 1, n, 2, v2.data(), dv_pad, acc.data(), nullptr);
      for (int c = 0; c < dv; ++c)
        ASSERT_EQ(to_bits(acc[c]), std::uint32_t{cs.want} << 16)
            << "p bits " << std::hex << cs.p << " at pair half " << half << ", column " << std::dec << c << ": got "
            << acc[c];
    }
  }
}

// The kernels hold no per-thread state a caller must set up (AMX: the tile
// configuration): fresh threads, running them at once and interleaved with
// each other, get the bits the calling thread gets.
TEST_P(KernelsBf16Set, same_results_on_any_thread) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(11);
  const int rows = 77, n = 45, d = 80, dv = 80;
  const int d2 = round_up(d, ks.bf16_kpad), rows_pad = round_up(rows, ks.bf16_rpad), bc_pad = round_up(n, ks.nr),
            dv_pad = round_up(dv, ks.w), n2 = round_up(n, ks.bf16_kpad) / 2;
  const auto q = random_bf16(rng, static_cast<std::size_t>(rows) * d),
             k = random_bf16(rng, static_cast<std::size_t>(n) * d),
             v = random_bf16(rng, static_cast<std::size_t>(n) * dv);
  const auto qp = row_pointers(q, rows, d), kp = row_pointers(k, n, d), vp = row_pointers(v, n, dv);
  std::vector<std::uint16_t> q2(static_cast<std::size_t>(rows_pad) * d2), kt2(static_cast<std::size_t>(d2) * bc_pad),
      v2(static_cast<std::size_t>(n2) * 2 * dv_pad);
  ks.pack_q_bf16(qp.data(), rows, d, q2.data());
  ks.pack_kt_bf16(kp.data(), n, d, kt2.data(), bc_pad);
  ks.pack_v_bf16(vp.data(), n, dv, v2.data(), dv_pad);
  std::vector<float> alpha(rows);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (float& a : alpha) a = unit(rng);
  struct Out {
    std::vector<float> s, acc;
  };
  // Scores, their rows as P (0..1 after a squash), then P·V twice: repeated
  // calls on one thread must not depend on what ran before.
  auto run = [&] {
    Out o{std::vector<float>(static_cast<std::size_t>(rows_pad) * bc_pad),
          std::vector<float>(static_cast<std::size_t>(rows) * dv_pad, 0.25f)};
    ks.scores_bf16(q2.data(), rows, d, kt2.data(), bc_pad, 0.125f, o.s.data());
    std::vector<float> p(o.s.size());
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = 1.0f / (1.0f + std::abs(o.s[i]));
    for (int rep = 0; rep < 2; ++rep)
      ks.pv_bf16(p.data(), rows, n, bc_pad, v2.data(), dv_pad, o.acc.data(), alpha.data());
    return o;
  };
  const Out want = run();
  constexpr int kThreads = 4;
  std::vector<Out> got(kThreads);
  std::vector<std::thread> pool;
  for (int i = 0; i < kThreads; ++i)
    pool.emplace_back([&, i] {
      for (int rep = 0; rep < 3; ++rep) got[i] = run();
    });
  for (auto& th : pool) th.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(std::memcmp(got[i].s.data(), want.s.data(), want.s.size() * sizeof(float)), 0) << "S, thread " << i;
    EXPECT_EQ(std::memcmp(got[i].acc.data(), want.acc.data(), want.acc.size() * sizeof(float)), 0)
        << "acc, thread " << i;
  }
}

// The set's float32 kernels are the avx512 set's, compiled with more flags:
// the same bits on the same inputs.
TEST_P(KernelsBf16Set, float32_kernels_match_the_avx512_set_bitwise) {
  if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "CPU lacks avx512";
  const cpu::KernelSet& a = cpu::kernels_for(Isa::avx512);
  const cpu::KernelSet& b = *ks_;
  // Tiles of as many keys (a block's rows change no row's result, so BR
  // may differ).
  ASSERT_EQ(a.bc, b.bc);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int rows = 97, n = 61, d = 80, bc_pad = round_up(n, a.nr), dv_pad = round_up(d, a.w);
  std::vector<float> q(static_cast<std::size_t>(rows) * d), k(static_cast<std::size_t>(n) * d),
      v(static_cast<std::size_t>(n) * dv_pad);
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);
  std::vector<const float*> kp(n), vp(n);
  for (int j = 0; j < n; ++j) kp[j] = k.data() + j * d, vp[j] = v.data() + j * dv_pad;
  struct Out {
    std::vector<float> kt, s, m, l, alpha, acc;
  };
  auto run = [&](const cpu::KernelSet& ks) {
    Out o{std::vector<float>(static_cast<std::size_t>(d) * bc_pad),
          std::vector<float>(static_cast<std::size_t>(rows) * bc_pad),
          std::vector<float>(rows, -std::numeric_limits<float>::infinity()),
          std::vector<float>(rows, 0.0f),
          std::vector<float>(rows),
          std::vector<float>(static_cast<std::size_t>(rows) * dv_pad, 0.5f)};
    ks.pack_kt(kp.data(), n, d, o.kt.data(), bc_pad);
    ks.scores(q.data(), rows, d, o.kt.data(), bc_pad, o.s.data());
    for (int r = 0; r < rows; ++r)
      for (int j = n; j < bc_pad; ++j)
        o.s[static_cast<std::size_t>(r) * bc_pad + j] = -std::numeric_limits<float>::infinity();
    ks.softmax_step(o.s.data(), rows, bc_pad, o.m.data(), o.l.data(), o.alpha.data(), nullptr, nullptr);
    ks.pv(o.s.data(), rows, n, bc_pad, vp.data(), dv_pad, o.acc.data(), o.alpha.data(), nullptr, nullptr, 0);
    return o;
  };
  const Out x = run(a), y = run(b);
  auto same_bits = [](const std::vector<float>& u, const std::vector<float>& w) {
    return u.size() == w.size() && std::memcmp(u.data(), w.data(), u.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_bits(x.kt, y.kt)) << "pack_kt";
  EXPECT_TRUE(same_bits(x.s, y.s)) << "scores, softmax_step";
  EXPECT_TRUE(same_bits(x.m, y.m) && same_bits(x.l, y.l) && same_bits(x.alpha, y.alpha)) << "softmax_step";
  EXPECT_TRUE(same_bits(x.acc, y.acc)) << "pv";
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

INSTANTIATE_TEST_SUITE_P(Isa, KernelsBf16Set, ::testing::ValuesIn(bf16_isas()), isa_param_name);
// A build without x86 kernels has none of these sets.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(KernelsBf16Set);

}  // namespace
}  // namespace sdpa
