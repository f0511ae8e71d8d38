#pragma once

#include <cstdint>
#include <vector>

#include "qkv/nn/attention.hpp"
#include "qkv/nn/layers.hpp"
#include "qkv/nn/module.hpp"
#include "qkv/tensor.hpp"

namespace qkv::nn {

struct TransformerLayerConfig {
  std::int64_t d_model = 0;
  std::int64_t nhead = 1;
  std::int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::relu;
  double layer_norm_eps = 1e-5;
  bool norm_first = false;  // true: pre-norm; false: post-norm (PyTorch's default)
  bool bias = true;
  DType dtype = DType::f32;
  // The self-attention's (and cross-attention's) kind and, for AttentionKind::linear, its feature
  // map (MultiheadAttentionConfig).
  AttentionKind attention = AttentionKind::softmax;
  FeatureMap feature_map = FeatureMap::elu;
  std::int64_t num_features = 0;
  std::uint64_t feature_seed = 0;
};

// PyTorch's nn.TransformerEncoderLayer (batch_first): parameters "self_attn.*", "linear1.*",
// "linear2.*", "norm1.*", "norm2.*".
//   norm_first:  x = x + sa(norm1(x));  x = x + ff(norm2(x))
//   otherwise:   x = norm1(x + sa(x));  x = norm2(x + ff(x))
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(const TransformerLayerConfig& config, Generator& generator);
  // src [B, T, E] -> [B, T, E]; call: src_mask / src_key_padding_mask / is_causal
  Var forward(const Var& src, const AttentionCall& call = {});
  // forward() over the valid tokens of a padded batch, packed (ops::pack_rows): x [n, E], the rows
  // (b, t < lengths[b]) of a [B, T, E] batch in order -> [n, E], bitwise forward()'s rows there
  // with key_lengths = lengths (in training with dropout, the masks are drawn over the packed
  // rows). Only the attention sees the padding. MultiheadAttention::forward_packed's limits.
  Var forward_packed(const Var& x, const std::vector<std::int64_t>& lengths, std::int64_t T);

 private:
  TransformerLayerConfig config_;
  MultiheadAttention self_attn_;
  FeedForward ff_;
  LayerNorm norm1_, norm2_;
  Dropout dropout1_, dropout2_;
};

// What incremental decoding keeps for one decoder layer and N rows (sentences, or hypotheses).
struct DecoderLayerCache {
  Tensor self_k, self_v;    // [N, max_length, H, D]: the tokens decoded so far, [0, position]
  Tensor cross_k, cross_v;  // [N, S, H, D]: the memory's, computed once
};

// PyTorch's nn.TransformerDecoderLayer (batch_first): "self_attn.*", "multihead_attn.*",
// "linear1.*", "linear2.*", "norm1.*", "norm2.*", "norm3.*".
//   norm_first:  x = x + sa(norm1(x));  x = x + mha(norm2(x), memory);  x = x + ff(norm3(x))
//   otherwise:   x = norm1(x + sa(x));  x = norm2(x + mha(x, memory));  x = norm3(x + ff(x))
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(const TransformerLayerConfig& config, Generator& generator);
  // tgt [B, T, E], memory [B, S, E] -> [B, T, E]. With cross_weights, the cross-attention
  // weights are written there ([B, T, S], or [B, H, T, S] when memory_call does not average).
  Var forward(const Var& tgt, const Var& memory, const AttentionCall& tgt_call = {},
              const AttentionCall& memory_call = {}, Tensor* cross_weights = nullptr);

  // Incremental decoding, one token per call, the same function as forward() with a causal
  // tgt_call. memory [N, S, E] -> a cache for up to max_length tokens.
  // With memory_lengths [N] (the source lengths), rows of cross_k and cross_v past each length
  // are 0 and their projections skipped (cross-attention with those key lengths never reads them).
  DecoderLayerCache start(const Var& memory, std::int64_t max_length,
                          const std::vector<std::int64_t>& memory_lengths = {}) const;
  // x [N, 1, E], the token at `position` -> [N, 1, E]; its keys and values join the cache, and its
  // one query attends to every cached key (no mask needed). cross_weights as in forward().
  Var step(const Var& x, DecoderLayerCache& cache, std::int64_t position,
           const AttentionCall& memory_call = {}, Tensor* cross_weights = nullptr);

 private:
  TransformerLayerConfig config_;
  MultiheadAttention self_attn_, multihead_attn_;
  FeedForward ff_;
  LayerNorm norm1_, norm2_, norm3_;
  Dropout dropout1_, dropout2_, dropout3_;
};

}  // namespace qkv::nn
