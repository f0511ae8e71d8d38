// Positions: sinusoidal table values, learned positions, RoPE (relative-position invariance,
// norm preservation, gradients), ALiBi slopes from the paper, T5 buckets computed by hand, and
// the learned relative bias's gradient through the attention primitive.
#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

TEST(Sinusoidal, MatchesTheFormula) {
  const Tensor pe = nn::sinusoidal_positions(5, 8, DType::f64);
  ASSERT_EQ(pe.shape(), (Shape{5, 8}));
  EXPECT_EQ(pe.at({0, 0}), 0.0);
  EXPECT_EQ(pe.at({0, 1}), 1.0);
  EXPECT_NEAR(pe.at({3, 2}), std::sin(3 / std::pow(10000.0, 2.0 / 8)), 1e-15);
  EXPECT_NEAR(pe.at({4, 7}), std::cos(4 / std::pow(10000.0, 6.0 / 8)), 1e-15);
  EXPECT_THROW(nn::sinusoidal_positions(5, 7), Error);
}

TEST(LearnedPositions, AddsRowsFromStartWithGradient) {
  Generator gen(1);
  nn::LearnedPositions pos(10, 4, gen, DType::f64);
  const Tensor x = random({2, 3, 4}, 2);
  const Tensor y = pos.forward(Var(x), 2).value();
  const Tensor w = pos.named_parameters()[0].second.value();
  EXPECT_NEAR(y.at({1, 2, 3}), x.at({1, 2, 3}) + w.at({4, 3}), 1e-15);
  expect_module_gradients("learned positions", pos, [&] { return pos.forward(Var(x), 2); });
  EXPECT_THROW(pos.forward(Var(x), 8), Error);
}

// q . k after RoPE at positions (m, n), for q and k given at one position each.
double rotated_dot(const Tensor& q, const Tensor& k, std::int64_t m, std::int64_t n) {
  const Var rq = nn::rope(Var(q), 10000.0, m), rk = nn::rope(Var(k), 10000.0, n);
  const std::vector<double> a = rq.value().to_vector(), b = rk.value().to_vector();
  double s = 0;
  for (std::size_t d = 0; d < a.size(); ++d) s += a[d] * b[d];
  return s;
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  const Tensor q = random({1, 1, 1, 8}, 3), k = random({1, 1, 1, 8}, 4);
  const double base = rotated_dot(q, k, 2, 7);
  EXPECT_NEAR(rotated_dot(q, k, 10, 15), base, 1e-12);
  EXPECT_NEAR(rotated_dot(q, k, 0, 5), base, 1e-12);
  EXPECT_GT(std::fabs(rotated_dot(q, k, 0, 4) - base), 1e-6);
  // Position 0 is the identity, and rotations keep the norm.
  EXPECT_EQ(nn::rope(Var(q)).value().to_vector(), q.to_vector());
  const Tensor x = random({2, 5, 3, 6}, 5);
  const Tensor r = nn::rope(Var(x), 100.0).value();
  for (std::int64_t t = 0; t < 5; ++t) {
    double a = 0, b = 0;
    for (std::int64_t d = 0; d < 6; ++d) {
      a += x.at({1, t, 2, d}) * x.at({1, t, 2, d});
      b += r.at({1, t, 2, d}) * r.at({1, t, 2, d});
    }
    EXPECT_NEAR(a, b, 1e-12);
  }
  // The pair (x_0, x_3) at position 1 rotated by theta_0 = 1 radian.
  EXPECT_NEAR(r.at({0, 1, 0, 0}),
              x.at({0, 1, 0, 0}) * std::cos(1.0) - x.at({0, 1, 0, 3}) * std::sin(1.0), 1e-14);
  expect_gradcheck("rope", [](const std::vector<Var>& in) { return nn::rope(in[0], 100.0, 3); },
                   {random({2, 4, 2, 6}, 6)});
}

TEST(Rope, InsideMultiheadAttentionRotatesQueriesAndKeys) {
  nn::MultiheadAttentionConfig c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.dtype = DType::f64;
  Generator gen(2), gen2(2);
  nn::MultiheadAttention plain(c, gen);  // the same weights: same seed
  c.position = nn::PositionEncoding::rope;
  nn::MultiheadAttention m(c, gen2);
  const Tensor x = random({1, 5, 8}, 7);
  nn::AttentionCall causal;
  causal.is_causal = true;
  const Tensor out = m.forward(Var(x), Var(x), Var(x), causal).out.value();
  // Position 0 attends only to itself at the same angle: RoPE leaves it as it was.
  const Tensor ref = plain.forward(Var(x), Var(x), Var(x), causal).out.value();
  EXPECT_LT(relative_difference(out.slice(1, 0, 1).contiguous(), ref.slice(1, 0, 1).contiguous()),
            1e-14);
  EXPECT_GT(relative_difference(out, ref), 1e-6);
  // The first three outputs do not depend on what follows them.
  const Tensor head = x.slice(1, 0, 3).contiguous();
  const Tensor part = m.forward(Var(head), Var(head), Var(head), causal).out.value();
  EXPECT_LT(relative_difference(part, out.slice(1, 0, 3).contiguous()), 1e-12);
  expect_module_gradients("mha rope", m,
                          [&] { return m.forward(Var(x), Var(x), Var(x), causal).out; });
}

TEST(Alibi, SlopesAreThePapersGeometricSequences) {
  const std::vector<double> eight = nn::alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(eight[h], std::pow(0.5, h + 1));
  // 6 heads: the 4 slopes of 4 heads (2^-2, 2^-4, 2^-6, 2^-8), then 2^-1 and 2^-3 from 8 heads.
  const std::vector<double> six = nn::alibi_slopes(6);
  const std::vector<double> expected = {0.25, 1.0 / 16, 1.0 / 64, 1.0 / 256, 0.5, 0.125};
  ASSERT_EQ(six.size(), 6u);
  for (int h = 0; h < 6; ++h) EXPECT_DOUBLE_EQ(six[h], expected[h]);
}

TEST(Alibi, InMultiheadAttentionEqualsTheLinearBias) {
  Generator gen(3);
  nn::MultiheadAttentionConfig c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.position = nn::PositionEncoding::alibi;
  c.dtype = DType::f64;
  nn::MultiheadAttention alibi(c, gen);
  Generator gen2(3);
  c.position = nn::PositionEncoding::none;
  nn::MultiheadAttention plain(c, gen2);  // the same weights: same seed
  const Tensor x = random({1, 4, 8}, 8);
  nn::AttentionCall call;
  Tensor mask = Tensor::zeros({2, 4, 4}, DType::f64);
  const std::vector<double> slopes = nn::alibi_slopes(2);
  for (std::int64_t h = 0; h < 2; ++h) {
    for (std::int64_t i = 0; i < 4; ++i) {
      for (std::int64_t j = 0; j < 4; ++j) mask.set({h, i, j}, -slopes[h] * std::fabs(i - j));
    }
  }
  call.attn_mask = mask;
  EXPECT_LT(relative_difference(alibi.forward(Var(x), Var(x), Var(x)).out.value(),
                                plain.forward(Var(x), Var(x), Var(x), call).out.value()),
            1e-12);
}

TEST(T5Bucket, MatchesValuesComputedByHand) {
  // Bidirectional, 32 buckets, max distance 128: 16 per direction, 8 exact.
  EXPECT_EQ(nn::relative_position_bucket(0, true, 32, 128), 0);
  EXPECT_EQ(nn::relative_position_bucket(-3, true, 32, 128), 3);
  EXPECT_EQ(nn::relative_position_bucket(3, true, 32, 128), 19);
  EXPECT_EQ(nn::relative_position_bucket(-8, true, 32, 128), 8);
  // 8 + floor(log(20 / 8) / log(128 / 8) * 8) = 8 + floor(2.64)
  EXPECT_EQ(nn::relative_position_bucket(-20, true, 32, 128), 10);
  EXPECT_EQ(nn::relative_position_bucket(20, true, 32, 128), 26);
  EXPECT_EQ(nn::relative_position_bucket(-200, true, 32, 128), 15);  // capped
  // Causal: the future is bucket 0; 16 exact; 16 + floor(log(20 / 16) / log(8) * 16) = 17.
  EXPECT_EQ(nn::relative_position_bucket(5, false, 32, 128), 0);
  EXPECT_EQ(nn::relative_position_bucket(-5, false, 32, 128), 5);
  EXPECT_EQ(nn::relative_position_bucket(-20, false, 32, 128), 17);
  EXPECT_EQ(nn::relative_position_bucket(-1000, false, 32, 128), 31);
  EXPECT_THROW(nn::relative_position_bucket(1, true, 2, 128), Error);   // no exact bucket
  EXPECT_THROW(nn::relative_position_bucket(1, false, 32, 16), Error);  // nothing logarithmic
}

TEST(T5Bias, LooksUpTheTableAndLearnsThroughThePrimitive) {
  Generator gen(4);
  nn::RelativePositionBias rpb(8, 16, 2, true, gen, DType::f64);
  const Tensor bias = rpb.forward(3, 5).value();
  ASSERT_EQ(bias.shape(), (Shape{2, 3, 5}));
  const Tensor table = rpb.weight().value();
  EXPECT_EQ(bias.at({1, 2, 0}), table.at({nn::relative_position_bucket(-2, true, 8, 16), 1}));
  EXPECT_EQ(bias.at({0, 0, 4}), table.at({nn::relative_position_bucket(4, true, 8, 16), 0}));
  nn::MultiheadAttentionConfig c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.dtype = DType::f64;
  nn::MultiheadAttention m(c, gen);
  const Tensor q = random({2, 3, 8}, 9), kv = random({2, 5, 8}, 10);
  const auto f = [&] {
    nn::AttentionCall call;
    call.position_bias = rpb.forward(3, 5);
    return m.forward(Var(q), Var(kv), Var(kv), call).out;
  };
  expect_module_gradients("t5 relative bias table", rpb, f);
}

// The table read inside the fused kernel (score_mod, the flex backward's captured pass) against
// the materialized bias through the attention primitive's dbias: the same output and the same
// gradients of the table and of the attention's parameters, f64, causal and not, Tq != Tk; then
// finite differences of the table through the flex path.
TEST(T5Bias, ScoreModEqualsTheMaterializedBias) {
  for (const bool causal : {false, true}) {
    Generator gen(5);
    nn::RelativePositionBias rpb(8, 16, 2, !causal, gen, DType::f64);
    nn::MultiheadAttentionConfig c;
    c.embed_dim = 8;
    c.num_heads = 2;
    c.dtype = DType::f64;
    nn::MultiheadAttention m(c, gen);
    const std::int64_t Tq = causal ? 7 : 6, Tk = causal ? 7 : 11;
    const Tensor q = random({2, Tq, 8}, 11), kv = random({2, Tk, 8}, 12);
    const Tensor r = random({2, Tq, 8}, 13);
    const auto run = [&](bool flex) {
      m.zero_grad();
      rpb.zero_grad();
      nn::AttentionCall call;
      call.is_causal = causal;
      nn::BiasScoreMod mod;
      if (flex) {
        mod = rpb.score_mod(Tq, Tk);
        call.score_mod = mod.score_mod;
        call.score_tables = {mod.table};
      } else {
        call.position_bias = rpb.forward(Tq, Tk);
      }
      const Var out = m.forward(Var(q), Var(kv), Var(kv), call).out;
      ag::sum(out * Var(r)).backward();
      std::vector<std::vector<double>> results = {out.value().to_vector(),
                                                  rpb.weight().grad().to_vector()};
      for (const auto& [name, p] : m.named_parameters()) results.push_back(p.grad().to_vector());
      return results;
    };
    const auto flex = run(true), dense = run(false);
    ASSERT_EQ(flex.size(), dense.size());
    for (std::size_t n = 0; n < flex.size(); ++n) {
      ASSERT_EQ(flex[n].size(), dense[n].size());
      double worst = 0, largest = 0;
      for (std::size_t e = 0; e < flex[n].size(); ++e) {
        worst = std::max(worst, std::abs(flex[n][e] - dense[n][e]));
        largest = std::max(largest, std::abs(dense[n][e]));
      }
      EXPECT_LE(worst, 1e-12 * std::max(largest, 1.0)) << "result " << n << " causal " << causal;
    }
    EXPECT_GT(std::abs(flex[1][0]) + std::abs(flex[1][1]), 0.0) << "the table learned nothing";
    expect_module_gradients("t5 table through the score mod", rpb, [&] {
      const nn::BiasScoreMod mod = rpb.score_mod(Tq, Tk);
      nn::AttentionCall call;
      call.is_causal = causal;
      call.score_mod = mod.score_mod;
      call.score_tables = {mod.table};
      return m.forward(Var(q), Var(kv), Var(kv), call).out;
    });
  }
}

}  // namespace
}  // namespace qkv::testing
