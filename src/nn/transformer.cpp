// PyTorch's TransformerEncoderLayer and TransformerDecoderLayer, pre-norm and post-norm.
#include "qkv/nn/transformer.hpp"

namespace qkv::nn {

namespace {

MultiheadAttentionConfig attention_config(const TransformerLayerConfig& c) {
  MultiheadAttentionConfig a;
  a.embed_dim = c.d_model;
  a.num_heads = c.nhead;
  a.bias = c.bias;
  a.dropout = c.dropout;
  a.dtype = c.dtype;
  return a;
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerConfig& config,
                                                 Generator& generator)
    : config_(config),
      self_attn_(attention_config(config), generator),
      ff_(config.d_model, config.dim_feedforward, generator, config.activation, config.dropout,
          config.dtype),
      norm1_(config.d_model, config.layer_norm_eps, config.dtype),
      norm2_(config.d_model, config.layer_norm_eps, config.dtype),
      dropout1_(config.dropout, draw_seed(generator)),
      dropout2_(config.dropout, draw_seed(generator)) {
  register_module("self_attn", self_attn_);
  register_module("", ff_);  // "linear1.*", "linear2.*" at this level, as in PyTorch
  register_module("norm1", norm1_);
  register_module("norm2", norm2_);
  register_module("dropout1", dropout1_);
  register_module("dropout2", dropout2_);
}

// src [B, T, E] -> [B, T, E]
Var TransformerEncoderLayer::forward(const Var& src, const AttentionCall& call) {
  AttentionCall c = call;
  c.need_weights = false;
  const auto sa = [&](const Var& x) { return dropout1_(self_attn_.forward(x, x, x, c).out); };
  const auto ff = [&](const Var& x) { return dropout2_(ff_(x)); };
  Var x = src;
  if (config_.norm_first) {
    x = x + sa(norm1_(x));
    x = x + ff(norm2_(x));
  } else {
    x = norm1_(x + sa(x));
    x = norm2_(x + ff(x));
  }
  return x;
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerConfig& config,
                                                 Generator& generator)
    : config_(config),
      self_attn_(attention_config(config), generator),
      multihead_attn_(attention_config(config), generator),
      ff_(config.d_model, config.dim_feedforward, generator, config.activation, config.dropout,
          config.dtype),
      norm1_(config.d_model, config.layer_norm_eps, config.dtype),
      norm2_(config.d_model, config.layer_norm_eps, config.dtype),
      norm3_(config.d_model, config.layer_norm_eps, config.dtype),
      dropout1_(config.dropout, draw_seed(generator)),
      dropout2_(config.dropout, draw_seed(generator)),
      dropout3_(config.dropout, draw_seed(generator)) {
  register_module("self_attn", self_attn_);
  register_module("multihead_attn", multihead_attn_);
  register_module("", ff_);
  register_module("norm1", norm1_);
  register_module("norm2", norm2_);
  register_module("norm3", norm3_);
  register_module("dropout1", dropout1_);
  register_module("dropout2", dropout2_);
  register_module("dropout3", dropout3_);
}

// tgt [B, T, E], memory [B, S, E] -> [B, T, E]
Var TransformerDecoderLayer::forward(const Var& tgt, const Var& memory,
                                     const AttentionCall& tgt_call,
                                     const AttentionCall& memory_call) {
  AttentionCall tc = tgt_call, mc = memory_call;
  tc.need_weights = mc.need_weights = false;
  const auto sa = [&](const Var& x) { return dropout1_(self_attn_.forward(x, x, x, tc).out); };
  const auto mha = [&](const Var& x) {
    return dropout2_(multihead_attn_.forward(x, memory, memory, mc).out);
  };
  const auto ff = [&](const Var& x) { return dropout3_(ff_(x)); };
  Var x = tgt;
  if (config_.norm_first) {
    x = x + sa(norm1_(x));
    x = x + mha(norm2_(x));
    x = x + ff(norm3_(x));
  } else {
    x = norm1_(x + sa(x));
    x = norm2_(x + mha(x));
    x = norm3_(x + ff(x));
  }
  return x;
}

}  // namespace qkv::nn
