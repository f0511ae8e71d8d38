// scaling.hpp against curves whose slopes and crossings are known in closed form.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv_bench/scaling.hpp"

namespace qkv::bench {
namespace {

// ms = c T^p at the given Ts.
Curve power(double c, double p, std::initializer_list<double> ts) {
  Curve curve;
  for (const double t : ts) curve.emplace_back(t, c * std::pow(t, p));
  return curve;
}

TEST(Scaling, SlopeOfAPowerLawIsItsPower) {
  EXPECT_NEAR(loglog_slope(power(3e-3, 1, {1024, 4096, 16384, 65536})), 1.0, 1e-12);
  EXPECT_NEAR(loglog_slope(power(2e-6, 2, {256, 1024, 4096})), 2.0, 1e-12);
  // Only from T = 4096 on: the T^2 head of this curve does not count.
  Curve bent = power(1, 2, {256, 1024});
  for (const auto& p : power(1024, 1, {4096, 16384, 65536})) bent.push_back(p);
  EXPECT_NEAR(loglog_slope(bent, 4096), 1.0, 1e-12);
  EXPECT_TRUE(std::isnan(loglog_slope(power(1, 1, {1024}))));
  EXPECT_TRUE(std::isnan(loglog_slope({{1024, 1.0}, {1024, 2.0}, {0, 3.0}})));
}

TEST(Scaling, CrossoverOfTwoPowerLaws) {
  // a = T / 1000, b = T^2 / 1e6 cross at T = 1000, between the shared Ts 256 and 4096; log-log
  // interpolation between two points of power laws is exact.
  const Curve a = power(1e-3, 1, {256, 4096, 65536}), b = power(1e-6, 2, {256, 4096});
  const Crossover c = crossover(a, b);
  EXPECT_EQ(c.kind, Crossover::Kind::interpolated);
  EXPECT_NEAR(c.t, 1000, 1e-9);
  const Crossover faster = crossover(power(1e-9, 1, {256, 4096}), b);
  EXPECT_EQ(faster.kind, Crossover::Kind::below);
  EXPECT_EQ(faster.t, 256);
  const Crossover slower = crossover(power(1, 1, {256, 4096}), b);
  EXPECT_EQ(slower.kind, Crossover::Kind::above);
  EXPECT_EQ(slower.t, 4096);
  EXPECT_EQ(crossover(power(1, 1, {100}), b).kind, Crossover::Kind::none);
  EXPECT_EQ(kind_name(Crossover::Kind::interpolated), "interpolated");
}

}  // namespace
}  // namespace qkv::bench
