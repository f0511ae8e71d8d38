// The autodiff engine's vector passes (kernels/cpu/elementwise.hpp) on every SIMD target this CPU
// runs, against the scalar rules element by element: lengths with a tail on every vector width,
// negative and positive zeros, NaN and infinities.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "qkv/philox.hpp"

namespace qkv::testing {
namespace {

template <class T>
std::vector<T> inputs(std::int64_t n, std::uint64_t seed) {
  Generator g(seed);
  std::vector<T> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(g.next_normal());
  const T specials[] = {T(0),
                        -T(0),
                        std::numeric_limits<T>::quiet_NaN(),
                        std::numeric_limits<T>::infinity(),
                        -std::numeric_limits<T>::infinity(),
                        std::numeric_limits<T>::denorm_min()};
  for (std::size_t k = 0; k < std::size(specials) && 7 * k < x.size(); ++k) x[7 * k] = specials[k];
  return x;
}

template <class T>
void check_relu() {
  constexpr std::int64_t kN = 83;  // 5 x 16 + 3
  const std::vector<T> x = inputs<T>(kN, 1), g = inputs<T>(kN, 2);
  int tested = 0;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    std::vector<T> y(kN), dx(kN);
    kernels::cpu::relu_values(x.data(), kN, y.data());
    kernels::cpu::relu_grad(g.data(), y.data(), kN, dx.data());
    for (std::int64_t i = 0; i < kN; ++i) {
      const T want = x[i] > 0 ? x[i] : T(0);  // +0 for NaN, -0 and negatives
      EXPECT_EQ(y[i], want) << i;
      EXPECT_FALSE(std::signbit(y[i])) << i;
      const T want_dx = want > 0 ? g[i] : T(0);
      if (std::isnan(want_dx)) {
        EXPECT_TRUE(std::isnan(dx[i])) << i;
      } else {
        EXPECT_EQ(dx[i], want_dx) << i;
      }
    }
    ++tested;
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(tested, 2) << "expected at least a SIMD target and the scalar fallback";
}

TEST(Elementwise, ReluAndItsGradientFollowTheScalarRuleOnEveryTarget) {
  check_relu<float>();
  check_relu<double>();
}

}  // namespace
}  // namespace qkv::testing
