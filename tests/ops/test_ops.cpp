// qkv::ops, the tape-free tensor math, against formulas evaluated element by element in the
// test (f64), and its argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <qkv/qkv.hpp>
#include <string>
#include <vector>

namespace qkv::testing {
namespace {

Tensor random(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64, double low = -1,
              double high = 1) {
  Generator generator(seed);
  return Tensor::uniform(shape, low, high, generator, dtype);
}

// The element of x at the flat row-major index n of shape `shape`, x broadcast to it (numpy).
double broadcast_at(const Tensor& x, const Shape& shape, std::int64_t n) {
  Shape index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = n % shape[d];
    n /= shape[d];
  }
  Shape own(x.shape().size());
  const std::size_t lead = shape.size() - own.size();
  for (std::size_t d = 0; d < own.size(); ++d) own[d] = x.size(d) == 1 ? 0 : index[d + lead];
  return x.at(own);
}

void expect_message_names(const std::function<void()>& call, const std::string& argument) {
  try {
    call();
    ADD_FAILURE() << "no qkv::Error; expected one naming " << argument;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(argument), std::string::npos) << e.what();
  }
}

TEST(OpsArithmetic, BroadcastResultsMatchTheIndexFormula) {
  struct Case {
    Shape a, b, out;
  };
  // Equal shapes, a repeating side on either hand (the period path), size-1 middles and a scalar
  // (the general path).
  const std::vector<Case> cases = {
      {{2, 3}, {2, 3}, {2, 3}},          {{4, 2, 3}, {3}, {4, 2, 3}},
      {{2, 3}, {5, 2, 3}, {5, 2, 3}},    {{4, 1, 3}, {2, 1}, {4, 2, 3}},
      {{2, 1, 4}, {1, 3, 1}, {2, 3, 4}}, {{}, {2, 3}, {2, 3}},
      {{1, 1, 3}, {2, 2, 3}, {2, 2, 3}}};
  std::uint64_t seed = 1;
  for (const DType dtype : {DType::f64, DType::f32}) {
    for (const Case& c : cases) {
      const Tensor a = random(c.a, seed++, dtype);
      const Tensor b = random(c.b, seed++, dtype, 0.5, 2.0);
      const Tensor sum = ops::add(a, b), difference = ops::sub(a, b);
      const Tensor product = ops::mul(a, b), quotient = ops::div(a, b);
      ASSERT_EQ(sum.shape(), c.out) << shape_string(c.a) << " " << shape_string(c.b);
      ASSERT_EQ(quotient.dtype(), dtype);
      const std::vector<double> s = sum.to_vector(), d = difference.to_vector(),
                                p = product.to_vector(), q = quotient.to_vector();
      for (std::int64_t n = 0; n < sum.numel(); ++n) {
        const double x = broadcast_at(a, c.out, n), y = broadcast_at(b, c.out, n);
        const auto round = [&](double v) {
          return dtype == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v;
        };
        // f32: each result rounded once from the exact operation on the f32 operands.
        EXPECT_EQ(s[n], round(x + y)) << n;
        EXPECT_EQ(d[n], round(x - y)) << n;
        EXPECT_EQ(p[n], round(x * y)) << n;
        EXPECT_EQ(q[n], round(x / y)) << n;
      }
    }
  }
  const Tensor x = random({3, 2}, 9);
  const std::vector<double> shifted = ops::add(x, 1.5).to_vector(),
                            scaled = ops::mul(x, -2.0).to_vector(), v = x.to_vector();
  for (std::size_t n = 0; n < v.size(); ++n) {
    EXPECT_EQ(shifted[n], v[n] + 1.5);
    EXPECT_EQ(scaled[n], v[n] * -2.0);
  }
}

TEST(OpsArithmetic, HalfOperandsAreAddedInF32AndRoundedOnce) {
  for (const DType half : {DType::bf16, DType::f16}) {
    const Tensor a = random({4, 8}, 3, DType::f32).to(half), b = random({8}, 4).to(half);
    const Tensor sum = ops::add(a, b);
    ASSERT_EQ(sum.dtype(), half);
    const Tensor expected = ops::add(a.to(DType::f32), b.to(DType::f32)).to(half);
    EXPECT_EQ(sum.to_vector(), expected.to_vector()) << dtype_name(half);
  }
}

TEST(OpsReduce, SumMeanMaxAlongEveryDimensionMatchLoops) {
  const Tensor x = random({3, 4, 5}, 11);
  for (std::int64_t dim = 0; dim < 3; ++dim) {
    for (const bool keepdim : {false, true}) {
      const Tensor s = ops::sum(x, dim, keepdim), m = ops::mean(x, dim, keepdim),
                   top = ops::max(x, dim, keepdim);
      Shape shape = x.shape();
      if (keepdim) {
        shape[dim] = 1;
      } else {
        shape.erase(shape.begin() + dim);
      }
      ASSERT_EQ(s.shape(), shape);
      ASSERT_EQ(top.shape(), shape);
      for (std::int64_t i = 0; i < 3; ++i) {
        for (std::int64_t j = 0; j < 4; ++j) {
          for (std::int64_t k = 0; k < 5; ++k) {
            Shape index = {i, j, k};
            if (index[dim] != 0) continue;
            double total = 0, best = -std::numeric_limits<double>::infinity();
            for (std::int64_t r = 0; r < x.size(dim); ++r) {
              index[dim] = r;
              total += x.at(index);
              best = std::max(best, x.at(index));
            }
            index[dim] = 0;
            if (!keepdim) index.erase(index.begin() + dim);
            EXPECT_NEAR(s.at(index), total, 1e-15);
            EXPECT_NEAR(m.at(index), total / static_cast<double>(x.size(dim)), 1e-15);
            EXPECT_EQ(top.at(index), best);
          }
        }
      }
    }
  }
  double total = 0;
  for (const double v : x.to_vector()) total += v;
  EXPECT_NEAR(ops::sum(x).at({}), total, 1e-14);
  EXPECT_EQ(ops::mean(x).shape(), Shape{});
  expect_message_names([] { ops::max(Tensor::zeros({2, 0}, DType::f64), 1); }, "x");
  expect_message_names([&] { ops::sum(x, 3); }, "dim");
}

TEST(OpsActivation, EachMatchesItsFormula) {
  const Tensor x64 = random({64}, 21, DType::f64, -6, 6);
  for (const DType dtype : {DType::f64, DType::f32}) {
    const Tensor x = x64.to(dtype);
    const std::vector<double> v = x.to_vector();
    const double tolerance = dtype == DType::f64 ? 1e-15 : 4e-7;
    const auto check = [&](const char* name, const Tensor& y, auto formula) {
      ASSERT_EQ(y.dtype(), dtype) << name;
      const std::vector<double> got = y.to_vector();
      for (std::size_t n = 0; n < v.size(); ++n) {
        const double want = formula(v[n]);
        EXPECT_NEAR(got[n], want, tolerance * std::max(1.0, std::fabs(want)))
            << name << " at " << v[n];
      }
    };
    check("exp", ops::exp(x), [](double t) { return std::exp(t); });
    check("tanh", ops::tanh(x), [](double t) { return std::tanh(t); });
    check("sigmoid", ops::sigmoid(x), [](double t) { return 1 / (1 + std::exp(-t)); });
    check("relu", ops::relu(x), [](double t) { return t > 0 ? t : 0.0; });
    check("gelu", ops::gelu(x),
          [](double t) { return t * 0.5 * (1 + std::erf(t / std::sqrt(2))); });
    check("gelu tanh", ops::gelu(x, ops::Gelu::tanh), [](double t) {
      return 0.5 * t * (1 + std::tanh(std::sqrt(2 / M_PI) * (t + 0.044715 * t * t * t)));
    });
    check("log", ops::log(ops::exp(x)), [](double t) { return t; });
  }
  // A strided view goes through the same formulas.
  const Tensor wide = random({4, 6}, 22);
  const Tensor view = wide.transpose(0, 1);
  const Tensor r = ops::relu(view);
  for (std::int64_t i = 0; i < 6; ++i) {
    for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(r.at({i, j}), std::max(0.0, wide.at({j, i})));
  }
  expect_message_names([] { ops::exp(Tensor::zeros({2}, DType::bf16)); }, "x");
}

TEST(OpsSoftmax, RowsMatchTheFormulaAndMaskedRowsGiveZeros) {
  Tensor x = random({2, 5, 3}, 31, DType::f64, -4, 4);
  for (std::int64_t j = 0; j < 5; ++j) x.set({1, j, 2}, -std::numeric_limits<double>::infinity());
  const Tensor p = ops::softmax(x, 1), lp = ops::log_softmax(x, -2);
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t k = 0; k < 3; ++k) {
      if (b == 1 && k == 2) {
        for (std::int64_t j = 0; j < 5; ++j) {
          EXPECT_EQ(p.at({b, j, k}), 0.0);
          EXPECT_EQ(lp.at({b, j, k}), -std::numeric_limits<double>::infinity());
        }
        continue;
      }
      double total = 0;
      for (std::int64_t j = 0; j < 5; ++j) total += std::exp(x.at({b, j, k}));
      for (std::int64_t j = 0; j < 5; ++j) {
        EXPECT_NEAR(p.at({b, j, k}), std::exp(x.at({b, j, k})) / total, 1e-15);
        EXPECT_NEAR(lp.at({b, j, k}), x.at({b, j, k}) - std::log(total), 1e-14);
      }
    }
  }
}

TEST(OpsLayerNorm, MatchesTheFormulaWithAndWithoutAffine) {
  const Tensor x = random({3, 2, 8}, 41, DType::f64, -3, 3);
  const Tensor w = random({8}, 42), b = random({8}, 43);
  for (const bool affine : {false, true}) {
    const Tensor y = affine ? ops::layer_norm(x, {8}, w, b, 1e-5) : ops::layer_norm(x, {8});
    for (std::int64_t r = 0; r < 6; ++r) {
      const std::int64_t i = r / 2, j = r % 2;
      double mean = 0, var = 0;
      for (std::int64_t k = 0; k < 8; ++k) mean += x.at({i, j, k}) / 8;
      for (std::int64_t k = 0; k < 8; ++k) var += std::pow(x.at({i, j, k}) - mean, 2) / 8;
      for (std::int64_t k = 0; k < 8; ++k) {
        double want = (x.at({i, j, k}) - mean) / std::sqrt(var + 1e-5);
        if (affine) want = want * w.at({k}) + b.at({k});
        EXPECT_NEAR(y.at({i, j, k}), want, 1e-13);
      }
    }
  }
  expect_message_names([&] { ops::layer_norm(x, {4}); }, "normalized_shape");
  expect_message_names([&] { ops::layer_norm(x, {8}, random({7}, 1)); }, "weight");
}

TEST(OpsMatmul, BatchedBroadcastAndTransposedViewsMatchTripleLoops) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{5, 4}, {4, 3}}, {{2, 5, 4}, {4, 3}}, {{2, 5, 4}, {2, 4, 3}}, {{3, 1, 5, 4}, {2, 4, 3}}};
  std::uint64_t seed = 50;
  for (const Case& c : cases) {
    const Tensor a = random(c.a, seed++), b = random(c.b, seed++);
    const Tensor y = ops::matmul(a, b);
    const std::int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
    Shape shape = y.shape();
    shape.pop_back();
    shape.pop_back();
    std::int64_t batches = 1;
    for (const std::int64_t s : shape) batches *= s;
    for (std::int64_t p = 0; p < batches; ++p) {
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t n = 0; n < N; ++n) {
          Shape out_index = shape;
          std::int64_t rest = p;
          for (std::size_t d = shape.size(); d-- > 0;) {
            out_index[d] = rest % shape[d];
            rest /= shape[d];
          }
          Shape a_index(out_index.end() - (a.dim() - 2), out_index.end());
          Shape b_index(out_index.end() - (b.dim() - 2), out_index.end());
          for (std::size_t d = 0; d < a_index.size(); ++d) {
            if (a.size(static_cast<std::int64_t>(d)) == 1) a_index[d] = 0;
          }
          for (std::size_t d = 0; d < b_index.size(); ++d) {
            if (b.size(static_cast<std::int64_t>(d)) == 1) b_index[d] = 0;
          }
          double want = 0;
          for (std::int64_t k = 0; k < K; ++k) {
            Shape ai = a_index, bi = b_index;
            ai.insert(ai.end(), {m, k});
            bi.insert(bi.end(), {k, n});
            want += a.at(ai) * b.at(bi);
          }
          Shape yi = out_index;
          yi.insert(yi.end(), {m, n});
          EXPECT_NEAR(y.at(yi), want, 1e-14) << shape_string(c.a) << " @ " << shape_string(c.b);
        }
      }
    }
  }
  // b as the transpose of a contiguous [N, K] (read in place, the gemm transposing it) equals b
  // made contiguous, to the last bits of a different summation order.
  const Tensor a = random({6, 5}, 60), w = random({3, 5}, 61);
  const std::vector<double> in_place = ops::matmul(a, w.transpose(0, 1)).to_vector();
  const std::vector<double> copied = ops::matmul(a, w.transpose(0, 1).contiguous()).to_vector();
  ASSERT_EQ(in_place.size(), copied.size());
  for (std::size_t n = 0; n < copied.size(); ++n) EXPECT_NEAR(in_place[n], copied[n], 1e-15);
  expect_message_names([&] { ops::matmul(a, random({4, 3}, 1)); }, "b");
  expect_message_names([&] { ops::matmul(random({5}, 1), a); }, "a");
}

TEST(OpsMatmul, HalfOperandsMultiplyInF32AndRoundOnce) {
  for (const DType half : {DType::bf16, DType::f16}) {
    const Tensor a = random({7, 16}, 70, DType::f32).to(half);
    const Tensor b = random({16, 5}, 71, DType::f32).to(half);
    const Tensor y = ops::matmul(a, b);
    ASSERT_EQ(y.dtype(), half);
    const Tensor exact = ops::matmul(a.to(DType::f64), b.to(DType::f64));
    // Products of half values are exact in f64 and in f32 up to the f32 sums: y is exact's
    // rounding to half, within one step of the f32 sum's error.
    const std::vector<double> got = y.to_vector(), want = exact.to(half).to_vector();
    for (std::size_t n = 0; n < got.size(); ++n) {
      EXPECT_NEAR(got[n], want[n], std::fabs(want[n]) * (half == DType::bf16 ? 8e-3 : 1e-3))
          << dtype_name(half) << " " << n;
    }
  }
}

TEST(OpsLinear, EqualsMatmulWithTheWeightTransposedPlusTheBias) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    const Tensor x = random({2, 3, 8}, 80, dtype), w = random({5, 8}, 81, dtype);
    const Tensor b = random({5}, 82, dtype);
    const Tensor y = ops::linear(x, w, b);
    ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
    const Tensor xw = ops::matmul(x, w.transpose(0, 1));
    for (std::int64_t i = 0; i < 6; ++i) {
      for (std::int64_t n = 0; n < 5; ++n) {
        const double want = xw.at({i / 3, i % 3, n}) + b.at({n});
        EXPECT_NEAR(y.at({i / 3, i % 3, n}), want, dtype == DType::f64 ? 1e-14 : 2e-6);
      }
    }
    // Rows 2..4 of a packed [12, 8] weight, read in place with its row stride.
    const Tensor packed = random({12, 8}, 83, dtype);
    const Tensor rows = packed.slice(0, 2, 5);
    EXPECT_EQ(ops::linear(x, rows).to_vector(), ops::linear(x, rows.contiguous()).to_vector());
  }
  const Tensor x = random({3, 8}, 84);
  expect_message_names([&] { ops::linear(x, random({5, 7}, 1)); }, "x");
  expect_message_names([&] { ops::linear(x, random({5, 8}, 1), random({4}, 2)); }, "bias");
  expect_message_names([&] { ops::linear(x, random({5, 8}, 1, DType::f32)); }, "weight");
}

TEST(OpsConcat, PiecesComeBackAsSlices) {
  const Tensor a = random({2, 3, 4}, 90), b = random({2, 1, 4}, 91), c = random({2, 2, 4}, 92);
  const Tensor y = ops::concat({a, b, c}, 1);
  ASSERT_EQ(y.shape(), (Shape{2, 6, 4}));
  EXPECT_EQ(y.slice(1, 0, 3).contiguous().to_vector(), a.to_vector());
  EXPECT_EQ(y.slice(1, 3, 4).contiguous().to_vector(), b.to_vector());
  EXPECT_EQ(y.slice(1, 4, 6).contiguous().to_vector(), c.to_vector());
  const Tensor h = ops::concat({a.to(DType::bf16), a.to(DType::bf16)}, 0);
  EXPECT_EQ(h.dtype(), DType::bf16);
  expect_message_names([&] { ops::concat({a, random({2, 3, 5}, 1)}, 1); }, "xs[1]");
  expect_message_names([&] { ops::concat({a, a.to(DType::f32)}, 0); }, "xs[1]");
  expect_message_names([] { ops::concat({}, 0); }, "xs");
}

TEST(OpsPackRows, ValidRowsComeOutInOrderAndGoBackWithZerosPastEachLength) {
  const Tensor x = random({3, 4, 2, 3}, 93);  // [B, T, H, D]
  const std::vector<std::int64_t> lengths = {2, 0, 4};
  const Tensor packed = ops::pack_rows(x, lengths);
  ASSERT_EQ(packed.shape(), (Shape{6, 2, 3}));
  // Row r of the packed rows is (b, t) in batch order.
  const std::vector<std::pair<std::int64_t, std::int64_t>> rows = {{0, 0}, {0, 1}, {2, 0},
                                                                   {2, 1}, {2, 2}, {2, 3}};
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto [b, t] = rows[r];
    EXPECT_EQ(packed.slice(0, r, r + 1).contiguous().to_vector(),
              x.slice(0, b, b + 1).slice(1, t, t + 1).contiguous().to_vector())
        << "row " << r;
  }
  const Tensor back = ops::unpack_rows(packed, lengths, 4);
  ASSERT_EQ(back.shape(), x.shape());
  for (std::int64_t b = 0; b < 3; ++b) {
    for (std::int64_t t = 0; t < 4; ++t) {
      const std::vector<double> row =
          back.slice(0, b, b + 1).slice(1, t, t + 1).contiguous().to_vector();
      if (t < lengths[static_cast<std::size_t>(b)]) {
        EXPECT_EQ(row, x.slice(0, b, b + 1).slice(1, t, t + 1).contiguous().to_vector());
      } else {
        EXPECT_EQ(row, std::vector<double>(6, 0.0)) << "b " << b << " t " << t;
      }
    }
  }
  // A strided view packs as its contiguous copy; a bf16 batch keeps its dtype.
  const Tensor view = x.transpose(2, 3);
  EXPECT_EQ(ops::pack_rows(view, lengths).to_vector(),
            ops::pack_rows(view.contiguous(), lengths).to_vector());
  EXPECT_EQ(ops::pack_rows(x.to(DType::bf16), lengths).dtype(), DType::bf16);
  EXPECT_EQ(ops::pack_rows(x, {4, 4, 4}).to_vector(), x.to_vector());
  // A batch over kChunkElements, copied on the threads: the rows of slices and concat.
  const Tensor big = random({9, 70, 64}, 94, DType::f32);
  const std::vector<std::int64_t> ragged = {70, 3, 0, 41, 70, 12, 1, 69, 35};
  std::vector<Tensor> pieces;
  for (std::int64_t b = 0; b < 9; ++b) {
    const std::int64_t l = ragged[static_cast<std::size_t>(b)];
    if (l > 0) pieces.push_back(big.slice(0, b, b + 1).slice(1, 0, l).reshape({l, 64}));
  }
  const Tensor big_packed = ops::pack_rows(big, ragged);
  EXPECT_EQ(big_packed.to_vector(), ops::concat(pieces, 0).to_vector());
  const Tensor big_back = ops::unpack_rows(big_packed, ragged, 70);
  EXPECT_EQ(ops::pack_rows(big_back, ragged).to_vector(), big_packed.to_vector());
  for (std::int64_t b = 0; b < 9; ++b) {
    const std::vector<double> tail =
        big_back.slice(0, b, b + 1).slice(1, ragged[static_cast<std::size_t>(b)], 70).to_vector();
    EXPECT_EQ(tail, std::vector<double>(tail.size(), 0.0)) << "sequence " << b;
  }
  expect_message_names([&] { ops::pack_rows(x, {1, 2}); }, "lengths");
  expect_message_names([&] { ops::pack_rows(x, {1, 5, 0}); }, "lengths");
  expect_message_names([&] { ops::pack_rows(random({3}, 1), {1, 1, 1}); }, "x");
  expect_message_names([&] { ops::unpack_rows(packed, lengths, 3); }, "lengths");
  expect_message_names([&] { ops::unpack_rows(packed, {2, 1, 4}, 4); }, "x");
}

}  // namespace
}  // namespace qkv::testing
