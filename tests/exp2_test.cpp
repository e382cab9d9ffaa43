// The kernels' own exp2 against double precision: <= 2 ulp over the range the
// softmax uses ([-126, 0]), -inf -> 0 exactly, NaN -> NaN, and no denormal
// output (t < -126 flushes to 0).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/dispatch.h"
#include "sdpa/attention.h"

namespace sdpa {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Distance in units in the last place of the float nearest to `exact`.
double ulp_error(float got, double exact) {
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(exact)) - 23);
  return std::abs(got - exact) / ulp;
}

class Exp2 : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
  }
};

TEST_P(Exp2, at_most_2_ulp_over_the_range_used) {
  const auto& ks = cpu::kernels_for(GetParam());
  // Every 61st float in [-126, 0]: -0 is 0x80000000, -126 is 0xC2FC0000.
  std::vector<float> x, y;
  for (std::uint32_t u = 0x80000000u; u <= 0xC2FC0000u; u += 61) x.push_back(from_bits(u));
  x.push_back(-126.0f);
  x.push_back(-0.5f);
  x.push_back(0.5f - 1.0f);
  y.resize(x.size());
  ks.exp2(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0;
  float worst_x = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = ulp_error(y[i], std::exp2(static_cast<double>(x[i])));
    if (e > worst) worst = e, worst_x = x[i];
  }
  std::printf("[ %s ] exp2 over %zu points of [-126, 0]: max error %.3f ulp at x = %.9g\n", ks.name, x.size(), worst,
              worst_x);
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  float one[1] = {0.0f}, r[1];
  ks.exp2(one, r, 1);
  EXPECT_EQ(r[0], 1.0f);  // exp(0) is exactly 1: the row max always weighs 1
}

TEST_P(Exp2, special_values) {
  const auto& ks = cpu::kernels_for(GetParam());
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf, std::nanf(""), -126.5f, -127.0f, -200.0f, -1e30f, -0.0f};
  x.resize(24, -inf);  // long enough for the vector path
  x[20] = std::nanf("");
  std::vector<float> y(x.size());
  ks.exp2(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 0.0f);  // would be denormal: flushed
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_TRUE(std::isnan(y[20]));
  for (float v : y) EXPECT_FALSE(std::fpclassify(v) == FP_SUBNORMAL);
}

INSTANTIATE_TEST_SUITE_P(Isa, Exp2, ::testing::ValuesIn(compiled_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace sdpa
