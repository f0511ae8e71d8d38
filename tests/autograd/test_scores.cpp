// Score functions (composed ops) against finite differences and their formulas.
#include <cmath>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

TEST(Scores, DotAndScaledDotMatchFiniteDifferences) {
  for (const auto& [qs, ks] : std::vector<std::pair<Shape, Shape>>{
           {{3, 4}, {5, 4}}, {{2, 3, 4}, {2, 5, 4}}, {{2, 2, 3, 4}, {2, 1, 6, 4}}}) {
    const Tensor q = random(qs, 1), k = random(ks, 2);
    expect_gradcheck("dot", [](const std::vector<Var>& v) { return ag::dot_scores(v[0], v[1]); },
                     {q, k});
    expect_gradcheck("scaled dot",
                     [](const std::vector<Var>& v) { return ag::scaled_dot_scores(v[0], v[1]); },
                     {q, k});
    expect_gradcheck(
        "scaled dot 0.3",
        [](const std::vector<Var>& v) { return ag::scaled_dot_scores(v[0], v[1], 0.3); }, {q, k});
  }
}

TEST(Scores, AdditiveMatchesFiniteDifferences) {
  for (const auto& [qs, ks] :
       std::vector<std::pair<Shape, Shape>>{{{3, 4}, {5, 2}}, {{2, 3, 4}, {2, 5, 2}}}) {
    const Tensor q = random(qs, 3), k = random(ks, 4);
    const Tensor wq = random({4, 6}, 5), wk = random({2, 6}, 6), v = random({6}, 7);
    expect_gradcheck(
        "additive",
        [](const std::vector<Var>& x) { return ag::additive_scores(x[0], x[1], x[2], x[3], x[4]); },
        {q, k, wq, wk, v});
  }
}

TEST(Scores, ValuesFollowTheirFormulas) {
  const Tensor q = random({2, 3, 4}, 8), k = random({2, 5, 4}, 9);
  const Tensor dot = ag::dot_scores(Var(q), Var(k)).value();
  const Tensor scaled = ag::scaled_dot_scores(Var(q), Var(k)).value();
  const Tensor wq = random({4, 3}, 10), wk = random({4, 3}, 11), v = random({3}, 12);
  const Tensor additive = ag::additive_scores(Var(q), Var(k), Var(wq), Var(wk), Var(v)).value();
  ASSERT_EQ(additive.shape(), (Shape{2, 3, 5}));
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t i = 0; i < 3; ++i) {
      for (std::int64_t j = 0; j < 5; ++j) {
        double d = 0;
        for (std::int64_t e = 0; e < 4; ++e) d += q.at({b, i, e}) * k.at({b, j, e});
        EXPECT_NEAR(dot.at({b, i, j}), d, 1e-14);
        EXPECT_NEAR(scaled.at({b, i, j}), d / 2, 1e-14);
        double a = 0;
        for (std::int64_t u = 0; u < 3; ++u) {
          double pre = 0;
          for (std::int64_t e = 0; e < 4; ++e) {
            pre += q.at({b, i, e}) * wq.at({e, u}) + k.at({b, j, e}) * wk.at({e, u});
          }
          a += v.at({u}) * std::tanh(pre);
        }
        EXPECT_NEAR(additive.at({b, i, j}), a, 1e-14);
      }
    }
  }
}

}  // namespace
}  // namespace qkv::testing
