// Linear, Embedding, LayerNorm, Dropout, FeedForward: forward against loops or formulas,
// PyTorch's initialization bounds and names, gradients against central differences (f64).
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "nn/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

TEST(Linear, ForwardIsXWTransposedPlusBiasAndInitIsKaimingUniform) {
  Generator gen(1);
  nn::Linear linear(5, 3, gen, true, DType::f64);
  EXPECT_EQ(names_of(linear), (std::vector<std::string>{"weight", "bias"}));
  const double bound = 1 / std::sqrt(5.0);
  for (const double w : linear.weight().value().to_vector()) {
    EXPECT_LE(std::fabs(w), bound);
  }
  const Tensor x = random({2, 4, 5}, 2);
  const Tensor y = linear(Var(x)).value();
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
  const Tensor w = linear.weight().value(), b = linear.bias().value();
  for (std::int64_t n = 0; n < 2; ++n) {
    for (std::int64_t t = 0; t < 4; ++t) {
      for (std::int64_t o = 0; o < 3; ++o) {
        double s = b.at({o});
        for (std::int64_t i = 0; i < 5; ++i) s += x.at({n, t, i}) * w.at({o, i});
        EXPECT_NEAR(y.at({n, t, o}), s, 1e-14);
      }
    }
  }
  expect_module_gradients("linear", linear, [&] { return linear(Var(x)); });
  nn::Linear no_bias(5, 3, gen, false, DType::f64);
  EXPECT_EQ(names_of(no_bias), (std::vector<std::string>{"weight"}));
  EXPECT_THROW(linear(Var(random({2, 4}, 3))), Error);
}

TEST(Embedding, LooksUpRowsAndAccumulatesGradients) {
  Generator gen(3);
  nn::Embedding emb(6, 4, gen, DType::f64);
  const std::vector<std::int64_t> idx = {1, 5, 1, 0};
  const Tensor out = emb.forward(idx, {2, 2}).value();
  ASSERT_EQ(out.shape(), (Shape{2, 2, 4}));
  for (std::int64_t e = 0; e < 4; ++e)
    EXPECT_EQ(out.at({1, 0, e}), emb.weight().value().at({1, e}));
  expect_module_gradients("embedding", emb, [&] { return emb.forward(idx, {2, 2}); });
}

TEST(LayerNorm, NormalizesTheLastDimensionWithOnesAndZeros) {
  nn::LayerNorm norm(6, 1e-5, DType::f64);
  EXPECT_EQ(names_of(norm), (std::vector<std::string>{"weight", "bias"}));
  const Tensor x = random({3, 6}, 4, -2, 3);
  const Tensor y = norm(Var(x)).value();
  for (std::int64_t r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t c = 0; c < 6; ++c) mean += x.at({r, c}) / 6;
    for (std::int64_t c = 0; c < 6; ++c) var += (x.at({r, c}) - mean) * (x.at({r, c}) - mean) / 6;
    for (std::int64_t c = 0; c < 6; ++c) {
      EXPECT_NEAR(y.at({r, c}), (x.at({r, c}) - mean) / std::sqrt(var + 1e-5), 1e-12);
    }
  }
  Tensor w = norm.named_parameters()[0].second.value();
  w.copy_from(random({6}, 5));  // non-trivial weights for the gradient check
  expect_module_gradients("layer_norm", norm, [&] { return norm(Var(x)); });
}

TEST(Dropout, DropsAtRateInTrainingAndIsIdentityInEval) {
  nn::Dropout dropout(0.25, 11);
  const Tensor x = Tensor::full({64, 64}, 1.0, DType::f64);
  const std::vector<double> a = dropout(Var(x)).value().to_vector();
  const std::vector<double> b = dropout(Var(x)).value().to_vector();
  std::int64_t zeros = 0, differ = 0;
  for (std::size_t n = 0; n < a.size(); ++n) {
    EXPECT_TRUE(a[n] == 0 || std::fabs(a[n] - 1 / 0.75) < 1e-12);
    zeros += a[n] == 0;
    differ += (a[n] == 0) != (b[n] == 0);
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 4096, 0.25, 0.03);
  EXPECT_GT(differ, 0) << "two calls drew the same mask";
  dropout.eval();
  EXPECT_EQ(dropout(Var(x)).value().to_vector(), x.to_vector());
  EXPECT_THROW(nn::Dropout(1.0), Error);
}

TEST(FeedForward, IsLinearActivationLinearWithPyTorchNames) {
  for (const nn::Activation act : {nn::Activation::relu, nn::Activation::gelu}) {
    Generator gen(6);
    nn::FeedForward ff(4, 8, gen, act, 0.0, DType::f64);
    EXPECT_EQ(names_of(ff), (std::vector<std::string>{"linear1.weight", "linear1.bias",
                                                      "linear2.weight", "linear2.bias"}));
    const Tensor x = random({2, 3, 4}, 7);
    const auto p = ff.named_parameters();
    const Var h = ag::matmul(Var(x), ag::transpose(p[0].second, 0, 1)) + p[1].second;
    const Var a = act == nn::Activation::relu ? ag::relu(h) : ag::gelu(h);
    const Tensor expected = (ag::matmul(a, ag::transpose(p[2].second, 0, 1)) + p[3].second).value();
    EXPECT_LT(relative_difference(ff(Var(x)).value(), expected), 1e-14);
    expect_module_gradients("feed_forward", ff, [&] { return ff(Var(x)); });
  }
}

}  // namespace
}  // namespace qkv::testing
