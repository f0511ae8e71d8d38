// Encoder and decoder layers: PyTorch's parameter names, the pre-norm and post-norm formulas
// recomposed from the layer's own submodules' math, gradients (f64), dropout modes.
#include <functional>
#include <string>
#include <vector>

#include "nn/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

nn::TransformerLayerConfig config(bool norm_first) {
  nn::TransformerLayerConfig c;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 12;
  c.dropout = 0.0;
  c.norm_first = norm_first;
  c.dtype = DType::f64;
  return c;
}

// The encoder layer by PyTorch's formula, from its state dict, with loops-free autograd ops
// independent of the nn classes: attention through attention_decomposed.
Var encoder_formula(const NamedTensors& sd, const Var& x, bool norm_first, bool causal) {
  const auto p = [&](const std::string& n) { return Var(sd.at(n)); };
  const auto linear = [](const Var& v, const Var& w, const Var& b) {
    return ag::matmul(v, ag::transpose(w, 0, 1)) + b;
  };
  const auto sa = [&](const Var& v) {
    const Var w = p("self_attn.in_proj_weight"), b = p("self_attn.in_proj_bias");
    const Var qkv = linear(v, w, b);  // [B, T, 3E]
    const Var q = ag::split_heads(ag::slice(qkv, 2, 0, 8), 2);
    const Var k = ag::split_heads(ag::slice(qkv, 2, 8, 16), 2);
    const Var vv = ag::split_heads(ag::slice(qkv, 2, 16, 24), 2);
    AttentionOptions o;
    if (causal) o.causal = Causal::top_left;
    const Var a = ag::merge_heads(ag::attention_decomposed(q, k, vv, o));
    return linear(a, p("self_attn.out_proj.weight"), p("self_attn.out_proj.bias"));
  };
  const auto ff = [&](const Var& v) {
    return linear(ag::relu(linear(v, p("linear1.weight"), p("linear1.bias"))), p("linear2.weight"),
                  p("linear2.bias"));
  };
  const auto norm = [&](const Var& v, const std::string& n) {
    return ag::layer_norm(v, {8}, p(n + ".weight"), p(n + ".bias"));
  };
  if (norm_first) {
    const Var h = x + sa(norm(x, "norm1"));
    return h + ff(norm(h, "norm2"));
  }
  const Var h = norm(x + sa(x), "norm1");
  return norm(h + ff(h), "norm2");
}

void randomize(nn::Module& m, std::uint64_t seed) {
  for (auto& [name, p] : m.named_parameters()) {
    Tensor v = p.value();
    v.copy_from(random(v.shape(), seed++, -0.5, 0.5));
    if (name.find("norm") != std::string::npos && name.find("weight") != std::string::npos) {
      v.copy_from(random(v.shape(), seed++, 0.5, 1.5));
    }
  }
}

TEST(TransformerEncoderLayer, NamesFormulaAndGradients) {
  for (const bool norm_first : {false, true}) {
    Generator gen(1);
    nn::TransformerEncoderLayer layer(config(norm_first), gen);
    EXPECT_EQ(names_of(layer),
              (std::vector<std::string>{
                  "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                  "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                  "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
    randomize(layer, 100);
    const Tensor x = random({2, 4, 8}, 2);
    nn::AttentionCall call;
    call.is_causal = true;
    const Tensor out = layer.forward(Var(x), call).value();
    const Tensor expected =
        encoder_formula(nn::state_dict(layer), Var(x), norm_first, true).value();
    EXPECT_LT(relative_difference(out, expected), 1e-12) << "norm_first " << norm_first;
    expect_module_gradients(norm_first ? "encoder pre-norm" : "encoder post-norm", layer,
                            [&] { return layer.forward(Var(x), call); });
    expect_gradcheck("encoder input",
                     [&](const std::vector<Var>& in) { return layer.forward(in[0], call); }, {x});
  }
}

// The valid rows of the padded forward, packed, for comparison with forward_packed.
std::vector<double> valid_rows(const Tensor& padded, const std::vector<std::int64_t>& lengths) {
  return ops::pack_rows(padded, lengths).to_vector();
}

TEST(TransformerEncoderLayer, PackedRowsAreBitwiseThePaddedForwardsRows) {
  // f32 at two sizes (7 rows against 15 padded: products of one strip; 91 against 160), and f64.
  struct Case {
    DType dtype;
    std::int64_t d_model, heads, T;
    std::vector<std::int64_t> lengths;
  };
  for (const Case& k :
       {Case{DType::f32, 8, 2, 5, {5, 2, 0}}, Case{DType::f32, 32, 4, 40, {40, 17, 1, 33}},
        Case{DType::f64, 8, 2, 6, {3, 6}}}) {
    for (const bool norm_first : {false, true}) {
      nn::TransformerLayerConfig c = config(norm_first);
      c.d_model = k.d_model;
      c.nhead = k.heads;
      c.dim_feedforward = 2 * k.d_model;
      c.dtype = k.dtype;
      Generator gen(4);
      nn::TransformerEncoderLayer layer(c, gen);
      const auto B = static_cast<std::int64_t>(k.lengths.size());
      const Tensor x = random({B, k.T, k.d_model}, 6).to(k.dtype);
      nn::AttentionCall call;
      call.key_lengths = k.lengths;
      const Tensor padded = layer.forward(Var(x), call).value();
      const Var packed = layer.forward_packed(Var(ops::pack_rows(x, k.lengths)), k.lengths, k.T);
      EXPECT_EQ(packed.value().to_vector(), valid_rows(padded, k.lengths))
          << "d_model " << k.d_model << " norm_first " << norm_first;
    }
  }
}

TEST(TransformerEncoderLayer, PackedRowsGradientsMatchCentralDifferences) {
  const std::vector<std::int64_t> lengths = {4, 1, 3};
  for (const bool norm_first : {false, true}) {
    Generator gen(5);
    nn::TransformerEncoderLayer layer(config(norm_first), gen);
    randomize(layer, 300);
    const Tensor x = random({3, 4, 8}, 7);
    expect_module_gradients("packed", layer, [&] {
      return layer.forward_packed(Var(ops::pack_rows(x, lengths)), lengths, 4);
    });
    expect_gradcheck("packed input",
                     [&](const std::vector<Var>& in) {
                       return layer.forward_packed(ag::pack_rows(in[0], lengths), lengths, 4);
                     },
                     {x});
  }
}

// MultiheadAttention alone, with what the encoder layers above do not configure: ALiBi (whose
// diagonal follows the padded query length) and grouped key/value heads.
TEST(MultiheadAttention, PackedRowsAreBitwiseThePaddedForwardsRowsWithALiBiAndGroupedHeads) {
  for (const nn::PositionEncoding position :
       {nn::PositionEncoding::none, nn::PositionEncoding::alibi}) {
    nn::MultiheadAttentionConfig c;
    c.embed_dim = 16;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.position = position;
    Generator gen(9);
    nn::MultiheadAttention mha(c, gen);
    const std::vector<std::int64_t> lengths = {3, 7, 1};
    const Tensor x = random({3, 7, 16}, 11).to(DType::f32);
    nn::AttentionCall call;
    call.key_lengths = lengths;
    const Tensor padded = mha.forward(Var(x), Var(x), Var(x), call).out.value();
    const Tensor packed = mha.forward_packed(Var(ops::pack_rows(x, lengths)), lengths, 7).value();
    EXPECT_EQ(packed.to_vector(), valid_rows(padded, lengths))
        << "ALiBi " << (position == nn::PositionEncoding::alibi);
  }
}

// The argument a call's qkv::Error names, or "no error".
std::string refused(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.argument();
  }
  return "no error";
}

TEST(MultiheadAttention, PackedRowsRefuseWhatTheyCannotDo) {
  Generator gen(6);
  nn::MultiheadAttentionConfig rope;
  rope.embed_dim = 8;
  rope.num_heads = 2;
  rope.position = nn::PositionEncoding::rope;
  nn::MultiheadAttention with_rope(rope, gen);
  const Var x(random({5, 8}, 8).to(DType::f32));
  EXPECT_EQ(refused([&] { with_rope.forward_packed(x, {2, 3}, 3); }), "position");
  nn::MultiheadAttentionConfig plain = rope;
  plain.position = nn::PositionEncoding::none;
  nn::MultiheadAttention mha(plain, gen);
  EXPECT_EQ(refused([&] { mha.forward_packed(Var(random({5, 7}, 9)), {2, 3}, 3); }), "x");
  EXPECT_EQ(refused([&] { mha.forward_packed(x, {2, 4}, 3); }), "lengths");
  EXPECT_EQ(mha.forward_packed(x, {2, 3}, 3).shape(), (Shape{5, 8}));
  nn::MultiheadAttentionConfig linear = plain;
  linear.kind = nn::AttentionKind::linear;
  nn::MultiheadAttention linear_mha(linear, gen);
  EXPECT_EQ(refused([&] { linear_mha.forward_packed(x, {2, 3}, 3); }), "kind");
}

TEST(TransformerDecoderLayer, NamesAndGradients) {
  for (const bool norm_first : {false, true}) {
    Generator gen(2);
    nn::TransformerDecoderLayer layer(config(norm_first), gen);
    const std::vector<std::string> names = names_of(layer);
    ASSERT_EQ(names.size(), 18u);
    EXPECT_EQ(names[4], "multihead_attn.in_proj_weight");
    EXPECT_EQ(names[8], "linear1.weight");
    EXPECT_EQ(names[16], "norm3.weight");
    randomize(layer, 200);
    const Tensor tgt = random({2, 3, 8}, 3), memory = random({2, 5, 8}, 4);
    nn::AttentionCall tgt_call, memory_call;
    tgt_call.is_causal = true;
    memory_call.key_padding_mask =
        Tensor::from_values({2, 5}, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, DType::boolean);
    expect_module_gradients(norm_first ? "decoder pre-norm" : "decoder post-norm", layer, [&] {
      return layer.forward(Var(tgt), Var(memory), tgt_call, memory_call);
    });
    expect_gradcheck("decoder inputs",
                     [&](const std::vector<Var>& in) {
                       return layer.forward(in[0], in[1], tgt_call, memory_call);
                     },
                     {tgt, memory});
    // Padded memory positions never matter.
    Tensor other = memory.clone();
    other.set({1, 4, 0}, 9.0);
    EXPECT_EQ(layer.forward(Var(tgt), Var(memory), tgt_call, memory_call).value().to_vector(),
              layer.forward(Var(tgt), Var(other), tgt_call, memory_call).value().to_vector());
  }
}

// Given the memory's lengths, start projects only the valid rows: the same bits there, 0 past.
TEST(TransformerDecoderLayer, StartWithLengthsProjectsTheValidRowsAlone) {
  nn::TransformerLayerConfig c = config(true);
  c.dtype = DType::f32;
  Generator gen(8);
  nn::TransformerDecoderLayer layer(c, gen);
  const std::vector<std::int64_t> lengths = {5, 2, 4};
  const Tensor memory = random({3, 5, 8}, 10).to(DType::f32);
  const nn::DecoderLayerCache all = layer.start(Var(memory), 3);
  const nn::DecoderLayerCache valid = layer.start(Var(memory), 3, lengths);
  for (const auto& [a, v] : {std::pair{all.cross_k, valid.cross_k}, {all.cross_v, valid.cross_v}}) {
    ASSERT_EQ(v.shape(), a.shape());
    EXPECT_EQ(ops::pack_rows(v, lengths).to_vector(), ops::pack_rows(a, lengths).to_vector());
    const std::vector<double> pad = v.slice(0, 1, 2).slice(1, 2, 5).contiguous().to_vector();
    EXPECT_EQ(pad, std::vector<double>(pad.size(), 0.0));
  }
  EXPECT_EQ(refused([&] { layer.start(Var(memory), 3, {5, 6, 1}); }), "memory_lengths");
  EXPECT_EQ(refused([&] { layer.start(Var(memory), 3, {5, 1}); }), "memory_lengths");
}

TEST(TransformerEncoderLayer, DropoutInTrainingOnly) {
  nn::TransformerLayerConfig c = config(false);
  c.dropout = 0.3;
  Generator gen(3);
  nn::TransformerEncoderLayer layer(c, gen);
  const Tensor x = random({2, 4, 8}, 5);
  const Tensor a = layer.forward(Var(x)).value(), b = layer.forward(Var(x)).value();
  EXPECT_GT(relative_difference(a, b), 1e-6);
  layer.eval();
  const Tensor e = layer.forward(Var(x)).value();
  const Tensor expected = encoder_formula(nn::state_dict(layer), Var(x), false, false).value();
  EXPECT_LT(relative_difference(e, expected), 1e-12);
}

}  // namespace
}  // namespace qkv::testing
