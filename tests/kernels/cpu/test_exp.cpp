// The fused kernels' vectorized exp, on softmax arguments (x <= 0), against the exactly rounded
// exp computed in long double: within 2 ulp wherever the result is a normal float.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/entry.hpp"

namespace {

// Distance in units in the last place of the exactly rounded reference.
double ulps(float got, long double exact) {
  const float rounded = static_cast<float>(exact);
  const float next = std::nextafter(rounded, INFINITY);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - exact) /
                             (static_cast<long double>(next) - rounded));
}

TEST(ExpSoftmax, WithinTwoUlpOverTheNormalRange) {
  // Every 61st float in [-87, 0]: about 18 million arguments, all binades.
  std::vector<float> x;
  for (std::uint32_t bits = 0x80000000u; bits <= std::bit_cast<std::uint32_t>(-87.0f); bits += 61) {
    x.push_back(std::bit_cast<float>(bits));
  }
  x.push_back(0.0f);
  x.push_back(-87.0f);
  std::vector<float> y(x.size());
  qkv::kernels::cpu::exp_softmax(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0;
  float worst_x = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = ulps(y[i], std::exp(static_cast<long double>(x[i])));
    if (e > worst) {
      worst = e;
      worst_x = x[i];
    }
  }
  std::printf("worst error %.3f ulp at x = %.9g\n", worst, worst_x);
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  EXPECT_GT(y.back(), 0.0f);
  EXPECT_EQ(y[x.size() - 2], 1.0f);  // exp(0) exactly
}

TEST(ExpSoftmax, FarBelowTheRangeIsNegligible) {
  const float x[] = {-88.0f, -100.0f, -1e30f, -INFINITY};
  float y[4];
  qkv::kernels::cpu::exp_softmax(x, y, 4);
  for (const float v : y) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 1.2e-38f);  // at most FLT_MIN: invisible next to a row max's exp(0) = 1
  }
}

}  // namespace
