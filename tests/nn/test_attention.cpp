// MultiheadAttention against an independent loop formula (projections, softmax over the kept
// keys, output projection), PyTorch's parameter names, mask conventions, invariants (causality,
// padding), gradients against central differences (f64), GQA, kdim/vdim, errors.
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "nn/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

// y [T, out] = x [T, in] W^T [in, out] rows [row, row + n) + b
std::vector<double> affine(const Tensor& x, std::int64_t b, const Tensor& w, std::int64_t row,
                           std::int64_t n, const Tensor& bias) {
  const std::int64_t T = x.size(1), in = x.size(2);
  std::vector<double> y(static_cast<std::size_t>(T * n));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t o = 0; o < n; ++o) {
      double s = bias.defined() ? bias.at({row + o}) : 0.0;
      for (std::int64_t i = 0; i < in; ++i) s += x.at({b, t, i}) * w.at({row + o, i});
      y[t * n + o] = s;
    }
  }
  return y;
}

struct Reference {
  Tensor out;      // [B, Tq, E]
  Tensor weights;  // [B, H, Tq, Tk]
};

// The whole of nn.MultiheadAttention by loops, from the module's state dict. keep(b, h, i, j)
// and bias(b, h, i, j) are the mask and additive terms in the caller's own terms.
Reference mha_reference(
    const nn::MultiheadAttention& m, const Tensor& query, const Tensor& key, const Tensor& value,
    const std::function<bool(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>& keep,
    const std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>& add = {}) {
  const NamedTensors sd = nn::state_dict(m);
  const auto& c = m.config();
  const std::int64_t B = query.size(0), Tq = query.size(1), Tk = key.size(1), E = c.embed_dim;
  const std::int64_t H = c.num_heads, Hk = c.num_kv_heads, D = E / H, KD = Hk * D;
  const bool packed = sd.count("in_proj_weight") != 0;
  const Tensor bias = sd.count("in_proj_bias") ? sd.at("in_proj_bias") : Tensor();
  Reference r;
  r.out = Tensor::zeros({B, Tq, E}, DType::f64);
  r.weights = Tensor::zeros({B, H, Tq, Tk}, DType::f64);
  const Tensor ow = sd.at("out_proj.weight");
  const Tensor ob = sd.count("out_proj.bias") ? sd.at("out_proj.bias") : Tensor();
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<double> q, k, v;
    if (packed) {
      const Tensor& w = sd.at("in_proj_weight");
      q = affine(query, b, w, 0, E, bias);
      k = affine(key, b, w, E, KD, bias);
      v = affine(value, b, w, E + KD, KD, bias);
    } else {
      // Separate weights: bias rows continue after the previous projection's.
      const auto sliced = [&](std::int64_t row, std::int64_t n) {
        return bias.defined() ? bias.slice(0, row, row + n).contiguous() : Tensor();
      };
      q = affine(query, b, sd.at("q_proj_weight"), 0, E, sliced(0, E));
      k = affine(key, b, sd.at("k_proj_weight"), 0, KD, sliced(E, KD));
      v = affine(value, b, sd.at("v_proj_weight"), 0, KD, sliced(E + KD, KD));
    }
    std::vector<double> merged(static_cast<std::size_t>(Tq * E), 0.0);
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t hk = h / (H / Hk);
      for (std::int64_t i = 0; i < Tq; ++i) {
        std::vector<double> s(static_cast<std::size_t>(Tk));
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < Tk; ++j) {
          if (!keep(b, h, i, j)) {
            s[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += q[i * E + h * D + d] * k[j * KD + hk * D + d];
          s[j] = dot / std::sqrt(static_cast<double>(D)) + (add ? add(b, h, i, j) : 0.0);
          mx = std::max(mx, s[j]);
        }
        double total = 0;
        for (std::int64_t j = 0; j < Tk; ++j) total += std::isinf(s[j]) ? 0 : std::exp(s[j] - mx);
        for (std::int64_t j = 0; j < Tk; ++j) {
          const double p = std::isinf(s[j]) ? 0 : std::exp(s[j] - mx) / total;
          r.weights.set({b, h, i, j}, p);
          for (std::int64_t d = 0; d < D; ++d)
            merged[i * E + h * D + d] += p * v[j * KD + hk * D + d];
        }
      }
    }
    for (std::int64_t i = 0; i < Tq; ++i) {
      for (std::int64_t o = 0; o < E; ++o) {
        double s = ob.defined() ? ob.at({o}) : 0.0;
        for (std::int64_t e = 0; e < E; ++e) s += merged[i * E + e] * ow.at({o, e});
        r.out.set({b, i, o}, s);
      }
    }
  }
  return r;
}

nn::MultiheadAttentionConfig config(std::int64_t E, std::int64_t H) {
  nn::MultiheadAttentionConfig c;
  c.embed_dim = E;
  c.num_heads = H;
  c.dtype = DType::f64;
  return c;
}

Tensor bool_tensor(const Shape& shape, const std::vector<double>& values) {
  return Tensor::from_values(shape, values, DType::boolean);
}

TEST(MultiheadAttention, PackedNamesShapesAndPyTorchInit) {
  Generator gen(1);
  nn::MultiheadAttention m(config(8, 2), gen);
  EXPECT_EQ(names_of(m), (std::vector<std::string>{"in_proj_weight", "in_proj_bias",
                                                   "out_proj.weight", "out_proj.bias"}));
  const NamedTensors sd = nn::state_dict(m);
  EXPECT_EQ(sd.at("in_proj_weight").shape(), (Shape{24, 8}));
  const double xavier = std::sqrt(6.0 / 32);
  for (const double w : sd.at("in_proj_weight").to_vector()) EXPECT_LE(std::fabs(w), xavier);
  for (const double b : sd.at("in_proj_bias").to_vector()) EXPECT_EQ(b, 0);
  for (const double b : sd.at("out_proj.bias").to_vector()) EXPECT_EQ(b, 0);
  nn::MultiheadAttentionConfig c = config(8, 2);
  c.kdim = 6;
  c.vdim = 5;
  nn::MultiheadAttention cross(c, gen);
  EXPECT_EQ(names_of(cross),
            (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight",
                                      "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(nn::state_dict(cross).at("k_proj_weight").shape(), (Shape{8, 6}));
}

// Non-zero biases so that the reference checks where they go.
void randomize(nn::Module& m, std::uint64_t seed) {
  for (auto& [name, p] : m.named_parameters()) {
    Tensor v = p.value();
    v.copy_from(random(v.shape(), seed++, -0.6, 0.6));
  }
}

TEST(MultiheadAttention, MatchesLoopsWithPaddingCausalAndBooleanMask) {
  Generator gen(2);
  nn::MultiheadAttention m(config(8, 2), gen);
  randomize(m, 10);
  const Tensor x = random({2, 5, 8}, 3);
  nn::AttentionCall call;
  call.key_padding_mask = bool_tensor({2, 5}, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1});
  // PyTorch's bool attn_mask: true = not allowed. Forbid (i = 3, j = 1).
  std::vector<double> am(25, 0.0);
  am[3 * 5 + 1] = 1;
  call.attn_mask = bool_tensor({5, 5}, am);
  call.is_causal = true;
  call.need_weights = true;
  call.average_attn_weights = false;
  const nn::AttentionResult r = m.forward(Var(x), Var(x), Var(x), call);
  const auto keep = [](std::int64_t b, std::int64_t, std::int64_t i, std::int64_t j) {
    return j <= i && !(b == 1 && j >= 3) && !(i == 3 && j == 1);
  };
  const Reference ref = mha_reference(m, x, x, x, keep);
  EXPECT_LT(relative_difference(r.out.value(), ref.out), 1e-12);
  EXPECT_LT(relative_difference(r.weights, ref.weights), 1e-12);
  call.average_attn_weights = true;
  const Tensor avg = m.forward(Var(x), Var(x), Var(x), call).weights;
  ASSERT_EQ(avg.shape(), (Shape{2, 5, 5}));
  EXPECT_NEAR(avg.at({1, 4, 2}), (ref.weights.at({1, 0, 4, 2}) + ref.weights.at({1, 1, 4, 2})) / 2,
              1e-12);
  expect_module_gradients("mha self, padding + causal + mask", m,
                          [&] { return m.forward(Var(x), Var(x), Var(x), call).out; });
}

TEST(MultiheadAttention, FloatMaskIsAddedAndMinusInfinityRemoves) {
  Generator gen(3);
  nn::MultiheadAttention m(config(8, 4), gen);
  randomize(m, 20);
  const Tensor q = random({2, 3, 8}, 4), kv = random({2, 4, 8}, 5);
  Tensor am = random({2 * 4, 3, 4}, 6);  // per (batch, head), as PyTorch's [B * H, Tq, Tk]
  am.set({5, 1, 2}, -std::numeric_limits<double>::infinity());
  nn::AttentionCall call;
  call.attn_mask = am;
  const Tensor out = m.forward(Var(q), Var(kv), Var(kv), call).out.value();
  const auto keep = [](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    return !(b * 4 + h == 5 && i == 1 && j == 2);
  };
  const auto add = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    return am.at({b * 4 + h, i, j});
  };
  EXPECT_LT(relative_difference(out, mha_reference(m, q, kv, kv, keep, add).out), 1e-12);
}

// Only -inf removes a key; NaN and +inf in a float attn_mask are added to the score like any
// value, so that row's weights are NaN, as in PyTorch (the non-finite rule of docs/errors.md).
TEST(MultiheadAttention, NonFiniteFloatMaskEntriesReachTheirRowAsPyTorch) {
  Generator gen(3);
  nn::MultiheadAttention m(config(8, 2), gen);
  randomize(m, 20);
  const Tensor q = random({2, 3, 8}, 4), kv = random({2, 4, 8}, 5);
  Tensor am = Tensor::zeros({3, 4});
  am.set({0, 1}, -std::numeric_limits<double>::infinity());
  am.set({1, 2}, std::numeric_limits<double>::quiet_NaN());
  am.set({2, 0}, std::numeric_limits<double>::infinity());
  nn::AttentionCall call;
  call.attn_mask = am;
  call.need_weights = true;
  call.average_attn_weights = false;
  const Tensor w = m.forward(Var(q), Var(kv), Var(kv), call).weights;  // [B, H, Tq, Tk]
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(w.at({b, h, 0, 1}), 0.0);
      double row0 = 0;
      for (std::int64_t j = 0; j < 4; ++j) {
        row0 += w.at({b, h, 0, j});
        EXPECT_TRUE(std::isnan(w.at({b, h, 1, j}))) << "b " << b << " h " << h << " j " << j;
        EXPECT_TRUE(std::isnan(w.at({b, h, 2, j}))) << "b " << b << " h " << h << " j " << j;
      }
      EXPECT_NEAR(row0, 1.0, 1e-6);
    }
  }
}

TEST(MultiheadAttention, GroupedQueryAndCrossAttentionWithKdimVdim) {
  Generator gen(4);
  nn::MultiheadAttentionConfig c = config(8, 4);
  c.num_kv_heads = 2;
  c.kdim = 6;
  c.vdim = 5;
  nn::MultiheadAttention m(c, gen);
  randomize(m, 30);
  EXPECT_EQ(nn::state_dict(m).at("v_proj_weight").shape(), (Shape{4, 5}));
  const Tensor q = random({2, 3, 8}, 7), k = random({2, 4, 6}, 8), v = random({2, 4, 5}, 9);
  nn::AttentionCall call;
  call.key_padding_mask = bool_tensor({2, 4}, {0, 1, 0, 0, 0, 0, 0, 1});
  const Tensor out = m.forward(Var(q), Var(k), Var(v), call).out.value();
  const auto keep = [](std::int64_t b, std::int64_t, std::int64_t, std::int64_t j) {
    return !(b == 0 && j == 1) && !(b == 1 && j == 3);
  };
  EXPECT_LT(relative_difference(out, mha_reference(m, q, k, v, keep).out), 1e-12);
  expect_module_gradients("mha gqa cross kdim vdim", m,
                          [&] { return m.forward(Var(q), Var(k), Var(v), call).out; });
}

// project_self's one product over the packed weights gives the three projections' bits, in f32
// and f64, with GQA and RoPE; the separate weights (kdim, vdim) take the three products.
TEST(MultiheadAttention, SelfProjectionEqualsTheThreeProjections) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const bool rope : {false, true}) {
      Generator gen(6);
      nn::MultiheadAttentionConfig c = config(8, 4);
      c.num_kv_heads = 2;
      c.dtype = dtype;
      if (rope) c.position = nn::PositionEncoding::rope;
      nn::MultiheadAttention m(c, gen);
      randomize(m, 31);
      const Var x(random({3, 5, 8}, 10).to(dtype));
      const auto [q, k, v] = m.project_self(x, 2);
      const auto [k2, v2] = m.project_key_value(x, x, 2);
      EXPECT_EQ(q.value().to_vector(), m.project_query(x, 2).value().to_vector());
      EXPECT_EQ(k.value().to_vector(), k2.value().to_vector());
      EXPECT_EQ(v.value().to_vector(), v2.value().to_vector());
      EXPECT_EQ(q.shape(), (Shape{3, 5, 4, 2}));
      EXPECT_EQ(k.shape(), (Shape{3, 5, 2, 2}));
    }
  }
}

TEST(MultiheadAttention, CausalOutputIgnoresLaterInputsAndPaddedKeysNeverMatter) {
  Generator gen(5);
  nn::MultiheadAttention m(config(8, 2), gen);
  const Tensor x = random({1, 6, 8}, 10);
  Tensor y = x.clone();
  for (std::int64_t e = 0; e < 8; ++e) y.set({0, 4, e}, 5.0 + e);  // position 4 changes
  nn::AttentionCall causal;
  causal.is_causal = true;
  const Tensor ox = m.forward(Var(x), Var(x), Var(x), causal).out.value();
  const Tensor oy = m.forward(Var(y), Var(y), Var(y), causal).out.value();
  for (std::int64_t i = 0; i < 6; ++i) {
    double diff = 0;
    for (std::int64_t e = 0; e < 8; ++e)
      diff = std::max(diff, std::fabs(ox.at({0, i, e}) - oy.at({0, i, e})));
    if (i < 4) {
      EXPECT_EQ(diff, 0) << "position " << i << " saw a later input";
    } else {
      EXPECT_GT(diff, 1e-6) << "position " << i;
    }
  }
  // Key 4 padded: changing it changes nothing, for queries as keys only (cross attention).
  nn::AttentionCall padded;
  padded.key_padding_mask = bool_tensor({1, 6}, {0, 0, 0, 0, 1, 0});
  const Tensor q = random({1, 3, 8}, 11);
  const Tensor px = m.forward(Var(q), Var(x), Var(x), padded).out.value();
  const Tensor py = m.forward(Var(q), Var(y), Var(y), padded).out.value();
  EXPECT_EQ(px.to_vector(), py.to_vector());
}

TEST(MultiheadAttention, DropoutOnlyInTraining) {
  Generator gen(6);
  nn::MultiheadAttentionConfig c = config(8, 2);
  c.dropout = 0.5;
  nn::MultiheadAttention m(c, gen);
  const Tensor x = random({2, 5, 8}, 12);
  const Tensor a = m.forward(Var(x), Var(x), Var(x)).out.value();
  const Tensor b = m.forward(Var(x), Var(x), Var(x)).out.value();
  EXPECT_GT(relative_difference(a, b), 1e-6) << "two training calls drew the same mask";
  m.eval();
  const Tensor e = m.forward(Var(x), Var(x), Var(x)).out.value();
  const auto all = [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) { return true; };
  EXPECT_LT(relative_difference(e, mha_reference(m, x, x, x, all).out), 1e-12);
}

// Causal, key lengths and ALiBi positions through the mods as values (flex_attention) give the
// built-in options' outputs and parameter gradients bitwise (ALiBi without key lengths: through
// the mods its diagonal is Tk - Tq's, not each batch's); a score mod runs before ALiBi.
TEST(MultiheadAttention, ModsAsValuesEqualTheBuiltInOptions) {
  const Tensor x = random({2, 6, 8}, 14), y = random({2, 9, 8}, 15), r = random({2, 6, 8}, 16);
  const auto run = [&](nn::MultiheadAttention& m, const nn::AttentionCall& call) {
    m.zero_grad();
    const Var out = m.forward(Var(x), Var(y), Var(y), call).out;
    ag::sum(out * Var(r)).backward();
    std::vector<std::vector<double>> results = {out.value().to_vector()};
    for (const auto& [name, p] : m.named_parameters()) results.push_back(p.grad().to_vector());
    return results;
  };
  Generator gen(8);
  nn::MultiheadAttention plain(config(8, 2), gen);
  randomize(plain, 40);
  nn::AttentionCall builtin;
  builtin.is_causal = true;
  builtin.key_lengths = {9, 4};
  nn::AttentionCall as_mod;
  as_mod.mask_mod = MaskMod(masks::causal()) & masks::key_lengths({9, 4});
  EXPECT_EQ(run(plain, as_mod), run(plain, builtin));
  nn::AttentionCall folded = builtin;  // is_causal and key_lengths folded into the mods
  folded.score_mod = ScoreMod();
  EXPECT_EQ(run(plain, folded), run(plain, builtin));

  nn::MultiheadAttentionConfig c = config(8, 2);
  c.position = nn::PositionEncoding::alibi;
  nn::MultiheadAttention alibi(c, gen);
  randomize(alibi, 50);
  nn::AttentionCall causal;
  causal.is_causal = true;
  nn::AttentionCall causal_mod;
  causal_mod.mask_mod = masks::causal();
  EXPECT_EQ(run(alibi, causal_mod), run(alibi, causal));
  nn::AttentionCall capped = causal_mod;
  capped.score_mod = scores::softcap(0.5);
  EXPECT_NE(run(alibi, capped)[0], run(alibi, causal_mod)[0]);
  expect_module_gradients("mha mods", alibi,
                          [&] { return alibi.forward(Var(x), Var(y), Var(y), capped).out; });
}

TEST(MultiheadAttention, BadArgumentsNameTheArgument) {
  Generator gen(7);
  nn::MultiheadAttention m(config(8, 2), gen);
  const Var x(random({2, 5, 8}, 13));
  const auto message = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] {
              m.forward(Var(random({2, 5, 4}, 1)), x, x);
            }),
            "query: expected embed dim 8, got 4");
  nn::AttentionCall call;
  call.key_padding_mask = bool_tensor({2, 4}, std::vector<double>(8, 0.0));
  EXPECT_EQ(message([&] { m.forward(x, x, x, call); }),
            "key_padding_mask: expected shape [2, 5], got [2, 4]");
  EXPECT_THROW(nn::MultiheadAttention(config(8, 3), gen), Error);
  nn::AttentionCall mods;
  mods.mask_mod = masks::causal();
  mods.attn_mask = bool_tensor({5, 5}, std::vector<double>(25, 0.0));
  EXPECT_EQ(message([&] { m.forward(x, x, x, mods); }),
            "attn_mask: expected none with mask_mod or score_mod (flex_attention takes mods, not "
            "tensors), got a tensor [5, 5]");
}

}  // namespace
}  // namespace qkv::testing
