// The fused kernels' vectorized exps, on softmax arguments (x <= 0), against the exp computed in
// long double: exp_softmax within 2 ulp wherever the result is a normal float; exp_for_bf16 (the
// bf16 forward's, whose values are rounded to bf16) within 3.1e-6 relative (its polynomial 2.9e-6,
// the rest the reduction).
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

TEST(ExpForBf16, WithinItsFittedErrorOverTheNormalRange) {
  std::vector<float> x;  // every 61st float in [-87, 0], as above
  for (std::uint32_t bits = 0x80000000u; bits <= std::bit_cast<std::uint32_t>(-87.0f); bits += 61) {
    x.push_back(std::bit_cast<float>(bits));
  }
  x.push_back(0.0f);
  x.push_back(-87.0f);
  std::vector<float> y(x.size());
  qkv::kernels::cpu::exp_for_bf16(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  long double worst = 0;
  float worst_x = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double exact = std::exp(static_cast<long double>(x[i]));
    const long double e = std::fabs(static_cast<long double>(y[i]) / exact - 1);
    if (e > worst) {
      worst = e;
      worst_x = x[i];
    }
  }
  std::printf("worst relative error %.3Lg at x = %.9g\n", worst, worst_x);
  EXPECT_LE(worst, 3.2e-6L) << "at x = " << worst_x;
  EXPECT_EQ(y[x.size() - 2], 1.0f);  // exp(0) exactly: a row's max gives P = 1
  const float far[] = {-88.0f, -100.0f, -1e30f, -INFINITY, NAN};
  float got[5];
  qkv::kernels::cpu::exp_for_bf16(far, got, 5);
  for (int i = 0; i < 4; ++i) {
    EXPECT_GE(got[i], 0.0f);
    EXPECT_LT(got[i], 1.2e-38f);
  }
  EXPECT_EQ(got[3], 0.0f);  // a masked score's -inf is exactly 0
  EXPECT_TRUE(std::isnan(got[4]));
}

}  // namespace
