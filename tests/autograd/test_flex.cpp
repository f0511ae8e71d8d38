// autograd::flex_attention: gradients against finite differences (f64, mask and score mods as
// values, dropout, both backends), and against the attention primitive with the same rule given
// as built-in options.
#include <string>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

TEST(FlexGradcheck, MatchesFiniteDifferences) {
  const std::int64_t B = 2, Tq = 5, Tk = 7;
  const MaskMod mask = (MaskMod(masks::document({0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 2, 2}, 2)) &
                        MaskMod::per_shape([](std::int64_t q, std::int64_t k) {
                          return masks::causal_lower_right(q, k);
                        })) |
                       masks::global_tokens({6});
  const BlockMask blocks = create_block_mask(mask, B, 1, Tq, Tk);
  const ScoreMod score = scores::alibi({0.4, 0.2}).then(scores::softcap(0.9));
  const std::vector<Tensor> inputs = {random({B, Tq, 2, 3}, 22), random({B, Tk, 1, 3}, 23),
                                      random({B, Tk, 1, 2}, 24)};
  for (const Backend backend : {Backend::cpu, Backend::reference}) {
    for (const double dropout : {0.0, 0.25}) {
      FlexOptions o;
      o.backend = backend;
      o.dropout_p = dropout;
      o.seed = 17;
      expect_gradcheck(
          std::string("flex_attention ") + (backend == Backend::cpu ? "cpu" : "reference") +
              " dropout " + std::to_string(dropout),
          [&](const std::vector<Var>& v) {
            return ag::flex_attention(v[0], v[1], v[2], score, blocks, o);
          },
          inputs);
    }
  }
}

// A relative_bias table as a Var (then a soft cap): its gradient and q, k, v's against finite
// differences, on both backends; a table that is not the captured tensor is refused.
TEST(FlexGradcheck, RelativeBiasTableIsAnInput) {
  const std::int64_t B = 2, Tq = 6, Tk = 6;
  const std::vector<std::int64_t> buckets = {0, 0, 1, 1, 2, 3, 4, 4, 5, 5, 5};  // Tq + Tk - 1
  const BlockMask blocks = create_block_mask(masks::causal(), 1, 1, Tq, Tk);
  const std::vector<Tensor> inputs = {random({B, Tq, 2, 3}, 31), random({B, Tk, 1, 3}, 32),
                                      random({B, Tk, 1, 2}, 33), random({2, 6}, 34)};
  for (const Backend backend : {Backend::cpu, Backend::reference}) {
    FlexOptions o;
    o.backend = backend;
    expect_gradcheck(
        std::string("flex_attention relative_bias ") +
            (backend == Backend::cpu ? "cpu" : "reference"),
        [&](const std::vector<Var>& v) {
          const ScoreMod score =
              scores::relative_bias(Captured(v[3].value()), buckets).then(scores::softcap(1.5));
          return ag::flex_attention(v[0], v[1], v[2], score, blocks, o, {v[3]});
        },
        inputs);
  }
  const ScoreMod score = scores::relative_bias(Captured(inputs[3]), buckets);
  const Var q(inputs[0]), k(inputs[1]), v(inputs[2]);
  EXPECT_THROW(ag::flex_attention(q, k, v, score, blocks, {}, {}), Error);
  EXPECT_THROW(ag::flex_attention(q, k, v, score, blocks, {}, {Var(inputs[3].clone())}), Error);
}

// Causal and ALiBi as mods give the primitive's loss and gradients with the built-in options.
TEST(FlexGradcheck, EqualsTheAttentionPrimitiveWithTheSameRule) {
  AttentionOptions o;
  o.causal = Causal::top_left;
  o.alibi_slopes = {0.5, 0.25};
  const Tensor r = random({2, 6, 2, 3}, 5);
  const auto grads = [&](bool flex) {
    Var q(random({2, 6, 2, 3}, 1), true), k(random({2, 8, 1, 3}, 2), true),
        v(random({2, 8, 1, 3}, 3), true);
    const Var out = flex ? ag::flex_attention(q, k, v, scores::alibi(o.alibi_slopes),
                                              create_block_mask(masks::causal(), 1, 1, 6, 8))
                         : ag::attention(q, k, v, o);
    ag::sum(out * Var(r)).backward();
    return std::vector<Tensor>{out.value(), q.grad(), k.grad(), v.grad()};
  };
  const std::vector<Tensor> builtin = grads(false), flex = grads(true);
  for (std::size_t n = 0; n < builtin.size(); ++n) {
    EXPECT_EQ(builtin[n].to_vector(), flex[n].to_vector()) << "result " << n;
  }
}

}  // namespace
}  // namespace qkv::testing
