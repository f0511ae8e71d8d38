// Gradients of tensors a score mod captured (qkv/captured.hpp): a learned relative-position table
// against the bias option's dbias summed per bucket (an independent path: the built-in bias and
// its backward), mods reading several elements and tensors against finite differences, both
// backends, any thread count bitwise, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "fused_case.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

constexpr std::int64_t kBuckets = 9;

// Relative positions i - j clipped to [-4, 4]: bucket 0..8.
std::int64_t bucket(std::int64_t i, std::int64_t j) {
  return std::clamp<std::int64_t>(i - j, -4, 4) + 4;
}

struct Problem {
  Tensor q, k, v, dout, table;
};

// q [B, T, Hq, D], k, v [B, T, Hk, D], table [Hq, kBuckets].
Problem make_problem(std::int64_t B, std::int64_t T, std::int64_t Hq, std::int64_t Hk,
                     std::int64_t D, DType dtype, std::uint64_t seed) {
  Generator g(seed);
  return {Tensor::randn({B, T, Hq, D}, g, dtype), Tensor::randn({B, T, Hk, D}, g, dtype),
          Tensor::randn({B, T, Hk, D}, g, dtype), Tensor::randn({B, T, Hq, D}, g, dtype),
          Tensor::randn({Hq, kBuckets}, g, dtype)};
}

// The table spread to the dense bias [Hq, T, T] the bias option takes.
Tensor dense_bias(const Tensor& table, std::int64_t T) {
  const std::int64_t H = table.size(0);
  Tensor bias = Tensor::empty({H, T, T}, table.dtype());
  for (std::int64_t h = 0; h < H; ++h) {
    for (std::int64_t i = 0; i < T; ++i) {
      for (std::int64_t j = 0; j < T; ++j) bias.set({h, i, j}, table.at({h, bucket(i, j)}));
    }
  }
  return bias;
}

auto relative_mod(const Captured& table) {
  return [table](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return s + table.at(s, h, bucket(i, j));
  };
}

double max_relative(const Tensor& got, const Tensor& want) {
  return max_error(got, want) / std::max(1.0, max_abs(want));
}

class RelativeTable : public ::testing::TestWithParam<std::tuple<DType, Backend>> {};

TEST_P(RelativeTable, GradientIsTheBiasGradientSummedPerBucket) {
  const auto [dtype, backend] = GetParam();
  const std::int64_t B = 2, T = 150, Hq = 4, Hk = 2, D = 16;
  const Problem pr = make_problem(B, T, Hq, Hk, D, dtype, 11);
  const Captured table(pr.table);
  const auto mod = relative_mod(table);
  const BlockMask blocks = create_block_mask(masks::causal(), 1, 1, T, T);
  FlexOptions options;
  options.backend = backend;
  const AttentionOutput f = flex_attention(pr.q, pr.k, pr.v, mod, blocks, options);
  const AttentionGrads g = flex_attention_backward(pr.dout, pr.q, pr.k, pr.v, f.out, f.lse, mod,
                                                   blocks, options, {table});

  AttentionOptions ref;
  ref.backend = backend;
  ref.causal = Causal::top_left;
  ref.bias = dense_bias(pr.table, T);
  const AttentionOutput fr = attention_forward(pr.q, pr.k, pr.v, ref);
  const AttentionGrads gr = attention_backward(pr.dout, pr.q, pr.k, pr.v, fr.out, fr.lse, ref);
  Tensor want = Tensor::zeros({Hq, kBuckets}, DType::f64);
  for (std::int64_t h = 0; h < Hq; ++h) {
    for (std::int64_t i = 0; i < T; ++i) {
      for (std::int64_t j = 0; j <= i; ++j) {
        const std::int64_t c = bucket(i, j);
        want.set({h, c}, want.at({h, c}) + gr.dbias.at({h, i, j}));
      }
    }
  }
  const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
  EXPECT_LT(max_relative(f.out, fr.out), tol);
  EXPECT_LT(max_relative(g.dq, gr.dq), tol);
  EXPECT_LT(max_relative(g.dk, gr.dk), tol);
  ASSERT_EQ(g.captured.size(), 1u);
  EXPECT_EQ(g.captured[0].shape(), pr.table.shape());
  EXPECT_EQ(g.captured[0].dtype(), dtype);
  // The sums run in other orders (per tile, then per item), so f32 agrees to its rounding only.
  EXPECT_LT(max_relative(g.captured[0], want), dtype == DType::f64 ? 1e-11 : 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Backends, RelativeTable,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f64),
                                            ::testing::Values(Backend::reference, Backend::cpu)));

// loss = sum(out * dout); d loss / d x[e] by central differences over the elements of x.
Tensor numeric_gradient(const std::function<Tensor()>& out, const Tensor& dout, Tensor& x) {
  Tensor grad = Tensor::empty(x.shape(), DType::f64);
  const double h = 1e-6;
  const std::vector<double> values = x.to_vector();
  const auto loss = [&] {
    const std::vector<double> o = out().to_vector(), d = dout.to_vector();
    double sum = 0;
    for (std::size_t n = 0; n < o.size(); ++n) sum += o[n] * d[n];
    return sum;
  };
  double* data = x.data_as<double>();
  for (std::int64_t e = 0; e < x.numel(); ++e) {
    data[e] = values[static_cast<std::size_t>(e)] + h;
    const double up = loss();
    data[e] = values[static_cast<std::size_t>(e)] - h;
    const double down = loss();
    data[e] = values[static_cast<std::size_t>(e)];
    grad.data_as<double>()[e] = (up - down) / (2 * h);
  }
  return grad;
}

// A mod reading two tensors, one of them twice per score, multiplying s by one of them (so the
// slope ds'/ds depends on a captured value too), with a sliding window, GQA and dropout.
TEST(CapturedGradients, SeveralReadsAndTensorsMatchFiniteDifferences) {
  for (const Backend backend : {Backend::reference, Backend::cpu}) {
    const std::int64_t B = 1, T = 70, Hq = 2, Hk = 1, D = 8;
    Problem pr = make_problem(B, T, Hq, Hk, D, DType::f64, 5);
    Generator g(9);
    Tensor gain = Tensor::uniform({Hq}, 0.5, 1.5, g, DType::f64);
    const Captured table(pr.table), gains(gain);
    const auto mod = [table, gains](auto s, std::int64_t, std::int64_t h, std::int64_t i,
                                    std::int64_t j) {
      return s * gains.at(s, h) + table.at(s, h, bucket(i, j)) - 0.5 * table.at(s, h, 4);
    };
    const BlockMask blocks = create_block_mask(masks::sliding_window(20, 5), 1, 1, T, T);
    FlexOptions options;
    options.backend = backend;
    options.dropout_p = 0.2;
    options.seed = 77;
    const AttentionOutput f = flex_attention(pr.q, pr.k, pr.v, mod, blocks, options);
    const AttentionGrads grads = flex_attention_backward(pr.dout, pr.q, pr.k, pr.v, f.out, f.lse,
                                                         mod, blocks, options, {table, gains});
    ASSERT_EQ(grads.captured.size(), 2u);
    const auto out = [&] { return flex_attention(pr.q, pr.k, pr.v, mod, blocks, options).out; };
    const Tensor want_table = numeric_gradient(out, pr.dout, pr.table);
    const Tensor want_gain = numeric_gradient(out, pr.dout, gain);
    EXPECT_LT(max_relative(grads.captured[0], want_table), 1e-7);
    EXPECT_LT(max_relative(grads.captured[1], want_gain), 1e-7);
    // Only the tensors asked for get a gradient; the others' reads change nothing else.
    const AttentionGrads only_gain = flex_attention_backward(pr.dout, pr.q, pr.k, pr.v, f.out,
                                                             f.lse, mod, blocks, options, {gains});
    ASSERT_EQ(only_gain.captured.size(), 1u);
    EXPECT_TRUE(bitwise_equal({only_gain.captured[0].to_vector(), only_gain.dq.to_vector()},
                              {grads.captured[1].to_vector(), grads.dq.to_vector()}));
  }
}

TEST(CapturedGradients, BitwiseTheSameOnAnyThreadCount) {
  const std::int64_t T = 400;
  const Problem pr = make_problem(2, T, 4, 4, 32, DType::f32, 3);
  const Captured table(pr.table);
  const auto mod = relative_mod(table);
  const BlockMask blocks = create_block_mask(masks::Full{}, 1, 1, T, T);
  const AttentionOutput f = flex_attention(pr.q, pr.k, pr.v, mod, blocks);
  std::vector<std::vector<double>> first;
  const int before = num_threads();
  for (const int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const AttentionGrads g =
        flex_attention_backward(pr.dout, pr.q, pr.k, pr.v, f.out, f.lse, mod, blocks, {}, {table});
    const std::vector<std::vector<double>> got = {g.captured[0].to_vector(), g.dq.to_vector()};
    if (first.empty()) {
      first = got;
    } else {
      EXPECT_TRUE(bitwise_equal(got, first)) << threads << " threads";
    }
  }
  set_num_threads(before);
}

// scores::relative_bias, the runtime value, gives the lambda's bits (the same additions in the same
// order), its table gradient included, on both backends; composed with a soft cap after it, the
// chain through the cap's slope matches finite differences.
TEST(RelativeBiasValue, EqualsTheLambdaAndChainsThroughTheCap) {
  for (const Backend backend : {Backend::reference, Backend::cpu}) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      const std::int64_t T = 90;
      Problem pr = make_problem(2, T, 4, 2, 16, dtype, 21);
      const Captured table(pr.table);
      std::vector<std::int64_t> buckets;
      for (std::int64_t offset = -(T - 1); offset <= T - 1; ++offset) {
        buckets.push_back(bucket(0, offset));  // i - j = -offset
      }
      const ScoreMod value = scores::relative_bias(table, buckets);
      const auto lambda = relative_mod(table);
      const BlockMask blocks = create_block_mask(masks::causal(), 1, 1, T, T);
      FlexOptions options;
      options.backend = backend;
      const AttentionOutput a = flex_attention(pr.q, pr.k, pr.v, value, blocks, options);
      const AttentionOutput b = flex_attention(pr.q, pr.k, pr.v, lambda, blocks, options);
      const AttentionGrads ga = flex_attention_backward(pr.dout, pr.q, pr.k, pr.v, a.out, a.lse,
                                                        value, blocks, options, {table});
      const AttentionGrads gb = flex_attention_backward(pr.dout, pr.q, pr.k, pr.v, b.out, b.lse,
                                                        lambda, blocks, options, {table});
      EXPECT_TRUE(bitwise_equal(
          {a.out.to_vector(), ga.dq.to_vector(), ga.dk.to_vector(), ga.captured[0].to_vector()},
          {b.out.to_vector(), gb.dq.to_vector(), gb.dk.to_vector(), gb.captured[0].to_vector()}));
      if (dtype != DType::f64) continue;
      const ScoreMod capped = value.then(scores::softcap(2.0));
      const AttentionOutput c = flex_attention(pr.q, pr.k, pr.v, capped, blocks, options);
      const AttentionGrads gc = flex_attention_backward(pr.dout, pr.q, pr.k, pr.v, c.out, c.lse,
                                                        capped, blocks, options, {table});
      const auto out = [&] {
        return flex_attention(pr.q, pr.k, pr.v, capped, blocks, options).out;
      };
      EXPECT_LT(max_relative(gc.captured[0], numeric_gradient(out, pr.dout, pr.table)), 1e-7);
    }
  }
}

TEST(RelativeBiasValue, ErrorsNameTheArgument) {
  const Captured table(Tensor::zeros({2, 5}, DType::f64));
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              scores::relative_bias(table, {0, 5});
            }).find("buckets[1]"),
            std::string::npos);
  EXPECT_NE(
      message([&] { scores::relative_bias(Captured(Tensor::zeros({5})), {0}); }).find("table"),
      std::string::npos);
  Generator g(1);
  const Tensor q = Tensor::randn({1, 4, 2, 8}, g, DType::f64);
  const ScoreMod short_buckets = scores::relative_bias(table, {0, 1, 2});  // Tq + Tk - 1 = 7
  const BlockMask blocks = create_block_mask(masks::Full{}, 1, 1, 4, 4);
  EXPECT_NE(message([&] { flex_attention(q, q, q, short_buckets, blocks); }).find("buckets"),
            std::string::npos);
}

TEST(CapturedGradients, ErrorsNameTheArgument) {
  const auto message = [](const Tensor& t) {
    try {
      const Captured c(t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(Tensor::zeros({3}, DType::boolean)).find("captured"), std::string::npos);
  EXPECT_NE(message(Tensor()).find("captured"), std::string::npos);
  EXPECT_NE(message(Tensor::zeros({1, 1, 1, 1, 2})).find("captured"), std::string::npos);
}

}  // namespace
}  // namespace qkv::testing
