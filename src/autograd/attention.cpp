// Attention two ways: one primitive whose backward is the kernel's, and the same function
// composed from the engine's ops, whose backward the engine derives.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include "attention/common.hpp"
#include "attention/validate.hpp"
#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
namespace {

// The options with the learned bias's value in place of options.bias.
AttentionOptions with_bias(const AttentionOptions& options, const Var& bias) {
  AttentionOptions o = options;
  if (bias.defined()) {
    if (options.bias.defined()) {
      throw Error("bias", "either a Var bias or options.bias, not both", "both");
    }
    o.bias = bias.value();
  }
  return o;
}

// For each (b, h, i, j) of [B, Hq, Tq, Tk]: whether key j is dropped for query i (lengths,
// causal, window, mask: step 3 of qkv/attention.hpp), and the ALiBi term -slope_h |i + tk - tq -
// j|.
struct MaskAndAlibi {
  Tensor dropped;  // boolean [B, Hq, Tq, Tk]
  bool any_dropped = false;
  Tensor alibi;  // [B, Hq, Tq, Tk] in the dtype of q; undefined without ALiBi
};

MaskAndAlibi mask_and_alibi(const qkv::kernels::Dims& d, const AttentionOptions& o, DType dtype) {
  MaskAndAlibi r;
  const Shape full = {d.B, d.Hq, d.Tq, d.Tk};
  r.dropped = Tensor::empty(full, DType::boolean);
  const Tensor keep = o.mask.defined() ? o.mask.contiguous() : Tensor();
  // The kernels' own mask mod: the rules are the ones of qkv/masks.hpp.
  const qkv::kernels::BuiltinMask mask = qkv::attention::builtin_mask(d, o, keep);
  auto* dropped = r.dropped.data_as<std::uint8_t>();
  std::vector<double> alibi;
  if (!o.alibi_slopes.empty()) alibi.resize(r.dropped.numel());
  std::int64_t n = 0;
  for (std::int64_t b = 0; b < d.B; ++b) {
    const std::int64_t offset = mask.lengths.tk(b) - mask.lengths.tq(b);
    for (std::int64_t h = 0; h < d.Hq; ++h) {
      for (std::int64_t i = 0; i < d.Tq; ++i) {
        for (std::int64_t j = 0; j < d.Tk; ++j, ++n) {
          dropped[n] = !mask(b, h, i, j);
          r.any_dropped = r.any_dropped || dropped[n];
          if (!alibi.empty()) {
            alibi[n] = -o.alibi_slopes[h] * static_cast<double>(std::llabs(i + offset - j));
          }
        }
      }
    }
  }
  if (!alibi.empty()) r.alibi = Tensor::from_values(full, alibi, dtype);
  return r;
}

}  // namespace

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], bias broadcastable to [B, Hq, Tq, Tk]
// -> out [B, Tq, Hq, Dv]
Var attention(const Var& q, const Var& k, const Var& v, const AttentionOptions& options,
              const Var& bias) {
  const std::optional<DType> autocast = autocast_dtype();
  if (autocast && q.dtype() == DType::f32) {
    // out = attention(q, k, v) in the autocast dtype: q, k, v and out rounded to it, the softmax
    // and the bias (kept f32, as its gradient) in f32; out in f32
    return cast(
        attention(cast(q, *autocast), cast(k, *autocast), cast(v, *autocast), options, bias),
        DType::f32);
  }
  const AttentionOptions o = with_bias(options, bias);
  // out, lse = attention_forward(q, k, v)
  AttentionOutput fwd = attention_forward(q.value(), k.value(), v.value(), o);
  const Tensor qv = q.value(), kv = k.value(), vv = v.value();
  const Tensor out = fwd.out, lse = fwd.lse;
  return detail::record(std::move(fwd.out), {&q, &k, &v, &bias}, [=](const Tensor& dout) {
    // dq, dk, dv, dbias = attention_backward(dout, q, k, v, out, lse): P recomputed from lse
    AttentionGrads g = attention_backward(dout, qv, kv, vv, out, lse, o);
    return std::vector<Tensor>{g.dq, g.dk, g.dv, g.dbias};
  });
}

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], bias broadcastable to [B, Hq, Tq, Tk]
// -> out [B, Tq, Hq, Dv]
Var attention_decomposed(const Var& q, const Var& k, const Var& v, const AttentionOptions& options,
                         const Var& bias) {
  const AttentionOptions o = with_bias(options, bias);
  const qkv::kernels::Dims d = qkv::attention::validate_inputs(q.value(), k.value(), v.value(), o);
  const std::int64_t B = d.B, Tq = d.Tq, Tk = d.Tk, Hq = d.Hq, Hk = d.Hk, G = d.group();
  const MaskAndAlibi mods = mask_and_alibi(d, o, q.dtype());
  // Query head h = hk * G + g reads k/v head hk: the G query heads of a k/v head are one batch
  // dimension that k and v broadcast along.
  const Var qh = reshape(permute(q, {0, 2, 1, 3}), {B, Hk, G, Tq, d.D});   // [B, Hk, G, Tq, D]
  const Var kt = reshape(permute(k, {0, 2, 3, 1}), {B, Hk, 1, d.D, Tk});   // [B, Hk, 1, D, Tk]
  const Var vh = reshape(permute(v, {0, 2, 1, 3}), {B, Hk, 1, Tk, d.Dv});  // [B, Hk, 1, Tk, Dv]
  // S = scale * Q K^T  [B, Hq, Tq, Tk]
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(d.D)));
  Var s = reshape(matmul(qh, kt), {B, Hq, Tq, Tk}) * scale;
  if (o.softcap > 0) s = tanh(s / o.softcap) * o.softcap;
  if (bias.defined()) {
    s = s + bias;
  } else if (o.bias.defined()) {
    s = s + Var(o.bias.to(q.dtype()));
  }
  if (mods.alibi.defined()) s = s + Var(mods.alibi);
  if (mods.any_dropped) s = masked_fill(s, mods.dropped, -std::numeric_limits<double>::infinity());
  Var p = softmax(s, -1);  // a row with every key dropped is 0
  if (o.dropout_p > 0) p = dropout(p, o.dropout_p, o.seed, o.offset);
  // O = P V  [B, Hk, G, Tq, Dv] -> [B, Tq, Hq, Dv]
  const Var out = matmul(reshape(p, {B, Hk, G, Tq, Tk}), vh);
  return permute(reshape(out, {B, Hq, Tq, d.Dv}), {0, 2, 1, 3});
}

}  // namespace qkv::autograd
