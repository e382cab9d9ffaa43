// Which kernel sets are filled in, and the float32 tile kernels of every
// compiled set that this CPU runs, against each other: scores_ranged (the scores of a tile whose rows see different
// keys) gives scores()' bits wherever a row sees a key, and leaves every
// column vector that no row of its strip sees as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "sdpa/attention.h"

namespace sdpa {
namespace {

int round_up(int x, int m) { return (x + m - 1) / m * m; }

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A set's kernels are there exactly when the CPU runs its ISA: the fill
// function of a set the CPU lacks is never called (it may hold that ISA's
// instructions), so its kernels stay null.
TEST(KernelSets, filled_in_only_where_the_cpu_runs_them) {
  for (Isa isa : compiled_isas()) {
    const cpu::KernelSet& ks = cpu::kernels_for(isa);
    EXPECT_EQ(ks.isa, isa);
    const bool filled = ks.scores && ks.scores_ranged && ks.pv && ks.softmax_step && ks.pack_kt && ks.scale_row &&
                        ks.all_finite && ks.to_f32;
    const bool none = !ks.scores && !ks.scores_ranged && !ks.pv && !ks.softmax_step && !ks.pack_kt &&
                      !ks.scale_row && !ks.all_finite && !ks.to_f32;
    if (isa_supported(isa))
      EXPECT_TRUE(filled) << ks.name;
    else
      EXPECT_TRUE(none) << ks.name << " was filled in on a CPU without it";
  }
}

class KernelsSet : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
    ks_ = &cpu::kernels_for(GetParam());
  }
  const cpu::KernelSet* ks_ = nullptr;
};

// Per-row key ranges of one tile: a causal staircase (several rows per query,
// as grouped heads lay them out), a sliding window, random intervals, and rows
// that see nothing.
void make_ranges(std::mt19937& rng, int kind, int rows, int n, std::vector<int>& b, std::vector<int>& e) {
  b.assign(rows, 0);
  e.assign(rows, 0);
  std::uniform_int_distribution<int> key(0, n);
  const int group = 1 + static_cast<int>(rng() % 4), offset = static_cast<int>(rng() % (n + 1)) - n / 2;
  const int width = 1 + static_cast<int>(rng() % (n + 1));
  for (int r = 0; r < rows; ++r) {
    int lo = 0, hi = 0;
    switch (kind) {
      case 0:  // causal: query r / group sees keys up to offset + r / group
        hi = offset + r / group + 1;
        break;
      case 1:  // window of `width` keys ending at the diagonal
        hi = offset + r / group + 1;
        lo = hi - width;
        break;
      case 2: {
        lo = key(rng);
        hi = key(rng);
        if (lo > hi) std::swap(lo, hi);
        break;
      }
      default:  // mostly empty rows, a few that see one key
        if (rng() % 5 == 0) lo = key(rng) % std::max(n, 1), hi = lo + 1;
        break;
    }
    lo = std::clamp(lo, 0, n);
    hi = std::clamp(hi, 0, n);
    b[r] = lo;
    e[r] = std::max(lo, hi);
  }
}

TEST_P(KernelsSet, scores_ranged_computes_what_rows_see_with_the_bits_of_scores) {
  const cpu::KernelSet& ks = *ks_;
  ASSERT_NE(ks.scores_ranged, nullptr) << ks.name;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  const float kUntouched = -12345.5f;
  const int dims[] = {1, 3, 16, 17, 64, 80, 128};
  for (int trial = 0; trial < 120; ++trial) {
    const int rows = 1 + static_cast<int>(rng() % static_cast<unsigned>(ks.br));
    const int n = 1 + static_cast<int>(rng() % static_cast<unsigned>(ks.bc));
    const int d = dims[rng() % (sizeof dims / sizeof dims[0])];
    const int bc_pad = round_up(n, ks.nr);
    std::vector<float> q(static_cast<std::size_t>(rows) * d), k(static_cast<std::size_t>(n) * d);
    for (auto* x : {&q, &k})
      for (float& v : *x) v = normal(rng);
    std::vector<const float*> kp(n);
    for (int j = 0; j < n; ++j) kp[j] = k.data() + static_cast<std::size_t>(j) * d;
    std::vector<float> kt(static_cast<std::size_t>(d) * bc_pad);
    ks.pack_kt(kp.data(), n, d, kt.data(), bc_pad);
    std::vector<int> b, e;
    make_ranges(rng, trial % 4, rows, n, b, e);

    std::vector<float> full(static_cast<std::size_t>(rows) * bc_pad), part(full.size(), kUntouched);
    ks.scores(q.data(), rows, d, kt.data(), bc_pad, full.data());
    ks.scores_ranged(q.data(), rows, d, kt.data(), bc_pad, part.data(), b.data(), e.data());

    const std::string what = std::string(ks.name) + " trial " + std::to_string(trial) + " rows " +
                             std::to_string(rows) + " n " + std::to_string(n) + " d " + std::to_string(d);
    for (int r0 = 0; r0 < rows; r0 += ks.mr) {
      const int r1 = std::min(rows, r0 + ks.mr);
      // The strip's union of keys, in whole vectors.
      int lo = bc_pad, hi = 0;
      for (int r = r0; r < r1; ++r)
        if (b[r] < e[r]) lo = std::min(lo, b[r]), hi = std::max(hi, e[r]);
      const int v0 = lo / ks.w * ks.w, v1 = std::min(bc_pad, round_up(hi, ks.w));
      for (int r = r0; r < r1; ++r)
        for (int j = 0; j < bc_pad; ++j) {
          const std::size_t at = static_cast<std::size_t>(r) * bc_pad + j;
          if (j >= b[r] && j < e[r]) {
            ASSERT_EQ(bits(part[at]), bits(full[at])) << what << " row " << r << " key " << j;
          } else if (j < v0 || j >= v1) {
            ASSERT_EQ(bits(part[at]), bits(kUntouched)) << what << " row " << r << " key " << j << " was written";
          }
        }
    }
  }
}

// softmax_step over per-row column spans: on rows whose entries outside
// their span are -inf, the same bits as over whole rows (in s, m, l and
// alpha), and nothing outside a span is read or written.
TEST_P(KernelsSet, softmax_step_on_column_spans_gives_the_bits_of_whole_rows) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const float kGarbage = std::numeric_limits<float>::quiet_NaN();
  for (int trial = 0; trial < 200; ++trial) {
    const int rows = 1 + static_cast<int>(rng() % static_cast<unsigned>(ks.br));
    const int n = 1 + static_cast<int>(rng() % static_cast<unsigned>(ks.bc));
    const int bc_pad = round_up(n, ks.nr);
    std::vector<int> b, e, cb(rows), ce(rows);
    make_ranges(rng, trial % 4, rows, n, b, e);
    std::vector<float> whole(static_cast<std::size_t>(rows) * bc_pad), spans(whole.size());
    std::vector<float> m0(rows), l0(rows);
    for (int r = 0; r < rows; ++r) {
      // A span of whole vectors around the row's range, sometimes wider, sometimes empty.
      const int lo = std::max(0, b[r] / ks.w * ks.w - (rng() % 3 == 0 ? ks.w : 0));
      const int hi = std::min(bc_pad, round_up(e[r], ks.w) + (rng() % 3 == 0 ? ks.w : 0));
      cb[r] = lo;
      ce[r] = std::max(lo, hi);
      if (b[r] == e[r] && rng() % 2 == 0) cb[r] = ce[r] = 0;
      // Rows that have seen keys before (m finite) and rows still empty.
      m0[r] = rng() % 3 == 0 ? kNegInf : normal(rng);
      l0[r] = m0[r] == kNegInf ? 0.0f : 1.0f + std::abs(normal(rng));
      for (int j = 0; j < bc_pad; ++j) {
        const std::size_t at = static_cast<std::size_t>(r) * bc_pad + j;
        whole[at] = j >= b[r] && j < e[r] ? 3.0f * normal(rng) : kNegInf;
        spans[at] = j >= cb[r] && j < ce[r] ? whole[at] : kGarbage;
      }
    }
    std::vector<float> m1 = m0, l1 = l0, a1(rows), m2 = m0, l2 = l0, a2(rows);
    const std::vector<float> before = spans;
    ks.softmax_step(whole.data(), rows, bc_pad, m1.data(), l1.data(), a1.data(), nullptr, nullptr);
    ks.softmax_step(spans.data(), rows, bc_pad, m2.data(), l2.data(), a2.data(), cb.data(), ce.data());
    const std::string what = std::string(ks.name) + " trial " + std::to_string(trial);
    for (int r = 0; r < rows; ++r) {
      ASSERT_EQ(bits(m1[r]), bits(m2[r])) << what << " m of row " << r;
      ASSERT_EQ(bits(l1[r]), bits(l2[r])) << what << " l of row " << r;
      ASSERT_EQ(bits(a1[r]), bits(a2[r])) << what << " alpha of row " << r;
      for (int j = 0; j < bc_pad; ++j) {
        const std::size_t at = static_cast<std::size_t>(r) * bc_pad + j;
        if (j >= cb[r] && j < ce[r])
          ASSERT_EQ(bits(spans[at]), bits(whole[at])) << what << " row " << r << " key " << j;
        else
          ASSERT_EQ(bits(spans[at]), bits(before[at])) << what << " row " << r << " key " << j << " was written";
      }
    }
  }
}

// scale_row writes float(double(x) * inv) for every column and says whether
// the row held only finite values, whatever the row's length and wherever
// an Inf or NaN sits (the driver recomputes such rows in float64).
TEST_P(KernelsSet, scale_row_gives_the_scalar_bits_and_whether_the_row_was_finite) {
  const cpu::KernelSet& ks = *ks_;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    std::vector<float> x(n), out(n + 1, 7.0f);
    for (float& v : x) v = 1e30f * normal(rng);
    const int bad_at = trial % 3 == 0 ? static_cast<int>(rng() % n) : -1;
    if (bad_at >= 0) x[bad_at] = specials[trial % 4];
    const double inv = trial % 7 == 0 ? 0.0 : 1.0 / (1.0 + std::abs(normal(rng)) * 1e3);
    const bool finite = ks.scale_row(x.data(), n, inv, out.data());
    const std::string what = std::string(ks.name) + " n=" + std::to_string(n) + " bad at " + std::to_string(bad_at);
    EXPECT_EQ(finite, bad_at < 0) << what;
    for (int c = 0; c < n; ++c)
      ASSERT_EQ(bits(out[c]), bits(static_cast<float>(static_cast<double>(x[c]) * inv))) << what << " column " << c;
    EXPECT_EQ(bits(out[n]), bits(7.0f)) << what << " wrote past n";
  }
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

INSTANTIATE_TEST_SUITE_P(Isa, KernelsSet, ::testing::ValuesIn(compiled_isas()), isa_param_name);

}  // namespace
}  // namespace sdpa
