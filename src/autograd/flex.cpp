// flex_attention as one primitive: the fused forward saving out and lse, and the fused backward.
#include <utility>
#include <vector>

#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]
Var flex_attention(const Var& q, const Var& k, const Var& v, const ScoreMod& score_mod,
                   const BlockMask& block_mask, const FlexOptions& options) {
  const Tensor qv = q.value(), kv = k.value(), vv = v.value();
  // out, lse = flex_attention(q, k, v, score_mod, block_mask)
  AttentionOutput fwd = qkv::flex_attention(qv, kv, vv, score_mod, block_mask, options);
  const Tensor out = fwd.out, lse = fwd.lse;
  return detail::record(std::move(fwd.out), {&q, &k, &v}, [=](const Tensor& dout) {
    // dq, dk, dv = flex_attention_backward(dout, q, k, v, out, lse): P from lse, dS = P (dP - D)
    // ds'/ds
    const AttentionGrads g =
        qkv::flex_attention_backward(dout, qv, kv, vv, out, lse, score_mod, block_mask, options);
    return std::vector<Tensor>{g.dq, g.dk, g.dv};
  });
}

}  // namespace qkv::autograd
