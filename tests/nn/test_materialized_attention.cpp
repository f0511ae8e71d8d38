// MultiheadAttention with AttentionKind::materialized: the same weights give what the fused kind
// gives, output and input gradient (causal, key lengths, GQA), through the composed ops; mods are
// refused.
#include <map>
#include <string>
#include <vector>

#include "nn/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

TEST(MaterializedAttention, IsTheFusedKindsFunction) {
  const auto make = [](nn::AttentionKind kind) {
    Generator g(9);
    nn::MultiheadAttentionConfig c;
    c.embed_dim = 16;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.dtype = DType::f64;
    c.kind = kind;
    return nn::MultiheadAttention(c, g);
  };
  nn::MultiheadAttention fused = make(nn::AttentionKind::softmax);
  nn::MultiheadAttention materialized = make(nn::AttentionKind::materialized);
  Generator g(10);
  const Tensor x0 = Tensor::randn({2, 33, 16}, g, DType::f64);
  nn::AttentionCall call;
  call.is_causal = true;
  call.key_lengths = {33, 20};
  Var a(x0, true), b(x0, true);
  const Var out_a = fused.forward(a, a, a, call).out;
  const Var out_b = materialized.forward(b, b, b, call).out;
  ag::sum(out_a * out_a).backward();
  ag::sum(out_b * out_b).backward();
  EXPECT_LT(relative_difference(out_b.value(), out_a.value()), 1e-13);
  EXPECT_LT(relative_difference(b.grad(), a.grad()), 1e-12);
  nn::AttentionCall flex;
  flex.mask_mod = MaskMod(masks::causal());
  EXPECT_THROW(materialized.forward(Var(x0), Var(x0), Var(x0), flex), Error);
}

}  // namespace
}  // namespace qkv::testing
