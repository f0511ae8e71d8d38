// Every op against central differences in f64 (gradcheck), over several shapes, broadcasting
// ones included, and its forward against an independent formula or an invariant.
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

struct ShapePair {
  Shape a, b;
};

// Shapes that broadcast: equal, a trailing vector, size-1 on either side, a scalar.
const std::vector<ShapePair> kBroadcastPairs = {
    {{2, 3}, {2, 3}}, {{2, 3}, {3}},          {{4, 1, 3}, {2, 1}},
    {{1}, {2, 3}},    {{2, 1, 4}, {1, 3, 1}}, {{}, {2, 3}},
};

TEST(Elementwise, AddSubMulDivMatchFiniteDifferences) {
  std::uint64_t seed = 1;
  for (const ShapePair& s : kBroadcastPairs) {
    const Tensor a = random(s.a, seed++);
    const Tensor b = random(s.b, seed++, 0.5, 2.0);  // away from 0 for div
    const auto binary = [](auto op) {
      return [op](const std::vector<Var>& x) { return op(x[0], x[1]); };
    };
    expect_gradcheck("add", binary([](const Var& x, const Var& y) { return x + y; }), {a, b});
    expect_gradcheck("sub", binary([](const Var& x, const Var& y) { return x - y; }), {a, b});
    expect_gradcheck("mul", binary([](const Var& x, const Var& y) { return x * y; }), {a, b});
    expect_gradcheck("div", binary([](const Var& x, const Var& y) { return x / y; }), {a, b});
    expect_gradcheck("div reversed", binary([](const Var& x, const Var& y) { return y / x; }),
                     {b, a});
  }
  const Tensor x = random({3, 2}, 99);
  expect_gradcheck("scalar forms",
                   [](const std::vector<Var>& v) { return -((v[0] + 1.5) * 2.0 - 0.25) / 3.0; },
                   {x});
}

TEST(Elementwise, BroadcastForwardMatchesIndexFormula) {
  const Tensor a = random({4, 1, 3}, 5);
  const Tensor b = random({2, 1}, 6);
  const Tensor out = ag::mul(Var(a), Var(b)).value();
  ASSERT_EQ(out.shape(), (Shape{4, 2, 3}));
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 2; ++j) {
      for (std::int64_t k = 0; k < 3; ++k) {
        EXPECT_EQ(out.at({i, j, k}), a.at({i, 0, k}) * b.at({j, 0}));
      }
    }
  }
}

TEST(Matmul, MatchesFiniteDifferencesAndLoops) {
  const std::vector<ShapePair> cases = {
      {{3, 4}, {4, 5}},          {{2, 3, 4}, {4, 5}},    {{2, 3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {3, 4, 2}}, {{1, 3, 4}, {2, 4, 5}}, {{2, 3, 4}, {1, 1, 4, 2}},
      {{1, 1}, {1, 7}},
  };
  std::uint64_t seed = 10;
  for (const ShapePair& s : cases) {
    const Tensor a = random(s.a, seed++);
    const Tensor b = random(s.b, seed++);
    expect_gradcheck("matmul", [](const std::vector<Var>& x) { return ag::matmul(x[0], x[1]); },
                     {a, b});
    // The product of every matrix pair, by the loop.
    const Tensor c = ag::matmul(Var(a), Var(b)).value();
    const std::int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
    Shape batch(c.shape().begin(), c.shape().end() - 2);
    const Tensor ae = a.expand([&] {
      Shape s2 = batch;
      s2.insert(s2.end(), {M, K});
      return s2;
    }());
    const Tensor be = b.expand([&] {
      Shape s2 = batch;
      s2.insert(s2.end(), {K, N});
      return s2;
    }());
    const std::vector<double> av = ae.to_vector(), bv = be.to_vector(), cv = c.to_vector();
    const std::size_t P = cv.size() / (M * N);
    for (std::size_t p = 0; p < P; ++p) {
      for (std::int64_t i = 0; i < M; ++i) {
        for (std::int64_t j = 0; j < N; ++j) {
          double sum = 0;
          for (std::int64_t k = 0; k < K; ++k)
            sum += av[p * M * K + i * K + k] * bv[p * K * N + k * N + j];
          EXPECT_NEAR(cv[p * M * N + i * N + j], sum, 1e-14);
        }
      }
    }
  }
}

// linear's one node against central differences, and its forward against the loop x W^T + b:
// 2-D and 3-D x, with and without a bias, W a whole matrix, a slice of rows of a packed one (read
// in place), and a transposed view (copied); f32 against f64.
TEST(Linear, MatchesFiniteDifferencesAndTheLoop) {
  std::uint64_t seed = 30;
  for (const Shape& xs : {Shape{3, 4}, Shape{2, 3, 4}, Shape{1, 1, 1, 4}}) {
    for (const bool with_bias : {true, false}) {
      for (const int layout : {0, 1, 2}) {
        const Tensor x = random(xs, seed++), b = random({5}, seed++);
        const Tensor packed = random({9, 4}, seed++), wt = random({4, 5}, seed++);
        // W [5, 4]: packed rows 2..7, the transpose of wt, or that transpose reshaped (a copy)
        const auto weight = [layout](const Var& p, const Var& t) {
          return layout == 0   ? ag::slice(p, 0, 2, 7)
                 : layout == 1 ? ag::transpose(t, 0, 1)
                               : ag::reshape(ag::transpose(t, 0, 1), {5, 4});
        };
        const std::string name = "linear " + std::to_string(layout) + (with_bias ? " bias" : "");
        expect_gradcheck(name,
                         [&](const std::vector<Var>& v) {
                           return ag::linear(v[0], weight(v[1], v[2]), with_bias ? v[3] : Var());
                         },
                         {x, packed, wt, b});
        const Tensor w = weight(Var(packed), Var(wt)).value();
        const Tensor y = ag::linear(Var(x), Var(w), with_bias ? Var(b) : Var()).value();
        Shape ys = xs;
        ys.back() = 5;
        ASSERT_EQ(y.shape(), ys);
        const std::vector<double> xv = x.to_vector(), yv = y.to_vector(), bv = b.to_vector();
        for (std::size_t r = 0; r < xv.size() / 4; ++r) {
          for (std::int64_t n = 0; n < 5; ++n) {
            double sum = with_bias ? bv[n] : 0.0;
            for (std::int64_t k = 0; k < 4; ++k) sum += xv[r * 4 + k] * w.at({n, k});
            EXPECT_NEAR(yv[r * 5 + n], sum, 1e-14) << name;
          }
        }
      }
    }
  }
  const Tensor x = random({6, 33}, 40), w = random({17, 33}, 41), b = random({17}, 42);
  const Tensor y64 = ag::linear(Var(x), Var(w), Var(b)).value();
  const Tensor y32 =
      ag::linear(Var(x.to(DType::f32)), Var(w.to(DType::f32)), Var(b.to(DType::f32))).value();
  EXPECT_EQ(y32.dtype(), DType::f32);
  EXPECT_LT(relative_difference(y32, y64), 1e-6);
}

TEST(Linear, RefusesShapesThatDoNotFit) {
  const Var x(random({2, 4}, 50)), w(random({3, 4}, 51));
  EXPECT_THROW(ag::linear(x, Var(random({3, 5}, 52))), Error);
  EXPECT_THROW(ag::linear(x, Var(random({12}, 53))), Error);
  EXPECT_THROW(ag::linear(x, w, Var(random({4}, 54))), Error);
  EXPECT_THROW(ag::linear(x, w, Var(random({3, 1}, 55))), Error);
  EXPECT_THROW(ag::linear(x, Var(random({3, 4}, 56).to(DType::f32))), Error);
}

// The BLAS products give bitwise the same result on any number of threads (kernels/cpu/blas.cpp
// splits columns, or tall products into pieces whose bounds follow from the shape alone): wide,
// square, tall and one-row shapes, transposed operands through linear's backward, f32 and f64.
TEST(Matmul, ResultsDoNotDependOnTheThreadCount) {
  const int saved = num_threads();
  std::uint64_t seed = 60;
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const auto& [M, K, N] : std::vector<std::array<std::int64_t, 3>>{{480, 128, 512},
                                                                          {128, 480, 128},
                                                                          {1000, 64, 40},
                                                                          {1, 300, 70},
                                                                          {700, 33, 1},
                                                                          {130, 24, 65},
                                                                          {65, 65, 65},
                                                                          {130, 130, 3}}) {
      const Tensor a = random({M, K}, seed++).to(dtype), w = random({N, K}, seed++).to(dtype);
      const Tensor g = random({M, N}, seed++).to(dtype);
      std::vector<Tensor> first;
      for (const int threads : {1, 2, 3, 8}) {
        set_num_threads(threads);
        Var x(a, true), weight(w, true);
        Var y = ag::linear(x, weight);
        y.backward(g);
        const std::vector<Tensor> now = {y.value(), x.grad(), weight.grad()};
        if (first.empty()) {
          first = now;
          continue;
        }
        const std::string shape = std::to_string(M) + "x" + std::to_string(K) + "x" +
                                  std::to_string(N) + " on " + std::to_string(threads);
        expect_bitwise_equal(now[0], first[0], "y " + shape);
        expect_bitwise_equal(now[1], first[1], "dx " + shape);
        expect_bitwise_equal(now[2], first[2], "dW " + shape);
      }
    }
  }
  set_num_threads(saved);
}

TEST(Matmul, F32MatchesF64) {
  const Tensor a = random({3, 5, 7}, 20), b = random({7, 4}, 21);
  const Tensor c64 = ag::matmul(Var(a), Var(b)).value();
  const Tensor c32 = ag::matmul(Var(a.to(DType::f32)), Var(b.to(DType::f32))).value();
  EXPECT_EQ(c32.dtype(), DType::f32);
  EXPECT_LT(relative_difference(c32, c64), 1e-6);
}

TEST(Reduce, SumMeanMaxMatchFiniteDifferences) {
  // max is piecewise linear: a smaller step stays clear of the ties between entries.
  GradcheckOptions kink;
  kink.step = 1e-7;
  kink.atol = 1e-7;
  std::uint64_t seed = 30;
  for (const Shape& shape : {Shape{5}, Shape{3, 4}, Shape{2, 3, 4}}) {
    const Tensor x = random(shape, seed++);
    expect_gradcheck("sum", [](const std::vector<Var>& v) { return ag::sum(v[0]); }, {x});
    expect_gradcheck("mean", [](const std::vector<Var>& v) { return ag::mean(v[0]); }, {x});
    expect_gradcheck(
        "max", [](const std::vector<Var>& v) { return ag::max(v[0]); }, {x}, kink);
    for (std::int64_t dim = -static_cast<std::int64_t>(shape.size());
         dim < static_cast<std::int64_t>(shape.size()); ++dim) {
      for (const bool keep : {false, true}) {
        const std::string at = " dim " + std::to_string(dim) + (keep ? " keepdim" : "");
        expect_gradcheck("sum" + at,
                         [=](const std::vector<Var>& v) { return ag::sum(v[0], dim, keep); }, {x});
        expect_gradcheck("mean" + at,
                         [=](const std::vector<Var>& v) { return ag::mean(v[0], dim, keep); }, {x});
        expect_gradcheck(
            "max" + at, [=](const std::vector<Var>& v) { return ag::max(v[0], dim, keep); }, {x},
            kink);
      }
    }
  }
}

TEST(Reduce, ForwardValuesAndTies) {
  const Tensor x = Tensor::from_values({2, 3}, {1, 5, 5, -2, 0, 4}, DType::f64);
  EXPECT_EQ(ag::sum(Var(x)).value().to_vector(), std::vector<double>{13});
  EXPECT_EQ(ag::mean(Var(x), 1).value().to_vector(), (std::vector<double>{11.0 / 3, 2.0 / 3}));
  EXPECT_EQ(ag::max(Var(x), 0, true).value().shape(), (Shape{1, 3}));
  EXPECT_EQ(ag::max(Var(x), 0).value().to_vector(), (std::vector<double>{1, 5, 5}));
  // Ties share the gradient (amax): 5 appears twice in row 0.
  Var v(x, true);
  ag::sum(ag::max(v, 1)).backward();
  EXPECT_EQ(v.grad().to_vector(), (std::vector<double>{0, 0.5, 0.5, 0, 0, 1}));
}

TEST(Activation, MatchFiniteDifferences) {
  std::uint64_t seed = 40;
  for (const Shape& shape : {Shape{7}, Shape{3, 4}, Shape{2, 2, 3}}) {
    const Tensor x = random(shape, seed++, -3, 3);
    const Tensor positive = random(shape, seed++, 0.2, 3);
    const auto one = [](auto op) { return [op](const std::vector<Var>& v) { return op(v[0]); }; };
    expect_gradcheck("exp", one([](const Var& v) { return ag::exp(v); }), {x});
    expect_gradcheck("log", one([](const Var& v) { return ag::log(v); }), {positive});
    expect_gradcheck("tanh", one([](const Var& v) { return ag::tanh(v); }), {x});
    expect_gradcheck("sigmoid", one([](const Var& v) { return ag::sigmoid(v); }), {x});
    // A smaller step keeps the differences clear of relu's kink at 0; relu is piecewise linear,
    // so there is no truncation error to trade against.
    GradcheckOptions kink;
    kink.step = 1e-7;
    kink.atol = 1e-7;
    expect_gradcheck("relu", one([](const Var& v) { return ag::relu(v); }), {x}, kink);
    expect_gradcheck("gelu exact", one([](const Var& v) { return ag::gelu(v); }), {x});
    expect_gradcheck("gelu tanh", one([](const Var& v) { return ag::gelu(v, ag::Gelu::tanh); }),
                     {x});
  }
}

TEST(Activation, ForwardValues) {
  const Tensor x = Tensor::from_values({4}, {-1.5, -0.2, 0.0, 2.0}, DType::f64);
  const std::vector<double> xs = x.to_vector();
  const auto check = [&](const Var& y, auto f) {
    const std::vector<double> ys = y.value().to_vector();
    for (std::size_t n = 0; n < xs.size(); ++n) EXPECT_NEAR(ys[n], f(xs[n]), 1e-15) << xs[n];
  };
  check(ag::sigmoid(Var(x)), [](double v) { return 1 / (1 + std::exp(-v)); });
  check(ag::relu(Var(x)), [](double v) { return v > 0 ? v : 0.0; });
  // GELU(x) = x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2, written differently from the op.
  check(ag::gelu(Var(x)), [](double v) { return v * 0.5 * std::erfc(-v / std::sqrt(2.0)); });
  check(ag::gelu(Var(x), ag::Gelu::tanh), [](double v) {
    const double pi = std::acos(-1.0);
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / pi) * (v + 0.044715 * v * v * v)));
  });
  // Known values: GELU(1) = 0.8413447460685429 (PyTorch nn.GELU()(1.0)).
  EXPECT_NEAR(ag::gelu(Var(Tensor::full({}, 1.0, DType::f64))).value().at({}), 0.8413447460685429,
              1e-15);
  // Sigmoid of large magnitudes neither overflows nor gives NaN.
  const Tensor big = Tensor::from_values({2}, {-800, 800}, DType::f64);
  EXPECT_EQ(ag::sigmoid(Var(big)).value().to_vector(), (std::vector<double>{0, 1}));
}

TEST(Shape, ReshapePermuteHeadsConcatSliceMatchFiniteDifferences) {
  const Tensor x = random({2, 3, 4}, 50);
  expect_gradcheck("reshape",
                   [](const std::vector<Var>& v) {
                     return ag::reshape(v[0], {4, -1}) * ag::reshape(v[0], {4, 6});
                   },
                   {x});
  expect_gradcheck("permute",
                   [](const std::vector<Var>& v) {
                     return ag::permute(v[0], {2, 0, 1}) * ag::permute(v[0], {2, 0, 1});
                   },
                   {x});
  expect_gradcheck(
      "transpose",
      [](const std::vector<Var>& v) { return ag::matmul(ag::transpose(v[0], -1, -2), v[0]); }, {x});
  expect_gradcheck(
      "split_heads",
      [](const std::vector<Var>& v) { return ag::split_heads(v[0], 2) * ag::split_heads(v[0], 2); },
      {x});
  const Tensor heads = random({2, 3, 2, 2}, 51);
  expect_gradcheck(
      "merge_heads",
      [](const std::vector<Var>& v) { return ag::merge_heads(v[0]) * ag::merge_heads(v[0]); },
      {heads});
  const Tensor y = random({2, 1, 4}, 52), z = random({2, 2, 4}, 53);
  for (const std::int64_t dim : {1, -2}) {
    expect_gradcheck(
        "concat",
        [dim](const std::vector<Var>& v) {
          return ag::concat({v[0], v[1], v[2]}, dim) * ag::concat({v[0], v[1], v[2]}, dim);
        },
        {x, y, z});
  }
  expect_gradcheck("concat last",
                   [](const std::vector<Var>& v) {
                     return ag::concat({v[0], v[0]}, -1) * ag::concat({v[0], v[0]}, -1);
                   },
                   {x});
  for (const auto& [dim, start, end, step] : std::vector<std::array<std::int64_t, 4>>{
           {0, 0, 1, 1}, {1, 1, 3, 1}, {2, 0, 4, 2}, {-1, -3, 100, 2}}) {
    expect_gradcheck("slice",
                     [=](const std::vector<Var>& v) {
                       const Var s = ag::slice(v[0], dim, start, end, step);
                       return s * s;
                     },
                     {x});
  }
  const std::vector<std::int64_t> lengths = {3, 1};  // x [2, 3, 4] padded to T = 3
  expect_gradcheck("pack_rows",
                   [&](const std::vector<Var>& v) {
                     const Var p = ag::pack_rows(v[0], lengths);
                     return p * p;
                   },
                   {x});
  expect_gradcheck("unpack_rows",
                   [&](const std::vector<Var>& v) {
                     const Var u = ag::unpack_rows(ag::reshape(v[0], {3, 2, 2}), {1, 2}, 4);
                     return u * u;
                   },
                   {random({3, 4}, 55)});
}

TEST(Shape, ForwardValues) {
  const Tensor x = random({2, 3, 4}, 54);
  const Tensor h = ag::split_heads(Var(x), 2).value();
  EXPECT_EQ(h.shape(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(h.at({1, 2, 1, 0}), x.at({1, 2, 2}));
  EXPECT_EQ(ag::merge_heads(Var(h)).value().to_vector(), x.to_vector());
  const Tensor c = ag::concat({Var(x), Var(x.slice(1, 0, 1))}, 1).value();
  EXPECT_EQ(c.shape(), (Shape{2, 4, 4}));
  EXPECT_EQ(c.at({1, 3, 2}), x.at({1, 0, 2}));
  EXPECT_EQ(ag::slice(Var(x), 2, 1, 4, 2).value().at({0, 1, 1}), x.at({0, 1, 3}));
}

TEST(MaskedFill, MatchesFiniteDifferences) {
  const Tensor x = random({2, 3, 4}, 60);
  for (const Shape& mask_shape : {Shape{2, 3, 4}, Shape{4}, Shape{3, 1}, Shape{2, 1, 1}}) {
    std::vector<double> bits;
    for (const double u : random(mask_shape, 61, 0, 1).to_vector()) bits.push_back(u > 0.5);
    const Tensor mask = Tensor::from_values(mask_shape, bits, DType::boolean);
    expect_gradcheck("masked_fill mask " + shape_string(mask_shape),
                     [mask](const std::vector<Var>& v) { return ag::masked_fill(v[0], mask, 7.0); },
                     {x});
    const Tensor y = ag::masked_fill(Var(x), mask, 7.0).value();
    const Tensor m = mask.expand(x.shape());
    for (std::int64_t n = 0; n < x.numel(); ++n) {
      const Shape i = {n / 12, n / 4 % 3, n % 4};
      EXPECT_EQ(y.at(i), m.at(i) != 0 ? 7.0 : x.at(i));
    }
  }
}

TEST(Softmax, MatchesFiniteDifferencesAlongEveryDim) {
  const Tensor x = random({2, 3, 4}, 70, -3, 3);
  for (std::int64_t dim = -3; dim < 3; ++dim) {
    expect_gradcheck("softmax dim " + std::to_string(dim),
                     [dim](const std::vector<Var>& v) { return ag::softmax(v[0], dim); }, {x});
    expect_gradcheck("log_softmax dim " + std::to_string(dim),
                     [dim](const std::vector<Var>& v) { return ag::log_softmax(v[0], dim); }, {x});
  }
  // With some entries masked to -inf (not whole rows) the gradient still matches.
  Tensor mask = Tensor::zeros({4}, DType::boolean);
  mask.set({1}, 1);
  expect_gradcheck("softmax after masked_fill",
                   [mask](const std::vector<Var>& v) {
                     return ag::softmax(
                         ag::masked_fill(v[0], mask, -std::numeric_limits<double>::infinity()), -1);
                   },
                   {x});
}

TEST(Softmax, StableRowsSumToOneAndMaskedRowsAreZero) {
  // Large logits: exp would overflow without the max subtracted.
  const Tensor x = Tensor::from_values(
      {2, 3},
      {1000, 1001, 1002, -std::numeric_limits<double>::infinity(),
       -std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()},
      DType::f64);
  Var v(x, true);
  const Var p = ag::softmax(v, 1);
  const std::vector<double> pv = p.value().to_vector();
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  EXPECT_NEAR(pv[2], 1 / (1 + e1 + e2), 1e-15);
  EXPECT_NEAR(pv[0] + pv[1] + pv[2], 1.0, 1e-15);
  EXPECT_EQ(pv[3], 0.0);
  EXPECT_EQ(pv[5], 0.0);
  ag::sum(ag::mul(p, Var(random({2, 3}, 71)))).backward();
  for (const double g : v.grad().to_vector()) EXPECT_FALSE(std::isnan(g));
  EXPECT_EQ(v.grad().at({1, 0}), 0.0);
  const std::vector<double> lv = ag::log_softmax(Var(x), 1).value().to_vector();
  EXPECT_NEAR(lv[2], -std::log(1 + e1 + e2), 1e-13);
  EXPECT_EQ(lv[4], -std::numeric_limits<double>::infinity());
}

TEST(LayerNorm, MatchesFiniteDifferences) {
  std::uint64_t seed = 80;
  for (const auto& [x_shape, normalized] : std::vector<std::pair<Shape, Shape>>{
           {{2, 3, 5}, {5}}, {{4, 6}, {6}}, {{2, 3, 4}, {3, 4}}, {{7}, {7}}, {{2, 37}, {37}}}) {
    const Tensor x = random(x_shape, seed++, -2, 2);
    const Tensor w = random(normalized, seed++), b = random(normalized, seed++);
    const Shape n = normalized;
    expect_gradcheck("layer_norm",
                     [n](const std::vector<Var>& v) { return ag::layer_norm(v[0], n, v[1], v[2]); },
                     {x, w, b});
    expect_gradcheck(
        "layer_norm no affine",
        [n](const std::vector<Var>& v) { return ag::layer_norm(v[0], n, {}, {}, 1e-3); }, {x});
  }
}

TEST(LayerNorm, RowsHaveMeanZeroVarianceOneThenAffine) {
  const Tensor x = random({3, 8}, 90, -5, 5);
  const Tensor y = ag::layer_norm(Var(x), {8}, {}, {}, 0.0).value();
  for (std::int64_t r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t j = 0; j < 8; ++j) mean += y.at({r, j}) / 8;
    for (std::int64_t j = 0; j < 8; ++j) var += (y.at({r, j}) - mean) * (y.at({r, j}) - mean) / 8;
    EXPECT_NEAR(mean, 0, 1e-15);
    EXPECT_NEAR(var, 1, 1e-14);
  }
  const Tensor w = random({8}, 91), b = random({8}, 92);
  const Tensor z = ag::layer_norm(Var(x), {8}, Var(w), Var(b), 0.0).value();
  EXPECT_NEAR(z.at({2, 5}), y.at({2, 5}) * w.at({5}) + b.at({5}), 1e-15);
}

// Where no backward will follow (NoGrad, or inputs that need no gradient), layer_norm keeps no
// xhat (ops::layer_norm); its output is bitwise the recorded one's, in f32 and f64.
TEST(LayerNorm, OutputIsTheSameWhetherRecordedOrNot) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = random({37, 128}, 93, -3, 3).to(dtype);
    const Tensor w = random({128}, 94).to(dtype), b = random({128}, 95).to(dtype);
    const Var recorded = ag::layer_norm(Var(x, true), {128}, Var(w, true), Var(b));
    ASSERT_TRUE(recorded.requires_grad());
    const Var constant = ag::layer_norm(Var(x), {128}, Var(w), Var(b));
    EXPECT_FALSE(constant.requires_grad());
    Var under_no_grad;
    {
      ag::NoGrad no_grad;
      under_no_grad = ag::layer_norm(Var(x, true), {128}, Var(w, true), Var(b, true));
    }
    EXPECT_FALSE(under_no_grad.requires_grad());
    EXPECT_EQ(constant.value().to_vector(), recorded.value().to_vector()) << dtype_name(dtype);
    EXPECT_EQ(under_no_grad.value().to_vector(), recorded.value().to_vector()) << dtype_name(dtype);
  }
}

TEST(Embedding, MatchesFiniteDifferencesWithRepeatedIndices) {
  const Tensor w = random({5, 3}, 100);
  const std::vector<std::int64_t> indices = {4, 0, 4, 2, 2, 2};
  for (const Shape& shape : {Shape{6}, Shape{2, 3}}) {
    expect_gradcheck("embedding " + shape_string(shape),
                     [&](const std::vector<Var>& v) { return ag::embedding(v[0], indices, shape); },
                     {w});
  }
  const Tensor e = ag::embedding(Var(w), indices, {2, 3}).value();
  EXPECT_EQ(e.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(e.at({1, 0, 2}), w.at({2, 2}));
  Var wv(w, true);
  ag::sum(ag::embedding(wv, indices, {6})).backward();
  // Row r's gradient counts its uses: row 2 three times, row 1 and 3 never.
  EXPECT_EQ(wv.grad().at({2, 1}), 3.0);
  EXPECT_EQ(wv.grad().at({1, 0}), 0.0);
}

TEST(Dropout, MatchesFiniteDifferencesAndPhiloxDecisions) {
  for (const Shape& shape : {Shape{9}, Shape{3, 5}, Shape{2, 3, 4, 5}}) {
    const Tensor x = random(shape, 110);
    for (const double p : {0.0, 0.3, 0.7}) {
      expect_gradcheck("dropout p " + std::to_string(p) + " " + shape_string(shape),
                       [p](const std::vector<Var>& v) { return ag::dropout(v[0], p, 42, 7); }, {x});
    }
  }
  // Entry (n, r, c) of [N, R, C] is kept exactly when dropout_keep(seed, offset, n, r, c, p).
  const double p = 0.4;
  const Tensor x = Tensor::full({2, 3, 40, 50}, 1.0, DType::f64);
  const Tensor y = ag::dropout(Var(x), p, 1234, 1ull << 33 | 5).value();
  std::int64_t kept = 0;
  for (std::int64_t n = 0; n < 6; ++n) {
    for (std::int64_t r = 0; r < 40; ++r) {
      for (std::int64_t c = 0; c < 50; ++c) {
        const bool keep = dropout_keep(1234, 1ull << 33 | 5, n, r, c, p);
        ASSERT_EQ(y.at({n / 3, n % 3, r, c}), keep ? 1 / (1 - p) : 0.0);
        kept += keep;
      }
    }
  }
  // 12000 draws: the kept fraction is 0.6 within 4 standard deviations (0.018).
  EXPECT_NEAR(kept / 12000.0, 1 - p, 0.018);
}

TEST(CrossEntropy, MatchesFiniteDifferences) {
  const Tensor logits = random({5, 4}, 120, -3, 3);
  const std::vector<std::int64_t> targets = {0, 3, -100, 1, 3};
  for (const double smoothing : {0.0, 0.1, 1.0}) {
    for (const std::int64_t ignore : {-100, 3}) {
      ag::CrossEntropyOptions o;
      o.label_smoothing = smoothing;
      o.ignore_index = ignore;
      std::vector<std::int64_t> t = targets;
      if (ignore == 3) t[2] = 2;
      expect_gradcheck("cross_entropy smoothing " + std::to_string(smoothing) + " ignore " +
                           std::to_string(ignore),
                       [=](const std::vector<Var>& v) { return ag::cross_entropy(v[0], t, o); },
                       {logits});
    }
  }
}

TEST(CrossEntropy, MatchesPyTorchDefinition) {
  // loss = mean over counted rows of -(1 - eps) log p[t] - eps / C sum_c log p[c], written here
  // from softmax probabilities.
  const Tensor logits = random({4, 3}, 130, -2, 2);
  const std::vector<std::int64_t> t = {2, -1, 0, 2};
  ag::CrossEntropyOptions o;
  o.ignore_index = -1;
  o.label_smoothing = 0.2;
  double expected = 0;
  for (const std::int64_t n : {0, 2, 3}) {
    double z = 0;
    for (std::int64_t c = 0; c < 3; ++c) z += std::exp(logits.at({n, c}));
    double smooth = 0;
    for (std::int64_t c = 0; c < 3; ++c) smooth += std::log(std::exp(logits.at({n, c})) / z);
    expected += -(0.8) * std::log(std::exp(logits.at({n, t[n]})) / z) - 0.2 / 3 * smooth;
  }
  expected /= 3;
  EXPECT_NEAR(ag::cross_entropy(Var(logits), t, o).value().at({}), expected, 1e-14);
  // Every row ignored: 0 / 0, as PyTorch.
  EXPECT_TRUE(std::isnan(ag::cross_entropy(Var(logits), {-1, -1, -1, -1}, o).value().at({})));
}

// The ops of a training step split their loops over the threads (ops::for_range, layer norm's
// fixed chunks): values and gradients are bitwise the same on 1, 2 and 3 threads, with batches
// whose sizes split unevenly; in f64 too, where sums in double taken in another order show.
TEST(TrainingOps, ResultsDoNotDependOnTheThreadCount) {
  const int saved = num_threads();
  for (const auto& [rows, dtype] : std::vector<std::pair<std::int64_t, DType>>{
           {448, DType::f32}, {333, DType::f32}, {448, DType::f64}}) {
    const Tensor x0 = random({rows, 128}, 150).to(dtype);
    const Tensor w1 = random({512, 128}, 151, -0.1, 0.1).to(dtype);
    const Tensor b1 = random({512}, 152).to(dtype);
    const Tensor w2 = random({128, 512}, 153, -0.1, 0.1).to(dtype);
    const Tensor gamma = random({128}, 154, 0.5, 1.5).to(dtype);
    const Tensor beta = random({128}, 155).to(dtype);
    const Tensor wo = random({300, 128}, 156, -0.1, 0.1).to(dtype);
    std::vector<std::int64_t> t(static_cast<std::size_t>(rows));
    for (std::size_t n = 0; n < t.size(); ++n) t[n] = (n * 53) % 300;
    std::vector<Tensor> first;
    for (const int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Var x(x0, true), W1(w1, true), B1(b1, true), W2(w2, true), G(gamma, true), Bt(beta, true);
      Var Wo(wo, true);
      // pre-norm feed-forward block with a residual, then the output layer and the loss
      const Var h = ag::layer_norm(x, {128}, G, Bt);
      const Var y = x + ag::linear(ag::relu(ag::linear(h, W1, B1)), W2);
      const Var loss = ag::cross_entropy(ag::linear(y, Wo), t);
      loss.backward();
      const std::vector<Tensor> now = {loss.value(), y.value(), x.grad(),  W1.grad(), B1.grad(),
                                       W2.grad(),    G.grad(),  Bt.grad(), Wo.grad()};
      if (first.empty()) {
        first = now;
        continue;
      }
      for (std::size_t i = 0; i < now.size(); ++i) {
        expect_bitwise_equal(now[i], first[i],
                             "tensor " + std::to_string(i) + " of " + std::to_string(rows) +
                                 " rows on " + std::to_string(threads));
      }
    }
  }
  set_num_threads(saved);
}

// Rows go in chunks fixed by the shape and losses add in row order: the loss and the gradient
// are bitwise the same on any number of threads, f32 and f64, with ignored rows and smoothing.
TEST(CrossEntropy, ResultsDoNotDependOnTheThreadCount) {
  const int saved = num_threads();
  std::vector<std::int64_t> t(700);
  for (std::size_t n = 0; n < t.size(); ++n) t[n] = n % 9 == 4 ? -100 : (n * 37) % 300;
  ag::CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  for (const DType dtype : {DType::f32, DType::f64}) {
    const Tensor logits = random({700, 300}, 140, -6, 6).to(dtype);
    std::vector<Tensor> first;
    for (const int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Var x(logits, true);
      Var loss = ag::cross_entropy(x, t, o);
      loss.backward();
      const std::vector<Tensor> now = {loss.value(), x.grad()};
      if (first.empty()) {
        first = now;
        continue;
      }
      expect_bitwise_equal(now[0], first[0], "loss on " + std::to_string(threads));
      expect_bitwise_equal(now[1], first[1], "dlogits on " + std::to_string(threads));
    }
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace qkv::testing
