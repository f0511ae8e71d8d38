// Layer normalization's vector row passes (kernels/cpu/layer_norm.hpp) on every SIMD target this
// CPU runs, against the formulas written element by element in double: rows of lengths with a
// tail on every vector width, with and without the affine weight and bias.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/layer_norm.hpp"
#include "qkv/philox.hpp"

namespace qkv::testing {
namespace {

template <class T>
std::vector<T> normal(std::int64_t n, std::uint64_t seed, double mean) {
  Generator g(seed);
  std::vector<T> x(static_cast<std::size_t>(n));
  for (T& v : x) v = static_cast<T>(mean + g.next_normal());
  return x;
}

template <class T>
void check(std::int64_t n, bool affine) {
  constexpr std::int64_t kRows = 3;
  constexpr double kEps = 1e-5;
  const std::vector<T> x = normal<T>(kRows * n, 1, 3.0), g = normal<T>(kRows * n, 2, 0.0);
  const std::vector<T> w = normal<T>(n, 3, 1.0), b = normal<T>(n, 4, 0.0);
  const T* wp = affine ? w.data() : nullptr;
  const T* bp = affine ? b.data() : nullptr;
  const double tol = 8 * std::numeric_limits<T>::epsilon();
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    std::vector<T> out(x.size()), xhat(x.size()), dx(x.size());
    std::vector<double> rstd(kRows), dw(n, 0.0), db(n, 0.0);
    kernels::cpu::layer_norm_rows(x.data(), kRows, n, wp, bp, kEps, out.data(), xhat.data(),
                                  rstd.data());
    kernels::cpu::layer_norm_backward_rows(g.data(), xhat.data(), wp, rstd.data(), kRows, n,
                                           dx.data(), dw.data(), db.data());
    std::vector<double> dw_ref(n, 0.0), db_ref(n, 0.0);
    for (std::int64_t r = 0; r < kRows; ++r) {
      double mean = 0, var = 0;
      for (std::int64_t j = 0; j < n; ++j) mean += x[r * n + j];
      mean /= n;
      for (std::int64_t j = 0; j < n; ++j) var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
      var /= n;
      const double rs = 1 / std::sqrt(var + kEps);
      ASSERT_NEAR(rstd[r], rs, 1e-14 * rs);
      double m1 = 0, m2 = 0;
      std::vector<double> h(n), dxh(n);
      for (std::int64_t j = 0; j < n; ++j) {
        h[j] = (x[r * n + j] - mean) * rs;
        // Sums in another order move the mean by a few roundings of |x|, which rstd scales.
        const double scale = (std::abs(mean) + std::abs(x[r * n + j] - mean)) * rs;
        ASSERT_NEAR(xhat[r * n + j], h[j], tol * (1 + scale)) << r << " " << j;
        const double o = h[j] * (affine ? w[j] : 1.0) + (affine ? b[j] : 0.0);
        const double terms =
            scale * (affine ? std::abs(w[j]) : 1.0) + (affine ? std::abs(b[j]) : 0);
        ASSERT_NEAR(out[r * n + j], o, tol * (1 + terms)) << r << " " << j;
        dxh[j] = g[r * n + j] * (affine ? w[j] : 1.0);
        m1 += dxh[j] / n;
        m2 += dxh[j] * h[j] / n;
        dw_ref[j] += g[r * n + j] * h[j];
        db_ref[j] += g[r * n + j];
      }
      for (std::int64_t j = 0; j < n; ++j) {
        const double d = rs * (dxh[j] - m1 - h[j] * m2);
        // xhat as stored (and the mean it came from) carries the error above into h m2.
        const double scale = (std::abs(mean) + std::abs(x[r * n + j] - mean)) * rs;
        const double terms =
            std::abs(dxh[j]) + std::abs(m1) + (std::abs(h[j]) + 2 * scale) * std::abs(m2);
        ASSERT_NEAR(dx[r * n + j], d, tol * rs * terms) << r << " " << j;
      }
    }
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_NEAR(dw[j], dw_ref[j], tol * 10) << j;
      EXPECT_NEAR(db[j], db_ref[j], 1e-12) << j;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(LayerNormRows, MatchTheElementwiseFormulasOnEveryTarget) {
  for (const std::int64_t n : {1, 7, 16, 37, 128}) {
    for (const bool affine : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << (affine ? " affine" : ""));
      check<float>(n, affine);
      check<double>(n, affine);
    }
  }
}

}  // namespace
}  // namespace qkv::testing
