// Linear attention as one node: qkv::linear_attention forward, qkv::linear_attention_backward
// (which recomputes the forward) as its backward.
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]
Var linear_attention(const Var& q, const Var& k, const Var& v, const LinearOptions& options) {
  kernels::expect_floating(q.value(), "q");
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
