// Linear attention as one node: qkv::linear_attention forward, qkv::linear_attention_backward
// (which recomputes the forward) as its backward.
#include <optional>
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]
Var linear_attention(const Var& q, const Var& k, const Var& v, const LinearOptions& options) {
  ops::expect_any_floating(q.value(), "q");
  const std::optional<DType> autocast = autocast_dtype();
  if (autocast && q.dtype() == DType::f32) {
    // out = linear_attention(q, k, v) in the autocast dtype: q, k, v and out rounded to it (the
    // kernel computes in f32 between); out in f32
    return cast(
        linear_attention(cast(q, *autocast), cast(k, *autocast), cast(v, *autocast), options),
        DType::f32);
  }
  const Tensor qv = q.value(), kv = k.value(), vv = v.value();
  // out = linear_attention(q, k, v)
  return detail::record(qkv::linear_attention(qv, kv, vv, options), {&q, &k, &v},
                        [=](const Tensor& dout) {
                          // dq, dk, dv = linear_attention_backward(dout, q, k, v)
                          LinearGrads g = qkv::linear_attention_backward(dout, qv, kv, vv, options);
                          return std::vector<Tensor>{g.dq, g.dk, g.dv};
                        });
}

}  // namespace qkv::autograd
