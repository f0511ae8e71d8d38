// The optimizers' vector loops (kernels/cpu/optimizer_update.hpp) on every SIMD target this CPU
// runs, against the same formulas written element by element in double: lengths that leave a tail
// on every vector width, f32 and f64 parameters.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/optimizer_update.hpp"
#include "qkv/philox.hpp"

namespace qkv::testing {
namespace {

constexpr std::int64_t kN = 1037;  // 64 x 16 + 13

// Values of both signs over several orders of magnitude, some zero.
std::vector<double> values(std::uint64_t seed, double scale) {
  Generator g(seed);
  std::vector<double> x(kN);
  for (std::int64_t i = 0; i < kN; ++i) {
    x[i] = i % 97 == 0 ? 0.0 : scale * g.next_normal() * std::pow(10.0, (i % 7) - 3);
  }
  return x;
}

template <class T>
void check_adamw() {
  kernels::cpu::AdamWConstants c;
  c.decay = 1 - 3e-3 * 0.01;
  c.beta1 = 0.9;
  c.beta2 = 0.98;
  c.step_size = 3e-3 / (1 - std::pow(0.9, 3.0));
  c.bias_correction2_sqrt = std::sqrt(1 - std::pow(0.98, 3.0));
  c.eps = 1e-8;
  const std::vector<double> p0 = values(1, 1), g0 = values(2, 0.1), m0 = values(3, 0.01);
  std::vector<double> v0 = values(4, 1e-4);
  for (double& x : v0) x = std::abs(x);
  int tested = 0;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    std::vector<T> p(p0.begin(), p0.end()), g(g0.begin(), g0.end());
    std::vector<T> m(m0.begin(), m0.end()), v(v0.begin(), v0.end());
    kernels::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), kN, c);
    for (std::int64_t i = 0; i < kN; ++i) {
      double x = static_cast<T>(p0[i]), gr = static_cast<T>(g0[i]);
      x *= c.decay;
      const double m_in = static_cast<T>(m0[i]), v_in = static_cast<T>(v0[i]);
      const double mm = c.beta1 * m_in + (1 - c.beta1) * gr;
      const double vv = c.beta2 * v_in + (1 - c.beta2) * gr * gr;
      const double update = c.step_size * mm / (std::sqrt(vv) / c.bias_correction2_sqrt + c.eps);
      const double decayed = x;
      x -= update;
      // Each result to a few roundings of its terms (a fused multiply-add may round once where
      // the loop above rounds twice; the terms can cancel), then one rounding of T.
      const double eps = std::numeric_limits<T>::epsilon();
      const double m_terms = std::abs(c.beta1 * m_in) + std::abs((1 - c.beta1) * gr);
      ASSERT_NEAR(m[i], mm, eps * std::abs(mm) + 4e-16 * m_terms + 1e-300) << i;
      ASSERT_NEAR(v[i], vv, eps * std::abs(vv) + 4e-16 * std::abs(vv) + 1e-300) << i;
      ASSERT_NEAR(p[i], x,
                  std::numeric_limits<T>::epsilon() * std::abs(x) +
                      4e-16 * (std::abs(decayed) + std::abs(update)))
          << i;
    }
    ++tested;
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(tested, 2) << "expected at least a SIMD target and the scalar fallback";
}

TEST(OptimizerUpdate, AdamWMatchesTheElementwiseRuleOnEveryTarget) {
  check_adamw<float>();
  check_adamw<double>();
}

template <class T>
void check_norm_and_scale() {
  const std::vector<double> x0 = values(5, 1);
  double expected = 0;
  for (const double x : x0) expected += static_cast<double>(static_cast<T>(x)) * static_cast<T>(x);
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    std::vector<T> x(x0.begin(), x0.end());
    for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{17}, kN}) {
      double partial = 0;
      for (std::int64_t i = 0; i < n; ++i) partial += static_cast<double>(x[i]) * x[i];
      EXPECT_NEAR(kernels::cpu::sum_of_squares(x.data(), n), partial, 1e-14 * partial) << n;
    }
    EXPECT_NEAR(kernels::cpu::sum_of_squares(x.data(), kN), expected, 1e-14 * expected);
    kernels::cpu::scale_values(x.data(), kN, 0.375);
    for (std::int64_t i = 0; i < kN; ++i) {
      ASSERT_EQ(x[i], static_cast<T>(static_cast<double>(static_cast<T>(x0[i])) * 0.375)) << i;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(OptimizerUpdate, SumOfSquaresAndScaleMatchTheElementwiseLoopsOnEveryTarget) {
  check_norm_and_scale<float>();
  check_norm_and_scale<double>();
}

}  // namespace
}  // namespace qkv::testing
