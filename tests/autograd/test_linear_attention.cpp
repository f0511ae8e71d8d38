// The linear attention node: its gradients against finite differences (gradcheck), for each
// causal rule with key lengths and GQA, and the chain through it (a projection before it, a loss
// after) against the same chain with the kernel's backward called by hand.
#include <string>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

TEST(LinearAttentionNode, MatchesFiniteDifferences) {
  for (const Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right}) {
    LinearOptions o;
    o.causal = causal;
    o.key_lengths = {7, 4};
    expect_gradcheck(
        "linear_attention causal " + std::to_string(static_cast<int>(causal)),
        [&](const std::vector<Var>& in) { return ag::linear_attention(in[0], in[1], in[2], o); },
        {random({2, 5, 4, 3}, 1), random({2, 7, 2, 3}, 2), random({2, 7, 2, 2}, 3)});
  }
}

// FAVOR+: the backward holds the stabilizers constant, which changes nothing the differences see
// when eps is negligible.
TEST(LinearAttentionNode, FavorMatchesFiniteDifferences) {
  for (const Causal causal : {Causal::none, Causal::top_left}) {
    LinearOptions o;
    o.feature_map = FeatureMap::favor;
    o.num_features = 7;
    o.seed = 2;
    o.eps = 1e-14;
    o.causal = causal;
    o.key_lengths = {7, 5};
    expect_gradcheck(
        "linear_attention favor causal " + std::to_string(static_cast<int>(causal)),
        [&](const std::vector<Var>& in) { return ag::linear_attention(in[0], in[1], in[2], o); },
        {random({2, 5, 4, 3}, 8), random({2, 7, 2, 3}, 9), random({2, 7, 2, 2}, 10)});
  }
}

TEST(LinearAttentionNode, ChainsLikeTheKernelsBackward) {
  const Tensor x0 = random({1, 66, 2, 4}, 4), k0 = random({1, 66, 2, 4}, 5),
               v0 = random({1, 66, 2, 4}, 6), w0 = random({4, 4}, 7);
  LinearOptions o;
  o.causal = Causal::top_left;
  Var x(x0, true), w(w0, true);
  const Var q = ag::matmul(x, w);  // [1, 66, 2, 4]
  const Var out = ag::linear_attention(q, Var(k0), Var(v0), o);
  ag::sum(out).backward();
  // By hand: dq from the kernel with dout = 1, then dx = dq w^T.
  const Tensor ones = Tensor::full({1, 66, 2, 4}, 1.0, DType::f64);
  const LinearGrads g =
      linear_attention_backward(ones, ag::matmul(Var(x0), Var(w0)).value(), k0, v0, o);
  const Tensor dx = ag::matmul(Var(g.dq), ag::transpose(Var(w0), 0, 1)).value();
  EXPECT_LT(relative_difference(x.grad(), dx), 1e-14);
  EXPECT_THROW(ag::linear_attention(Var(x0.to(DType::bf16)), Var(k0), Var(v0)), Error);
  EXPECT_THROW(ag::linear_attention(Var(x0.to(DType::boolean)), Var(k0), Var(v0)), Error);
}

// Half Vars are the kernel's half storage, and an Autocast rounds f32 q, k, v to its dtype: the
// same bits as the kernel's forward and backward on the rounded values, out and the gradients
// back in f32, for both feature maps.
TEST(LinearAttentionNode, HalfAndAutocastEqualTheKernelOnRoundedValues) {
  for (const FeatureMap map : {FeatureMap::elu, FeatureMap::favor}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (map == FeatureMap::favor ? " favor" : ""));
      LinearOptions o;
      o.feature_map = map;
      o.causal = Causal::top_left;
      o.key_lengths = {70, 41};
      const Tensor q0 = random({2, 70, 4, 8}, 21).to(DType::f32);
      const Tensor k0 = random({2, 70, 2, 8}, 22).to(DType::f32);
      const Tensor v0 = random({2, 70, 2, 8}, 23).to(DType::f32);
      const Tensor dout = random({2, 70, 4, 8}, 24).to(DType::f32);
      const Tensor qh = q0.to(dtype), kh = k0.to(dtype), vh = v0.to(dtype);
      const Tensor want = linear_attention(qh, kh, vh, o);
      const LinearGrads g = linear_attention_backward(dout.to(dtype), qh, kh, vh, o);

      Var q(q0, true), k(k0, true), v(v0, true);
      Var out;
      {
        ag::Autocast autocast(dtype);
        out = ag::linear_attention(q, k, v, o);
      }
      EXPECT_EQ(out.dtype(), DType::f32);
      expect_bitwise_equal(out.value(), want.to(DType::f32), "autocast out");
      out.backward(dout);
      expect_bitwise_equal(q.grad(), g.dq.to(DType::f32), "autocast dq");
      expect_bitwise_equal(k.grad(), g.dk.to(DType::f32), "autocast dk");
      expect_bitwise_equal(v.grad(), g.dv.to(DType::f32), "autocast dv");

      Var qx(qh, true), kx(kh, true), vx(vh, true);
      const Var half_out = ag::linear_attention(qx, kx, vx, o);
      EXPECT_EQ(half_out.dtype(), dtype);
      expect_bitwise_equal(half_out.value(), want, "half out");
      half_out.backward(dout.to(dtype));
      expect_bitwise_equal(qx.grad(), g.dq, "half dq");
      expect_bitwise_equal(vx.grad(), g.dv, "half dv");
      EXPECT_LT(relative_difference(out.value(), linear_attention(q0, k0, v0, o)),
                dtype == DType::bf16 ? 0.03 : 0.004);
    }
  }
}

}  // namespace
}  // namespace qkv::testing
