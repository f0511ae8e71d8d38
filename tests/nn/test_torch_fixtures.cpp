// qkv's modules against PyTorch: tests/fixtures/*.safetensors hold torch.nn modules' weights,
// inputs, masks, outputs, attention weights and gradients (make_torch_fixtures.py). The modules
// load the weights by their PyTorch names and must reproduce outputs and gradients in f32.
//
// Tolerance: max |qkv - torch| / max(1, max |torch|) <= 1e-5 per tensor, the error measured
// relative to the tensor's largest magnitude where it exceeds 1, both sides computing
// in f32 with different summation orders.
#include <iostream>
#include <string>
#include <vector>

#include "nn/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

constexpr double kTolerance = 1e-5;

SafetensorsContents fixture(const std::string& name) {
  return load_safetensors(std::string(QKV_FIXTURES_DIR) + "/" + name + ".safetensors");
}

void expect_close(const std::string& what, const Tensor& actual, const Tensor& expected) {
  ASSERT_TRUE(actual.defined()) << what << ": no value";
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const double d = relative_difference(actual, expected);
  std::cout << "[ torch ] " << what << " " << shape_string(expected.shape()) << " relative error "
            << d << "\n";
  EXPECT_LE(d, kTolerance) << what;
}

// The inputs' and every parameter's gradients, once the loss went backward.
void expect_gradients(const std::string& name, const nn::Module& module,
                      const SafetensorsContents& f,
                      const std::vector<std::pair<std::string, Var>>& inputs) {
  for (const auto& [input, v] : inputs) {
    expect_close(name + " grad " + input, v.grad(), f.tensors.at("grad." + input));
  }
  for (const auto& [pname, p] : module.named_parameters()) {
    expect_close(name + " grad " + pname, p.grad(), f.tensors.at("grad." + pname));
  }
}

// Forward with out.backward(R); then the output, the inputs' and every parameter's gradient.
void compare(const std::string& name, const nn::Module& module, const SafetensorsContents& f,
             const Var& out, const std::vector<std::pair<std::string, Var>>& inputs) {
  out.backward(f.tensors.at("input.R"));
  expect_close(name + " out", out.value(), f.tensors.at("output.out"));
  expect_gradients(name, module, f, inputs);
}

nn::MultiheadAttentionConfig mha_config() {
  nn::MultiheadAttentionConfig c;
  c.embed_dim = 16;
  c.num_heads = 4;
  return c;
}

TEST(TorchFixtures, MultiheadSelfAttentionWithPaddingAndCausalMask) {
  const SafetensorsContents f = fixture("mha_self");
  Generator gen(0);
  nn::MultiheadAttention m(mha_config(), gen);
  nn::load_state_dict(m, f.tensors, /*strict=*/false);
  const Var x(f.tensors.at("input.x"), true);
  nn::AttentionCall call;
  call.key_padding_mask = f.tensors.at("input.key_padding_mask");
  call.attn_mask = f.tensors.at("input.attn_mask");
  call.is_causal = true;
  call.need_weights = true;
  call.average_attn_weights = false;
  const nn::AttentionResult r = m.forward(x, x, x, call);
  expect_close("mha_self weights", r.weights, f.tensors.at("output.weights"));
  compare("mha_self", m, f, r.out, {{"x", x}});
}

TEST(TorchFixtures, MultiheadCrossAttentionWithFloatMask) {
  const SafetensorsContents f = fixture("mha_cross");
  Generator gen(0);
  nn::MultiheadAttention m(mha_config(), gen);
  nn::load_state_dict(m, f.tensors, false);
  const Var q(f.tensors.at("input.q"), true), k(f.tensors.at("input.k"), true),
      v(f.tensors.at("input.v"), true);
  nn::AttentionCall call;
  call.key_padding_mask = f.tensors.at("input.key_padding_mask");
  call.attn_mask = f.tensors.at("input.attn_mask");
  call.need_weights = true;
  const nn::AttentionResult r = m.forward(q, k, v, call);
  expect_close("mha_cross weights", r.weights, f.tensors.at("output.weights"));
  compare("mha_cross", m, f, r.out, {{"q", q}, {"k", k}, {"v", v}});
}

nn::TransformerLayerConfig layer_config(bool norm_first) {
  nn::TransformerLayerConfig c;
  c.d_model = 16;
  c.nhead = 4;
  c.dim_feedforward = 32;
  c.dropout = 0.0;
  c.norm_first = norm_first;
  c.activation = norm_first ? nn::Activation::gelu : nn::Activation::relu;
  return c;
}

TEST(TorchFixtures, EncoderLayerPostNormAndPreNorm) {
  for (const bool norm_first : {false, true}) {
    const std::string name = norm_first ? "encoder_pre" : "encoder_post";
    const SafetensorsContents f = fixture(name);
    Generator gen(0);
    nn::TransformerEncoderLayer layer(layer_config(norm_first), gen);
    nn::load_state_dict(layer, f.tensors, false);
    const Var src(f.tensors.at("input.src"), true);
    nn::AttentionCall call;
    call.attn_mask = f.tensors.at("input.src_mask");
    call.key_padding_mask = f.tensors.at("input.src_key_padding_mask");
    call.is_causal = true;
    compare(name, layer, f, layer.forward(src, call), {{"src", src}});
  }
}

TEST(TorchFixtures, DecoderLayerPostNormAndPreNorm) {
  for (const bool norm_first : {false, true}) {
    const std::string name = norm_first ? "decoder_pre" : "decoder_post";
    const SafetensorsContents f = fixture(name);
    Generator gen(0);
    nn::TransformerDecoderLayer layer(layer_config(norm_first), gen);
    nn::load_state_dict(layer, f.tensors, false);
    const Var tgt(f.tensors.at("input.tgt"), true), memory(f.tensors.at("input.memory"), true);
    nn::AttentionCall tgt_call, memory_call;
    tgt_call.attn_mask = f.tensors.at("input.tgt_mask");
    tgt_call.is_causal = true;
    memory_call.key_padding_mask = f.tensors.at("input.memory_key_padding_mask");
    compare(name, layer, f, layer.forward(tgt, memory, tgt_call, memory_call),
            {{"tgt", tgt}, {"memory", memory}});
  }
}

// torch.nn.GRU, bidirectional, over packed sequences of lengths 6 and 4 with an initial state;
// the loss reads the padded outputs and the final states.
TEST(TorchFixtures, BidirectionalGruOverPackedSequences) {
  const SafetensorsContents f = fixture("gru_bidirectional");
  Generator gen(0);
  nn::GRU gru(5, 4, gen, /*bidirectional=*/true);
  nn::load_state_dict(gru, f.tensors, /*strict=*/false);
  const Var x(f.tensors.at("input.x"), true), h0(f.tensors.at("input.h0"), true);
  std::vector<std::int64_t> lengths;
  for (const double n : f.tensors.at("input.lengths").to_vector()) {
    lengths.push_back(static_cast<std::int64_t>(n));
  }
  const nn::GRU::Output o = gru.forward(x, h0, lengths);
  expect_close("gru out", o.outputs.value(), f.tensors.at("output.out"));
  expect_close("gru final", o.final.value(), f.tensors.at("output.final"));
  const Var loss = ag::sum(o.outputs * Var(f.tensors.at("input.R"))) +
                   ag::sum(o.final * Var(f.tensors.at("input.R_final")));
  loss.backward();
  expect_gradients("gru", gru, f, {{"x", x}, {"h0", h0}});
}

}  // namespace
}  // namespace qkv::testing
