// nn.MultiheadAttention on the autograd attention primitive: projections, heads, PyTorch's masks
// mapped to qkv's keep-mask and bias, RoPE and ALiBi, and the weights for inspection.
#include "qkv/nn/attention.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/nn/positional.hpp"
#include "qkv/ops.hpp"

namespace qkv::nn {

namespace ag = autograd;

namespace {

std::string str(std::int64_t n) { return std::to_string(n); }

// xavier_uniform_ on a [fan_out, fan_in] weight.
Var xavier_parameter(std::int64_t fan_out, std::int64_t fan_in, Generator& generator, DType dtype) {
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_parameter({fan_out, fan_in}, bound, generator, dtype);
}

MultiheadAttentionConfig resolved(MultiheadAttentionConfig c) {
  if (c.embed_dim <= 0) throw Error("embed_dim", "> 0", str(c.embed_dim));
  if (c.num_heads <= 0 || c.embed_dim % c.num_heads != 0) {
    throw Error("num_heads", "a divisor of embed_dim " + str(c.embed_dim), str(c.num_heads));
  }
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.num_kv_heads < 0 || c.num_heads % c.num_kv_heads != 0) {
    throw Error("num_kv_heads", "a divisor of num_heads " + str(c.num_heads), str(c.num_kv_heads));
  }
  if (c.kdim == 0) c.kdim = c.embed_dim;
  if (c.vdim == 0) c.vdim = c.embed_dim;
  if (c.kdim < 0) throw Error("kdim", "> 0", str(c.kdim));
  if (c.vdim < 0) throw Error("vdim", "> 0", str(c.vdim));
  if (!(c.dropout >= 0 && c.dropout < 1)) {
    throw Error("dropout", "a probability in [0, 1)", std::to_string(c.dropout));
  }
  if (c.position == PositionEncoding::rope && (c.embed_dim / c.num_heads) % 2 != 0) {
    throw Error("num_heads", "an even head dim for RoPE", str(c.embed_dim / c.num_heads));
  }
  if (c.kind == AttentionKind::linear && c.dropout != 0) {
    throw Error("dropout", "0 with AttentionKind::linear (it has no weights to drop)",
                std::to_string(c.dropout));
  }
  if (c.kind == AttentionKind::linear && c.position == PositionEncoding::alibi) {
    throw Error("position", "none or rope with AttentionKind::linear (ALiBi biases scores)",
                "alibi");
  }
  return c;
}

// x [B, T, in], w [out_total, in] rows [row, row + n), bias rows the same -> [B, T, n]
Var project(const Var& x, const Var& w, std::int64_t row, std::int64_t n, const Var& bias) {
  return ag::linear(x, ag::slice(w, 0, row, row + n),
                    bias.defined() ? ag::slice(bias, 0, row, row + n) : Var());
}

void check_input(const char* name, const Var& x, std::int64_t batch, std::int64_t dim) {
  if (x.dim() != 3) throw Error(name, "[B, T, " + str(dim) + "]", shape_string(x.shape()));
  if (x.size(2) != dim) throw Error(name, "embed dim " + str(dim), str(x.size(2)));
  if (batch >= 0 && x.size(0) != batch) {
    throw Error(name, "batch " + str(batch) + " (from query)", str(x.size(0)));
  }
}

// A call with mods has no place for the tensor masks, the learned bias or the weights.
// what: why they are refused ("with mask_mod or score_mod (...)").
void expect_no_tensor_masks(const AttentionCall& call, const std::string& what) {
  const auto refuse = [&](const char* name, const std::string& got) {
    throw Error(name, "none " + what, got);
  };
  if (call.key_padding_mask.defined()) {
    refuse("key_padding_mask", "a tensor " + shape_string(call.key_padding_mask.shape()));
  }
  if (call.attn_mask.defined()) {
    refuse("attn_mask", "a tensor " + shape_string(call.attn_mask.shape()));
  }
  if (call.position_bias.defined()) {
    refuse("position_bias", "a Var " + shape_string(call.position_bias.shape()));
  }
  if (call.need_weights) refuse("need_weights", "true");
}

// q [B, Tq, Hq, D], k and v [B, Tk, Hk, D] -> [B, Tq, Hq, D]: the call's mods with what the
// built-in path takes from options (causal, key lengths, ALiBi, dropout) folded in.
Var flex_attend(const Var& q, const Var& k, const Var& v, const AttentionCall& call,
                const AttentionOptions& options) {
  MaskMod mask = call.mask_mod.value_or(MaskMod());
  if (options.causal == Causal::top_left) mask = mask & masks::causal();
  if (!options.key_lengths.empty()) mask = mask & masks::key_lengths(options.key_lengths);
  ScoreMod score = call.score_mod.value_or(ScoreMod());
  if (!options.alibi_slopes.empty()) score = score.then(scores::alibi(options.alibi_slopes));
  FlexOptions flex;
  flex.dropout_p = options.dropout_p;
  flex.seed = options.seed;
  flex.offset = options.offset;
  const BlockMask blocks = create_block_mask(mask, q.size(0), q.size(2), q.size(1), k.size(1));
  return ag::flex_attention(q, k, v, score, blocks, flex, call.score_tables);
}

}  // namespace

MultiheadAttention::MultiheadAttention(const MultiheadAttentionConfig& config, Generator& generator)
    : config_(resolved(config)),
      head_dim_(config_.embed_dim / config_.num_heads),
      packed_(config_.kdim == config_.embed_dim && config_.vdim == config_.embed_dim &&
              config_.num_kv_heads == config_.num_heads),
      out_proj_(config_.embed_dim, config_.embed_dim, generator, config_.bias, config_.dtype) {
  const std::int64_t E = config_.embed_dim, KD = config_.num_kv_heads * head_dim_;
  const DType dtype = config_.dtype;
  if (packed_) {
    in_proj_weight_ = xavier_parameter(E + 2 * KD, E, generator, dtype);
    register_parameter("in_proj_weight", in_proj_weight_);
  } else {
    q_proj_weight_ = xavier_parameter(E, E, generator, dtype);
    k_proj_weight_ = xavier_parameter(KD, config_.kdim, generator, dtype);
    v_proj_weight_ = xavier_parameter(KD, config_.vdim, generator, dtype);
    register_parameter("q_proj_weight", q_proj_weight_);
    register_parameter("k_proj_weight", k_proj_weight_);
    register_parameter("v_proj_weight", v_proj_weight_);
  }
  if (config_.bias) {
    in_proj_bias_ = constant_parameter({E + 2 * KD}, 0.0, dtype);
    register_parameter("in_proj_bias", in_proj_bias_);
    // PyTorch's _reset_parameters zeroes out_proj.bias after Linear drew it.
    Tensor out_bias = out_proj_.bias().value();
    out_bias.fill(0.0);
  }
  register_module("out_proj", out_proj_);
  seed_ = draw_seed(generator);
}

// call.key_padding_mask [B, Tk], call.attn_mask [Tq, Tk] or [B * H, Tq, Tk] -> options.mask
// [B, 1 or H, Tq, Tk] (and options.bias, the same shape, for a floating attn_mask)
AttentionOptions attention_options(const AttentionCall& call, std::int64_t batch,
                                   std::int64_t num_heads, std::int64_t query_length,
                                   std::int64_t key_length, DType dtype) {
  const std::int64_t B = batch, H = num_heads, Tq = query_length, Tk = key_length;
  AttentionOptions o;
  if (call.is_causal) o.causal = Causal::top_left;
  if (!call.key_lengths.empty()) {
    if (static_cast<std::int64_t>(call.key_lengths.size()) != B) {
      throw Error("key_lengths", str(B) + " lengths (the batch)", str(call.key_lengths.size()));
    }
    o.key_lengths = call.key_lengths;
  }
  const Tensor& kpm = call.key_padding_mask;
  if (kpm.defined()) {
    if (kpm.dtype() != DType::boolean) {
      throw Error("key_padding_mask", "boolean (true = padded)", dtype_name(kpm.dtype()));
    }
    if (kpm.shape() != Shape{B, Tk}) {
      throw Error("key_padding_mask", "shape " + shape_string({B, Tk}), shape_string(kpm.shape()));
    }
  }
  const Tensor& am = call.attn_mask;
  std::int64_t mask_heads = 1;  // 1: the mask is the same for every head
  if (am.defined()) {
    if (am.shape() == Shape{B * H, Tq, Tk}) {
      mask_heads = H;
    } else if (am.shape() != Shape{Tq, Tk}) {
      throw Error("attn_mask",
                  "shape " + shape_string({Tq, Tk}) + " or " + shape_string({B * H, Tq, Tk}),
                  shape_string(am.shape()));
    }
  }
  if (!kpm.defined() && !am.defined()) return o;
  const bool additive = am.defined() && am.dtype() != DType::boolean;
  const std::vector<double> padded = kpm.defined() ? kpm.to_vector() : std::vector<double>();
  const std::vector<double> mask = am.defined() ? am.to_vector() : std::vector<double>();
  // PyTorch marks what is removed; qkv's mask keeps. A -inf in an additive mask removes too.
  const Shape shape = {B, mask_heads, Tq, Tk};
  std::vector<double> keep(static_cast<std::size_t>(B * mask_heads * Tq * Tk));
  std::vector<double> bias(additive ? keep.size() : 0);
  std::size_t n = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < mask_heads; ++h) {
      for (std::int64_t i = 0; i < Tq; ++i) {
        for (std::int64_t j = 0; j < Tk; ++j, ++n) {
          bool kept = padded.empty() || padded[b * Tk + j] == 0;
          if (!mask.empty()) {
            const double m = mask[((mask_heads == 1 ? 0 : b * H + h) * Tq + i) * Tk + j];
            if (additive) {
              // Only -inf removes; NaN and +inf are added and reach the row, as in PyTorch.
              const bool removed = m == -std::numeric_limits<double>::infinity();
              kept = kept && !removed;
              bias[n] = removed ? 0.0 : m;
            } else {
              kept = kept && m == 0;
            }
          }
          keep[n] = kept ? 1.0 : 0.0;
        }
      }
    }
  }
  o.mask = Tensor::from_values(shape, keep, DType::boolean);
  if (additive) o.bias = Tensor::from_values(shape, bias, dtype);
  return o;
}

// query [B, Tq, E], key [B, Tk, kdim], value [B, Tk, vdim] -> out [B, Tq, E]
AttentionResult MultiheadAttention::forward(const Var& query, const Var& key, const Var& value,
                                            const AttentionCall& call) {
  check_input("query", query, -1, config_.embed_dim);
  const std::int64_t B = query.size(0);
  check_input("key", key, B, config_.kdim);
  check_input("value", value, B, config_.vdim);
  if (value.size(1) != key.size(1)) {
    throw Error("value", "length " + str(key.size(1)) + " (from key)", str(value.size(1)));
  }
  const Var q = project_query(query);
  const auto [k, v] = project_key_value(key, value);
  return attend(q, k, v, call);
}

// query [B, Tq, E] -> q [B, Tq, Hq, D]
Var MultiheadAttention::project_query(const Var& query, std::int64_t position_start) const {
  const std::int64_t E = config_.embed_dim;
  check_input("query", query, -1, E);
  const Var& w = packed_ ? in_proj_weight_ : q_proj_weight_;
  Var q = project(query, w, 0, E, in_proj_bias_);
  q = ag::split_heads(q, config_.num_heads);
  if (config_.position == PositionEncoding::rope) q = rope(q, config_.rope_base, position_start);
  return q;
}

// key [B, Tk, kdim], value [B, Tk, vdim] -> k, v [B, Tk, Hk, D]
std::pair<Var, Var> MultiheadAttention::project_key_value(const Var& key, const Var& value,
                                                          std::int64_t position_start) const {
  const std::int64_t E = config_.embed_dim, KD = config_.num_kv_heads * head_dim_;
  check_input("key", key, -1, config_.kdim);
  check_input("value", value, key.size(0), config_.vdim);
  Var k, v;
  if (packed_) {
    k = project(key, in_proj_weight_, E, KD, in_proj_bias_);
    v = project(value, in_proj_weight_, E + KD, KD, in_proj_bias_);
  } else {
    // The separate weights hold only their own rows; the bias is still packed [E + 2 KD].
    const auto plain = [&](const Var& x, const Var& w, std::int64_t bias_row) {
      const Var y = ag::matmul(x, ag::transpose(w, 0, 1));
      return in_proj_bias_.defined() ? y + ag::slice(in_proj_bias_, 0, bias_row, bias_row + KD) : y;
    };
    k = plain(key, k_proj_weight_, E);
    v = plain(value, v_proj_weight_, E + KD);
  }
  k = ag::split_heads(k, config_.num_kv_heads);
  v = ag::split_heads(v, config_.num_kv_heads);
  if (config_.position == PositionEncoding::rope) k = rope(k, config_.rope_base, position_start);
  return {k, v};
}

// x [B, T, E] -> q [B, T, Hq, D], k, v [B, T, Hk, D]
std::tuple<Var, Var, Var> MultiheadAttention::project_self(const Var& x,
                                                           std::int64_t position_start) const {
  if (!packed_) {
    auto [k, v] = project_key_value(x, x, position_start);
    return {project_query(x, position_start), k, v};
  }
  const std::int64_t E = config_.embed_dim, KD = config_.num_kv_heads * head_dim_;
  check_input("x", x, -1, E);
  // Each output column is the same dot product of x's row with a row of in_proj_weight as in
  // the three products, from the same bias.
  const Var all = ag::linear(x, in_proj_weight_, in_proj_bias_);  // [B, T, E + 2 KD]
  Var q = ag::split_heads(ag::slice(all, 2, 0, E), config_.num_heads);
  Var k = ag::split_heads(ag::slice(all, 2, E, E + KD), config_.num_kv_heads);
  Var v = ag::split_heads(ag::slice(all, 2, E + KD, E + 2 * KD), config_.num_kv_heads);
  if (config_.position == PositionEncoding::rope) {
    q = rope(q, config_.rope_base, position_start);
    k = rope(k, config_.rope_base, position_start);
  }
  return {q, k, v};
}

// In training with dropout: this call's dropout (the module's seed, a counter offset per call).
void MultiheadAttention::add_dropout(AttentionOptions& options) {
  if (training() && config_.dropout > 0) {
    options.dropout_p = config_.dropout;
    options.seed = seed_;
    options.offset = calls_++;
  }
}

// q [B, Tq, Hq, D], k and v [B, Tk, Hk, D] -> out [B, Tq, E]
AttentionResult MultiheadAttention::attend(const Var& q, const Var& k, const Var& v,
                                           const AttentionCall& call) {
  const std::int64_t Hq = config_.num_heads, Hk = config_.num_kv_heads;
  const auto check_heads = [&](const char* name, const Var& x, std::int64_t heads) {
    const Shape expected = {q.size(0), x.size(1), heads, head_dim_};
    if (x.dim() != 4 || x.shape() != expected) {
      throw Error(name, "shape " + shape_string(expected), shape_string(x.shape()));
    }
  };
  if (q.dim() != 4) throw Error("q", "[B, Tq, Hq, D]", shape_string(q.shape()));
  check_heads("q", q, Hq);
  check_heads("k", k, Hk);
  check_heads("v", v, Hk);
  if (v.size(1) != k.size(1)) {
    throw Error("v", "length " + str(k.size(1)) + " (from k)", str(v.size(1)));
  }
  const bool flex = call.mask_mod.has_value() || call.score_mod.has_value();
  if (flex) {
    expect_no_tensor_masks(call,
                           "with mask_mod or score_mod (flex_attention takes mods, not tensors)");
  }
  if (config_.kind == AttentionKind::linear) {
    const std::string why = "with AttentionKind::linear (is_causal and key_lengths only)";
    expect_no_tensor_masks(call, why);
    if (flex) throw Error("mask_mod", "none " + why, "a mod");
    LinearOptions linear;
    linear.feature_map = config_.feature_map;
    linear.num_features = config_.num_features;
    linear.seed = config_.feature_seed;
    linear.causal = call.is_causal ? Causal::top_left : Causal::none;
    linear.key_lengths = call.key_lengths;
    AttentionResult result;
    result.out = out_proj_(ag::merge_heads(ag::linear_attention(q, k, v, linear)));
    return result;
  }
  const std::int64_t B = q.size(0), Tq = q.size(1), Tk = k.size(1);
  AttentionOptions options = attention_options(call, B, Hq, Tq, Tk, config_.dtype);
  if (config_.position == PositionEncoding::alibi) options.alibi_slopes = alibi_slopes(Hq);
  Var bias = call.position_bias;
  if (bias.defined() && options.bias.defined()) {
    bias =
        bias + Var(options.bias);  // the primitive takes one bias: the learned one and the mask's
    options.bias = Tensor();
  }
  AttentionResult result;
  if (call.need_weights) {
    AttentionOptions w = options;
    if (bias.defined()) w.bias = bias.value();
    const Tensor p = attention_weights(q.value(), k.value(), w);       // [B, Hq, Tq, Tk]
    result.weights = call.average_attn_weights ? ops::mean(p, 1) : p;  // [B, Tq, Tk]
  }
  add_dropout(options);
  if (flex && config_.kind == AttentionKind::materialized) {
    throw Error("mask_mod", "none with AttentionKind::materialized (mods run fused)", "a mod");
  }
  const Var attended = flex ? flex_attend(q, k, v, call, options)
                       : config_.kind == AttentionKind::materialized
                           ? ag::attention_decomposed(q, k, v, options, bias)
                           : ag::attention(q, k, v, options, bias);  // [B, Tq, Hq, D]
  result.out = out_proj_(ag::merge_heads(attended));
  return result;
}

// x [n, E] -> [n, E]
Var MultiheadAttention::forward_packed(const Var& x, const std::vector<std::int64_t>& lengths,
                                       std::int64_t T) {
  const std::int64_t E = config_.embed_dim;
  if (config_.kind != AttentionKind::softmax) {
    throw Error("kind", "AttentionKind::softmax for packed rows",
                config_.kind == AttentionKind::linear ? "linear" : "materialized");
  }
  if (config_.position == PositionEncoding::rope) {
    throw Error("position", "none or alibi for packed rows (RoPE would rotate by packed positions)",
                "rope");
  }
  if (x.dim() != 2 || x.size(1) != E) {
    throw Error("x", "[n, " + str(E) + "]", shape_string(x.shape()));
  }
  const std::int64_t n = x.size(0), B = static_cast<std::int64_t>(lengths.size());
  const auto [q, k, v] = project_self(ag::reshape(x, {1, n, E}));  // [1, n, H, D] each
  const auto padded = [&](const Var& y) {                          // [1, n, H, D] -> [B, T, H, D]
    return ag::unpack_rows(ag::reshape(y, {n, y.size(2), head_dim_}), lengths, T);
  };
  AttentionCall call;
  call.key_lengths = lengths;
  AttentionOptions options = attention_options(call, B, config_.num_heads, T, T, config_.dtype);
  // Rows past a length are skipped, except under ALiBi, whose diagonal forward() places from the
  // padded query length.
  if (config_.position == PositionEncoding::alibi) {
    options.alibi_slopes = alibi_slopes(config_.num_heads);
  } else {
    options.query_lengths = lengths;
  }
  add_dropout(options);
  const Var attended = ag::attention(padded(q), padded(k), padded(v), options);  // [B, T, H, D]
  const Var rows = ag::pack_rows(attended, lengths);                             // [n, H, D]
  return ag::reshape(
      out_proj_(ag::merge_heads(ag::reshape(rows, {1, n, config_.num_heads, head_dim_}))), {n, E});
}

}  // namespace qkv::nn
