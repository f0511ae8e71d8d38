// MultiheadAttention with AttentionKind::linear: the projections, linear attention and the output
// projection written out by hand on the module's own weights give the same output and input
// gradient (GQA, causal, key lengths; elu + 1 and FAVOR+, whose features redraw_features
// changes); what it cannot do is refused.
#include <map>
#include <string>
#include <vector>

#include "nn/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

TEST(LinearAttentionModule, IsItsProjectionsAroundLinearAttention) {
  for (const FeatureMap map : {FeatureMap::elu, FeatureMap::favor}) {
    SCOPED_TRACE(map == FeatureMap::favor ? "favor" : "elu");
    Generator g(5);
    nn::MultiheadAttentionConfig c;
    c.feature_map = map;
    if (map == FeatureMap::favor) {
      c.num_features = 10;
      c.feature_seed = 7;
    }
    c.embed_dim = 16;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.dtype = DType::f64;
    c.kind = nn::AttentionKind::linear;
    nn::MultiheadAttention mha(c, g);
    const Tensor x0 = Tensor::randn({2, 70, 16}, g, DType::f64);
    nn::AttentionCall call;
    call.is_causal = true;
    call.key_lengths = {70, 41};
    if (map ==
        FeatureMap::favor) {  // a redraw changes the output; drawing seed 7 again restores it
      const Tensor first = mha.forward(Var(x0), Var(x0), Var(x0), call).out.value();
      mha.redraw_features(8);
      EXPECT_GT(
          relative_difference(mha.forward(Var(x0), Var(x0), Var(x0), call).out.value(), first),
          1e-3);
      mha.redraw_features(7);
    }
    Var x(x0, true);
    const Var out = mha.forward(x, x, x, call).out;
    ag::sum(out * out).backward();

    // By hand (GQA keeps separate q, k, v weights, one bias [E + 2 Hk D]), then out_proj.
    std::map<std::string, Var> p;
    for (const auto& [name, var] : mha.named_parameters()) p[name] = Var(var.value());
    ASSERT_EQ(p.size(), 6u);
    Var x2(x0, true);
    const auto project = [&](const char* weight, std::int64_t row, std::int64_t n,
                             std::int64_t heads) {
      const Var y = ag::matmul(x2, ag::transpose(p[weight], 0, 1)) +
                    ag::slice(p["in_proj_bias"], 0, row, row + n);
      return ag::split_heads(y, heads);
    };
    LinearOptions o;
    o.causal = Causal::top_left;
    o.key_lengths = {70, 41};
    o.feature_map = map;
    o.num_features = c.num_features;
    o.seed = c.feature_seed;
    const Var q = project("q_proj_weight", 0, 16, 4), k = project("k_proj_weight", 16, 8, 2),
              v = project("v_proj_weight", 24, 8, 2);
    const Var attended = ag::linear_attention(q, k, v, o);  // [2, 70, 4, 4]
    const Var want =
        ag::matmul(ag::merge_heads(attended), ag::transpose(p["out_proj.weight"], 0, 1)) +
        p["out_proj.bias"];
    ag::sum(want * want).backward();
    EXPECT_LT(relative_difference(out.value(), want.value()), 1e-14);
    EXPECT_LT(relative_difference(x.grad(), x2.grad()), 1e-13);
  }
}

TEST(LinearAttentionModule, RefusesWhatLinearAttentionHasNo) {
  Generator g(6);
  nn::MultiheadAttentionConfig c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.kind = nn::AttentionKind::linear;
  c.dropout = 0.1;
  EXPECT_THROW(nn::MultiheadAttention(c, g), Error);
  c.dropout = 0;
  c.position = nn::PositionEncoding::alibi;
  EXPECT_THROW(nn::MultiheadAttention(c, g), Error);
  c.position = nn::PositionEncoding::none;
  nn::MultiheadAttention mha(c, g);
  const Var x(Tensor::randn({1, 3, 8}, g));
  nn::AttentionCall weights;
  weights.need_weights = true;
  EXPECT_THROW(mha.forward(x, x, x, weights), Error);
  nn::AttentionCall padded;
  padded.key_padding_mask = Tensor::zeros({1, 3}, DType::boolean);
  EXPECT_THROW(mha.forward(x, x, x, padded), Error);
  nn::AttentionCall causal;
  causal.is_causal = true;
  EXPECT_EQ(mha.forward(x, x, x, causal).out.shape(), (Shape{1, 3, 8}));
}

}  // namespace
}  // namespace qkv::testing
