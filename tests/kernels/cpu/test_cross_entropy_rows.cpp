// Cross entropy's vector row passes (kernels/cpu/cross_entropy.hpp) on every SIMD target this CPU
// runs, against softmax and the smoothed negative log-likelihood written element by element in
// double from std::exp and std::log: rows with a tail on every vector width, an ignored row, and
// rows holding -inf, +inf and NaN.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/cross_entropy.hpp"
#include "qkv/philox.hpp"

namespace qkv::testing {
namespace {

constexpr std::int64_t kIgnore = -100;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The formulas of PyTorch's F.cross_entropy for one row, from softmax probabilities.
struct RowReference {
  std::vector<double> p;
  double loss = 0;
};

template <class T>
RowReference reference_row(const T* x, std::int64_t C, std::int64_t t, double eps) {
  RowReference r;
  double m = -kInf;
  for (std::int64_t c = 0; c < C; ++c) m = std::fmax(m, x[c]);
  double z = 0;
  for (std::int64_t c = 0; c < C; ++c) z += std::exp(x[c] - m);
  double smooth = 0;
  for (std::int64_t c = 0; c < C; ++c) {
    r.p.push_back(std::exp(x[c] - m) / z);
    smooth += std::log(r.p.back());
  }
  r.loss = -(1 - eps) * std::log(r.p[t]) - (eps > 0 ? eps / C * smooth : 0.0);
  return r;
}

template <class T>
void check(std::int64_t C, double eps) {
  constexpr std::int64_t kRows = 4;
  Generator g(static_cast<std::uint64_t>(C) * 31 + 7);
  std::vector<T> x(kRows * C);
  for (T& v : x) v = static_cast<T>(4 * g.next_normal());
  // Row 1 is ignored; the others aim at their first, last and a middle class.
  const std::vector<std::int64_t> targets = {0, kIgnore, C - 1, C / 2};
  const double dloss = 0.75, scale = dloss / 3;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    std::vector<double> p(x.size(), -1.0), loss(kRows, -1.0);
    std::vector<T> dx(x.size(), T(-1));
    kernels::cpu::cross_entropy_rows(x.data(), kRows, C, targets.data(), kIgnore, eps, p.data(),
                                     loss.data());
    kernels::cpu::cross_entropy_backward_rows(p.data(), kRows, C, targets.data(), kIgnore, eps,
                                              scale, dx.data());
    for (std::int64_t n = 0; n < kRows; ++n) {
      if (targets[n] == kIgnore) {
        EXPECT_EQ(loss[n], 0.0);
        for (std::int64_t c = 0; c < C; ++c) ASSERT_EQ(dx[n * C + c], T(0)) << c;
        continue;
      }
      const RowReference r = reference_row(x.data() + n * C, C, targets[n], eps);
      EXPECT_NEAR(loss[n], r.loss, 1e-13 * (1 + std::abs(r.loss))) << "row " << n;
      for (std::int64_t c = 0; c < C; ++c) {
        ASSERT_NEAR(p[n * C + c], r.p[c], 1e-14 * r.p[c] + 1e-300) << n << " " << c;
        const double d = scale * (r.p[c] - ((c == targets[n] ? 1 - eps : 0.0) + eps / C));
        // dx in T: one rounding of the double result.
        ASSERT_NEAR(dx[n * C + c], d, 2 * std::numeric_limits<T>::epsilon() * std::abs(d) + 1e-15)
            << n << " " << c;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(CrossEntropyRows, MatchTheElementwiseFormulasOnEveryTarget) {
  for (const std::int64_t C : {1, 7, 16, 37, 300}) {
    for (const double eps : {0.0, 0.1, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "C " << C << " eps " << eps);
      check<float>(C, eps);
      check<double>(C, eps);
    }
  }
}

// A -inf logit outside the target costs nothing without smoothing and makes the smoothed loss
// +inf; +inf or NaN in a row makes its probabilities and loss NaN (PyTorch's results).
TEST(CrossEntropyRows, NonFiniteLogitsGiveWhatPyTorchGives) {
  constexpr std::int64_t C = 21;  // vectors and a tail on every width
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    for (const std::int64_t at : {std::int64_t{3}, C - 1}) {
      std::vector<double> x(C);
      for (std::int64_t c = 0; c < C; ++c) x[c] = 0.1 * static_cast<double>(c % 5);
      const std::vector<std::int64_t> t = {at == 3 ? 4 : 2};
      std::vector<double> p(C), loss(1), finite_p(C), finite_loss(1);
      // Without the -inf entry, renormalized: the same loss when eps is 0.
      std::vector<double> rest;
      for (std::int64_t c = 0; c < C; ++c) {
        if (c != at) rest.push_back(x[c]);
      }
      const std::int64_t rest_t = t[0] < at ? t[0] : t[0] - 1;
      x[at] = -kInf;
      kernels::cpu::cross_entropy_rows(x.data(), 1, C, t.data(), kIgnore, 0.0, p.data(),
                                       loss.data());
      kernels::cpu::cross_entropy_rows(rest.data(), 1, C - 1, &rest_t, kIgnore, 0.0,
                                       finite_p.data(), finite_loss.data());
      EXPECT_NEAR(loss[0], finite_loss[0], 1e-15) << at;
      EXPECT_EQ(p[at], 0.0);
      kernels::cpu::cross_entropy_rows(x.data(), 1, C, t.data(), kIgnore, 0.1, p.data(),
                                       loss.data());
      EXPECT_EQ(loss[0], kInf) << at;
      for (const double bad : {kInf, std::numeric_limits<double>::quiet_NaN()}) {
        x[at] = bad;
        kernels::cpu::cross_entropy_rows(x.data(), 1, C, t.data(), kIgnore, 0.0, p.data(),
                                         loss.data());
        EXPECT_TRUE(std::isnan(loss[0])) << at << " " << bad;
        for (std::int64_t c = 0; c < C; ++c) EXPECT_TRUE(std::isnan(p[c])) << at << " " << c;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace qkv::testing
