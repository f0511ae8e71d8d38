// PyTorch's TransformerEncoderLayer and TransformerDecoderLayer, pre-norm and post-norm.
#include "qkv/nn/transformer.hpp"

#include <string>

#include "qkv/error.hpp"

namespace qkv::nn {

namespace {

MultiheadAttentionConfig attention_config(const TransformerLayerConfig& c) {
  MultiheadAttentionConfig a;
  a.embed_dim = c.d_model;
  a.num_heads = c.nhead;
  a.bias = c.bias;
  a.dropout = c.dropout;
  a.dtype = c.dtype;
  a.kind = c.attention;
  a.feature_map = c.feature_map;
  a.num_features = c.num_features;
  a.feature_seed = c.feature_seed;
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

namespace {

// x [..., E] -> [..., E]: the two residual blocks around sa (self-attention) and ff, in pre-norm
// or post-norm order.
template <class SelfAttention, class Ff>
Var encoder_residuals(bool norm_first, const Var& x, const LayerNorm& norm1, const LayerNorm& norm2,
                      SelfAttention sa, Ff ff) {
  if (norm_first) {
    const Var y = x + sa(norm1(x));
    return y + ff(norm2(y));
  }
  const Var y = norm1(x + sa(x));
  return norm2(y + ff(y));
}

}  // namespace

// src [B, T, E] -> [B, T, E]
Var TransformerEncoderLayer::forward(const Var& src, const AttentionCall& call) {
  AttentionCall c = call;
  c.need_weights = false;
  const auto sa = [&](const Var& x) { return dropout1_(self_attn_.forward(x, x, x, c).out); };
  const auto ff = [&](const Var& x) { return dropout2_(ff_(x)); };
  return encoder_residuals(config_.norm_first, src, norm1_, norm2_, sa, ff);
}

// x [n, E] -> [n, E]
Var TransformerEncoderLayer::forward_packed(const Var& x, const std::vector<std::int64_t>& lengths,
                                            std::int64_t T) {
  const auto sa = [&](const Var& h) { return dropout1_(self_attn_.forward_packed(h, lengths, T)); };
  const auto ff = [&](const Var& h) { return dropout2_(ff_(h)); };
  return encoder_residuals(config_.norm_first, x, norm1_, norm2_, sa, ff);
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

namespace {

// x [B, T, E] -> [B, T, E]: the three residual blocks around sa (self-attention), mha
// (cross-attention) and ff, in pre-norm or post-norm order.
template <class SelfAttention, class CrossAttention, class Ff>
Var decoder_residuals(bool norm_first, const Var& x, const LayerNorm& norm1, const LayerNorm& norm2,
                      const LayerNorm& norm3, SelfAttention sa, CrossAttention mha, Ff ff) {
  if (norm_first) {
    Var y = x + sa(norm1(x));
    y = y + mha(norm2(y));
    return y + ff(norm3(y));
  }
  Var y = norm1(x + sa(x));
  y = norm2(y + mha(y));
  return norm3(y + ff(y));
}

}  // namespace

// tgt [B, T, E], memory [B, S, E] -> [B, T, E]
Var TransformerDecoderLayer::forward(const Var& tgt, const Var& memory,
                                     const AttentionCall& tgt_call,
                                     const AttentionCall& memory_call, Tensor* cross_weights) {
  AttentionCall tc = tgt_call, mc = memory_call;
  tc.need_weights = false;
  mc.need_weights = cross_weights != nullptr;
  const auto sa = [&](const Var& x) { return dropout1_(self_attn_.forward(x, x, x, tc).out); };
  const auto mha = [&](const Var& x) {
    AttentionResult r = multihead_attn_.forward(x, memory, memory, mc);
    if (cross_weights != nullptr) *cross_weights = r.weights;
    return dropout2_(r.out);
  };
  const auto ff = [&](const Var& x) { return dropout3_(ff_(x)); };
  return decoder_residuals(config_.norm_first, tgt, norm1_, norm2_, norm3_, sa, mha, ff);
}

// memory [N, S, E] -> cross_k, cross_v [N, S, H, D]; self_k, self_v [N, max_length, H, D]
DecoderLayerCache TransformerDecoderLayer::start(
    const Var& memory, std::int64_t max_length,
    const std::vector<std::int64_t>& memory_lengths) const {
  if (max_length < 1) throw Error("max_length", ">= 1", std::to_string(max_length));
  const MultiheadAttentionConfig& a = self_attn_.config();
  const Shape self_shape = {memory.size(0), max_length, a.num_kv_heads, a.embed_dim / a.num_heads};
  DecoderLayerCache cache;
  cache.self_k = Tensor::empty(self_shape, a.dtype);
  cache.self_v = Tensor::empty(self_shape, a.dtype);
  if (memory_lengths.empty()) {
    const auto [k, v] = multihead_attn_.project_key_value(memory, memory);
    cache.cross_k = k.value();
    cache.cross_v = v.value();
    return cache;
  }
  if (memory.dim() != 3) throw Error("memory", "[N, S, E]", shape_string(memory.shape()));
  if (static_cast<std::int64_t>(memory_lengths.size()) != memory.size(0)) {
    throw Error("memory_lengths", std::to_string(memory.size(0)) + " lengths (memory's N)",
                std::to_string(memory_lengths.size()));
  }
  for (const std::int64_t l : memory_lengths) {
    if (l < 0 || l > memory.size(1)) {
      throw Error("memory_lengths", "each in [0, " + std::to_string(memory.size(1)) + "]",
                  std::to_string(l));
    }
  }
  // The valid rows as one sequence [1, n, E]: k and v [1, n, Hk, D], each row the bits of the
  // padded projection's.
  const Var rows = autograd::pack_rows(memory, memory_lengths);
  const Var packed = autograd::reshape(rows, {1, rows.size(0), memory.size(2)});
  const auto [k, v] = multihead_attn_.project_key_value(packed, packed);
  const auto padded = [&](const Var& y) {
    return autograd::unpack_rows(autograd::reshape(y, {y.size(1), y.size(2), y.size(3)}),
                                 memory_lengths, memory.size(1))
        .value();
  };
  cache.cross_k = padded(k);
  cache.cross_v = padded(v);
  return cache;
}

// x [N, 1, E] -> [N, 1, E]
Var TransformerDecoderLayer::step(const Var& x, DecoderLayerCache& cache, std::int64_t position,
                                  const AttentionCall& memory_call, Tensor* cross_weights) {
  if (position < 0 || position >= cache.self_k.size(1)) {
    throw Error("position", "in [0, " + std::to_string(cache.self_k.size(1)) + ") (the cache's)",
                std::to_string(position));
  }
  AttentionCall mc = memory_call;
  mc.need_weights = cross_weights != nullptr;
  const auto sa = [&](const Var& h) {
    const auto [q, k, v] = self_attn_.project_self(h, position);
    Tensor k_slot = cache.self_k.slice(1, position, position + 1);
    Tensor v_slot = cache.self_v.slice(1, position, position + 1);
    k_slot.copy_from(k.value());
    v_slot.copy_from(v.value());
    const Var keys(cache.self_k.slice(1, 0, position + 1));
    const Var values(cache.self_v.slice(1, 0, position + 1));
    return dropout1_(self_attn_.attend(q, keys, values).out);
  };
  const auto mha = [&](const Var& h) {
    AttentionResult r = multihead_attn_.attend(multihead_attn_.project_query(h, position),
                                               Var(cache.cross_k), Var(cache.cross_v), mc);
    if (cross_weights != nullptr) *cross_weights = r.weights;
    return dropout2_(r.out);
  };
  const auto ff = [&](const Var& h) { return dropout3_(ff_(h)); };
  return decoder_residuals(config_.norm_first, x, norm1_, norm2_, norm3_, sa, mha, ff);
}

}  // namespace qkv::nn
