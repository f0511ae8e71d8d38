#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "qkv/attention.hpp"
#include "qkv/linear_attention.hpp"
#include "qkv/mod_values.hpp"
#include "qkv/nn/layers.hpp"
#include "qkv/nn/module.hpp"

namespace qkv::nn {

enum class PositionEncoding : std::uint8_t { none, rope, alibi };

// softmax: scaled dot-product attention (the fused kernel). materialized: the same function
// composed of ops (autograd::attention_decomposed), the [B, Hq, Tq, Tk] scores materialized as
// textbook attention does, so its memory grows with Tq Tk (no need_weights, mods or position_bias
// differences: it takes what softmax takes but mods). linear: linear attention
// (qkv/linear_attention.hpp) with the config's feature map (elu + 1, or FAVOR+ estimating softmax
// attention with its default scale), causal with is_causal, padded with key_lengths; it has no
// weights, so no dropout, ALiBi, tensor masks, position_bias, mods or need_weights.
enum class AttentionKind : std::uint8_t { softmax, linear, materialized };

struct MultiheadAttentionConfig {
  std::int64_t embed_dim = 0;
  std::int64_t num_heads = 1;
  std::int64_t num_kv_heads = 0;  // 0: num_heads; fewer: grouped-query attention
  std::int64_t kdim = 0;          // 0: embed_dim
  std::int64_t vdim = 0;          // 0: embed_dim
  bool bias = true;
  double dropout = 0.0;  // on the attention weights, in training mode
  PositionEncoding position = PositionEncoding::none;
  double rope_base = 10000.0;
  DType dtype = DType::f32;
  AttentionKind kind = AttentionKind::softmax;
  // AttentionKind::linear: LinearOptions' feature_map, num_features and seed (the features'
  // first draw; redraw_features draws others).
  FeatureMap feature_map = FeatureMap::elu;
  std::int64_t num_features = 0;
  std::uint64_t feature_seed = 0;
};

struct AttentionCall {
  // [B, Tk] boolean, true = padded (ignored), as PyTorch.
  Tensor key_padding_mask;
  // [Tq, Tk] or [B * num_heads, Tq, Tk]: boolean, true = NOT allowed (as PyTorch), or floating,
  // added to the scores (-inf entries disallow; NaN and +inf are added, making that row NaN).
  Tensor attn_mask;
  bool is_causal = false;  // top-left: query i sees keys j <= i
  // [B] valid keys per batch (keys from key_lengths[b] on are ignored): the same as a
  // key_padding_mask that pads the tail, but the kernel skips those keys instead of testing a mask.
  std::vector<std::int64_t> key_lengths;
  Var position_bias;  // a learned bias broadcastable to [B, Hq, Tq, Tk] (T5), or undefined
  bool need_weights = false;
  bool average_attn_weights = true;
  // flex_attention's mods as values (qkv/mod_values.hpp). With either, attention runs through
  // autograd::flex_attention: is_causal joins the mask as masks::causal(), key_lengths as
  // masks::key_lengths, and ALiBi positions follow the score mod as scores::alibi (its diagonal
  // from Tq and Tk, not from each batch's key length); the tensor masks, position_bias and
  // need_weights have no flex form and are refused.
  std::optional<MaskMod> mask_mod;
  std::optional<ScoreMod> score_mod;
  // The Vars of score_mod's captured tensors, in its order (ScoreMod::captured()), so that they
  // get gradients: a RelativePositionBias's table (its score_mod().table).
  std::vector<Var> score_tables;
};

struct AttentionResult {
  Var out;  // [B, Tq, E]
  // need_weights: [B, Tq, Tk] averaged over heads, else [B, Hq, Tq, Tk]; before dropout (PyTorch
  // returns them after it in training mode).
  Tensor weights;
};

// PyTorch's nn.MultiheadAttention, batch-first, with grouped-query heads, RoPE and ALiBi.
// Parameters: "in_proj_weight" [E + 2 Hk D, E] and "in_proj_bias" when kdim = vdim = E and
// Hk = Hq, else "q_proj_weight" [E, E], "k_proj_weight" [Hk D, kdim], "v_proj_weight"
// [Hk D, vdim] (and "in_proj_bias" [E + 2 Hk D]); "out_proj.weight", "out_proj.bias".
// Initialized as PyTorch: projections xavier_uniform_, in_proj_bias and out_proj.bias 0,
// out_proj.weight as a Linear. Attention runs through the autograd attention primitive (the
// fused kernel and its backward).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(const MultiheadAttentionConfig& config, Generator& generator);
  // query [B, Tq, E], key [B, Tk, kdim], value [B, Tk, vdim] -> out [B, Tq, E]
  AttentionResult forward(const Var& query, const Var& key, const Var& value,
                          const AttentionCall& call = {});

  // forward() in its three steps, for callers that keep keys and values between calls (a
  // decoder's KV cache, cross-attention keys computed once per sentence). position_start is the
  // position of the first token (RoPE rotates by it).
  // query [B, Tq, E] -> q [B, Tq, Hq, D]
  Var project_query(const Var& query, std::int64_t position_start = 0) const;
  // key [B, Tk, kdim], value [B, Tk, vdim] -> k, v [B, Tk, Hk, D]
  std::pair<Var, Var> project_key_value(const Var& key, const Var& value,
                                        std::int64_t position_start = 0) const;
  // Self-attention's three projections of one input: x [B, T, E] -> q [B, T, Hq, D], k, v
  // [B, T, Hk, D], as project_query(x) and project_key_value(x, x) give them; with packed
  // weights, one product over the whole in_proj_weight (views of its output), with the bits of
  // the three.
  std::tuple<Var, Var, Var> project_self(const Var& x, std::int64_t position_start = 0) const;
  // Self-attention over the valid tokens of a padded batch, packed (ops::pack_rows): x [n, E],
  // the rows (b, t < lengths[b]) of a [B, T, E] batch in order -> out [n, E], bitwise the rows
  // forward(padded, padded, padded) gives there with key_lengths = lengths. The projections take
  // n rows instead of B T; the attention runs on [B, T] and skips rows past each length. Softmax
  // attention without RoPE (whose positions would be the packed ones).
  Var forward_packed(const Var& x, const std::vector<std::int64_t>& lengths, std::int64_t T);
  // q [B, Tq, Hq, D], k and v [B, Tk, Hk, D] (any strides) -> out [B, Tq, E]
  AttentionResult attend(const Var& q, const Var& k, const Var& v, const AttentionCall& call = {});
  const MultiheadAttentionConfig& config() const noexcept { return config_; }
  // AttentionKind::linear with FeatureMap::favor: the random features of this seed from now on
  // (Performer redraws them every so many steps in training).
  void redraw_features(std::uint64_t seed) noexcept { config_.feature_seed = seed; }

 private:
  void add_dropout(AttentionOptions& options);

  MultiheadAttentionConfig config_;
  std::int64_t head_dim_;
  bool packed_;
  Var in_proj_weight_, q_proj_weight_, k_proj_weight_, v_proj_weight_, in_proj_bias_;
  Linear out_proj_;
  std::uint64_t seed_, calls_ = 0;
};

// The score mask and bias of a call, in qkv's terms: keep-mask (true keeps) [B or 1, Hq or 1,
// Tq, Tk] and additive bias, from PyTorch's conventions. Exposed for the tests.
AttentionOptions attention_options(const AttentionCall& call, std::int64_t batch,
                                   std::int64_t num_heads, std::int64_t query_length,
                                   std::int64_t key_length, DType dtype);

}  // namespace qkv::nn
