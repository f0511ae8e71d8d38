// The engine: accumulation over fan-out, reverse topological order on shared subgraphs, deep
// graphs, NoGrad, seeds, zero_grad, and gradcheck's ability to catch a wrong backward.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/check.hpp"
#include "autograd/node.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

TEST(Engine, FanOutAccumulatesEveryContribution) {
  // X feeds Q, K and V: its gradient is the sum of the three paths.
  const Tensor x0 = random({3, 4}, 1), wq = random({4, 2}, 2), wk = random({4, 2}, 3),
               wv = random({4, 2}, 4);
  Var x(x0, true);
  const Var q = ag::matmul(x, Var(wq)), k = ag::matmul(x, Var(wk)), v = ag::matmul(x, Var(wv));
  ag::sum(q + k + v).backward();
  // d/dx sum(x (Wq + Wk + Wv)) = ones [3, 2] (Wq + Wk + Wv)^T: each row is the row sums.
  for (std::int64_t i = 0; i < 3; ++i) {
    for (std::int64_t d = 0; d < 4; ++d) {
      const double expected = wq.at({d, 0}) + wq.at({d, 1}) + wk.at({d, 0}) + wk.at({d, 1}) +
                              wv.at({d, 0}) + wv.at({d, 1});
      EXPECT_NEAR(x.grad().at({i, d}), expected, 1e-15);
    }
  }
  expect_gradcheck("fan-out",
                   [](const std::vector<Var>& in) {
                     const Var h = ag::tanh(in[0]);
                     return ag::matmul(h, in[1]) * ag::matmul(h, in[2]) + h;  // h used three times
                   },
                   {random({3, 4}, 5), random({4, 4}, 6), random({4, 4}, 7)});
}

TEST(Engine, DiamondVisitsSharedNodeOnceWithItsFullGradient) {
  // y = a * a with a = x + 1, then z = y + a: a's gradient must be complete (2a + 1) before it
  // passes it on, which reverse topological order guarantees.
  Var x(Tensor::full({}, 2.0, DType::f64), true);
  const Var a = x + 1.0;
  (a * a + a).backward();
  EXPECT_EQ(x.grad().at({}), 2 * 3.0 + 1);
}

TEST(Engine, SecondBackwardAccumulatesAndZeroGradResets) {
  Var x(Tensor::full({2}, 3.0, DType::f64), true);
  const Var y = ag::sum(x * x);
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{6, 6}));
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{12, 12}));
  x.zero_grad();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 0}));
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{6, 6}));
}

// zero_grad's zeros are made when read; the backward after it writes a new gradient, so a
// gradient taken before keeps its values, and a leaf with no gradient yet stays without one.
TEST(Engine, ZeroGradKeepsEarlierGradientsAndUndefinedOnes) {
  Var x(Tensor::full({3}, 2.0, DType::f64), true), unused(Tensor::full({2}, 1.0), true);
  const Var y = ag::sum(x * x);
  y.backward();
  const Tensor before = x.grad();
  x.zero_grad();
  x.zero_grad();
  unused.zero_grad();
  EXPECT_FALSE(unused.grad().defined());
  y.backward();
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{8, 8, 8}));
  EXPECT_EQ(before.to_vector(), (std::vector<double>{4, 4, 4}));
  x.zero_grad();
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 0, 0}));
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{4, 4, 4}));
}

TEST(Engine, OnlyLeavesThatRequireGradGetGradients) {
  Var x(Tensor::full({2}, 1.0, DType::f64), true);
  Var c(Tensor::full({2}, 5.0, DType::f64));
  const Var h = x * c;
  ag::sum(h).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(c.grad().defined());
  EXPECT_FALSE(h.grad().defined());  // intermediate: passed on, not kept
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(h.is_leaf());
  EXPECT_FALSE(ag::sum(c * c).requires_grad());
}

TEST(Engine, NonScalarBackwardNeedsASeed) {
  Var x(random({2, 3}, 8), true);
  const Var y = ag::tanh(x);
  try {
    y.backward();
    FAIL() << "backward() of a [2, 3] Var must ask for a seed";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "backward()");
    EXPECT_NE(std::string(e.what()).find("f64[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(x.grad().defined());
  EXPECT_THROW(y.backward(Tensor::zeros({3, 2}, DType::f64)), Error);
  EXPECT_THROW(y.backward(Tensor::zeros({2, 3}, DType::f32)), Error);
  const Tensor seed = random({2, 3}, 9);
  y.backward(seed);
  for (std::int64_t n = 0; n < 6; ++n) {
    const Shape i = {n / 3, n % 3};
    const double t = std::tanh(x.value().at(i));
    EXPECT_NEAR(x.grad().at(i), seed.at(i) * (1 - t * t), 1e-15);
  }
  EXPECT_THROW(Var(random({2}, 1)).backward(Tensor::zeros({2}, DType::f64)), Error);
}

TEST(Engine, NoGradRecordsNothing) {
  Var x(random({3}, 10), true);
  {
    ag::NoGrad no_grad;
    EXPECT_FALSE(ag::grad_enabled());
    const Var y = ag::sum(ag::exp(x) * x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    EXPECT_EQ(y.node()->inputs.size(), 0u);
    EXPECT_THROW(y.backward(), Error);
    { ag::NoGrad nested; }
    EXPECT_FALSE(ag::grad_enabled());
  }
  EXPECT_TRUE(ag::grad_enabled());
  const Var y = ag::sum(ag::exp(x) * x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(y.node()->inputs.size(), 1u);
}

TEST(Engine, DeepChainsNeitherRecurseInBackwardNorInDestruction) {
  // 200000 nodes: a recursive walk or a recursive destructor would overflow the stack.
  constexpr int kDepth = 200000;
  Var x(Tensor::full({}, 1.0, DType::f64), true);
  {
    Var y = x;
    for (int n = 0; n < kDepth; ++n) y = y + 1e-6;
    y.backward();
  }
  EXPECT_EQ(x.grad().at({}), 1.0);
}

TEST(Engine, F32GradientsFollowTheDtype) {
  Var x(random({2, 3}, 11).to(DType::f32), true);
  Var w(random({3, 2}, 12).to(DType::f32), true);
  ag::sum(ag::softmax(ag::matmul(x, w), -1) * 3.0).backward();
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
}

// A deliberately wrong backward (d sin x = cos x, here sin x): gradcheck must report it, with
// the element and both values.
TEST(Gradcheck, CatchesAWrongBackward) {
  const auto wrong_sin = [](const std::vector<Var>& v) {
    const Tensor x = v[0].value();
    Tensor y = Tensor::from_values(
        x.shape(),
        [&] {
          std::vector<double> s;
          for (const double e : x.to_vector()) s.push_back(std::sin(e));
          return s;
        }(),
        DType::f64);
    return ag::detail::record(y, {&v[0]}, [y](const Tensor& g) {
      return std::vector<Tensor>{ag::mul(Var(g), Var(y)).value()};
    });
  };
  const ag::GradcheckResult r = ag::gradcheck(wrong_sin, {random({4}, 13)});
  std::cout << r.describe() << "\n";
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.worst_ratio, 1e3);
  EXPECT_EQ(r.elements, 4);
  EXPECT_NE(r.analytic, r.numeric);
  EXPECT_NE(r.describe().find("FAILED"), std::string::npos);
  EXPECT_THROW(ag::gradcheck(wrong_sin, {random({4}, 13).to(DType::f32)}), Error);
}

}  // namespace
}  // namespace qkv::testing
